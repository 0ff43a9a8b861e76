"""Chapters 3 and 4's lookup tasks: a memory of tokens, each an *address* and
a *symbol*, and a request for what sits at one address (chapter 3,
associative recall) or at two (chapter 4, two lookups at once).

Every example draws fresh random symbols, so a model cannot memorize them: it
must find the right token by its address and read its symbol out, which is what
attention does. In the two-lookup task memory token ``i`` is
``[one_hot(i), one_hot(symbol_i)]`` (width ``num_tokens + num_symbols``).

- :func:`two_lookup_batch`: the request is ``[one_hot(a), one_hot(b)]`` for
  two different addresses ``a``, ``b``; the targets are the symbols at ``a``
  and at ``b``, in that order. With ``num_tokens == num_symbols`` every width
  is ``2 * num_tokens``, so a :class:`helpers.attention.MultiHeadAttention` of
  that width reads the request as its query, the memory as its keys and values,
  and its output, split in two halves, gives the logits of the two answers.
- :func:`recall_batch`: the same with one address, and random codes instead of
  one-hot ones (:func:`recall_codes`, entries of variance 1, so that a wide head
  meets the large dot products of chapter 3's variance argument): memory token
  ``i`` is ``address_codes[i] + symbol_codes[symbol_i]``, the request is
  ``address_codes[a]``, the target is the symbol at ``a``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers import _validate as check

__all__ = ["two_lookup_batch", "recall_codes", "recall_batch", "lookup_weights"]


def _memory(
    batch_size: int, num_tokens: int, num_symbols: int, generator
) -> tuple[Tensor, Tensor]:
    symbols = torch.randint(
        num_symbols, (batch_size, num_tokens), generator=generator
    )
    addresses = torch.eye(num_tokens).expand(batch_size, -1, -1)
    one_hot = torch.nn.functional.one_hot(symbols, num_symbols).float()
    return torch.cat([addresses, one_hot], dim=-1), symbols


def _check(batch_size, num_tokens, num_symbols, generator) -> None:
    check.positive_int("batch_size", batch_size)
    check.positive_int("num_tokens", num_tokens)
    check.positive_int("num_symbols", num_symbols)
    if generator is not None:
        check.generator(generator)


def two_lookup_batch(
    batch_size: int,
    num_tokens: int = 8,
    num_symbols: int = 8,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A batch of the two-lookup task.

    Returns ``request`` (B, 1, 2N), ``memory`` (B, N, N + S), ``targets``
    (B, 2) int64 (the symbols at the two requested addresses) and
    ``addresses`` (B, 2) int64 (the two addresses, always different). N is
    ``num_tokens`` (at least 2), S is ``num_symbols``.
    """
    _check(batch_size, num_tokens, num_symbols, generator)
    if num_tokens < 2:
        raise ValueError(
            f"num_tokens={num_tokens} leaves no two different addresses to "
            "request; pass num_tokens >= 2"
        )
    memory, symbols = _memory(batch_size, num_tokens, num_symbols, generator)
    first = torch.randint(num_tokens, (batch_size,), generator=generator)
    # a second address different from the first: shift by 1 .. N-1
    shift = torch.randint(1, num_tokens, (batch_size,), generator=generator)
    addresses = torch.stack([first, (first + shift) % num_tokens], dim=1)
    one_hot = torch.nn.functional.one_hot(addresses, num_tokens).float()
    request = one_hot.flatten(1)[:, None]  # [one_hot(a), one_hot(b)]
    targets = symbols.gather(1, addresses)
    return request, memory, targets, addresses


def recall_codes(
    width: int,
    num_tokens: int = 8,
    num_symbols: int = 8,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Random codes for associative recall: ``address_codes`` (N, width) and
    ``symbol_codes`` (S, width), entries independent with mean 0 and variance
    1 (the assumption of the chapter's variance argument)."""
    check.positive_int("width", width)
    _check(1, num_tokens, num_symbols, generator)
    addresses = torch.randn(num_tokens, width, generator=generator)
    symbols = torch.randn(num_symbols, width, generator=generator)
    return addresses, symbols


def recall_batch(
    batch_size: int,
    codes: tuple[Tensor, Tensor],
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A batch of associative recall: which symbol sits at the requested
    address?

    ``codes`` from :func:`recall_codes`. Memory token ``i`` is
    ``address_codes[i] + symbol_codes[symbol_i]`` (fresh random symbols in
    every example); the request is ``address_codes[a]``. Returns ``request``
    (B, 1, width), ``memory`` (B, N, width), ``targets`` (B,) int64 (the symbol
    at ``a``) and ``addresses`` (B,) int64.
    """
    if not (isinstance(codes, tuple) and len(codes) == 2):
        raise TypeError(
            "codes must be the pair (address_codes, symbol_codes) that "
            f"recall_codes returns, got {type(codes).__name__}"
        )
    address_codes, symbol_codes = codes
    _check(batch_size, address_codes.shape[0], symbol_codes.shape[0], generator)
    num_tokens, num_symbols = address_codes.shape[0], symbol_codes.shape[0]
    symbols = torch.randint(
        num_symbols, (batch_size, num_tokens), generator=generator
    )
    memory = address_codes + symbol_codes[symbols]
    addresses = torch.randint(num_tokens, (batch_size,), generator=generator)
    request = address_codes[addresses][:, None]
    targets = symbols.gather(1, addresses[:, None])[:, 0]
    return request, memory, targets, addresses


def lookup_weights(weights: Tensor, addresses: Tensor) -> Tensor:
    """The attention each head puts on each requested address, averaged over
    the batch.

    ``weights`` (B, H, 1, N) from ``return_attention=True`` and ``addresses``
    (B, K) int64 -> (H, K): entry (h, j) is head h's mean weight on the token
    at the j-th requested address.
    """
    check.tensor("weights", weights, floating=True, min_ndim=4)
    check.tensor("addresses", addresses, min_ndim=2)
    heads = weights.shape[1]
    index = addresses[:, None, None, :].expand(-1, heads, 1, -1)
    return weights.gather(-1, index)[:, :, 0].mean(dim=0)
