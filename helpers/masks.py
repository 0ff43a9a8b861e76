"""Masks: every rule that decides which key a query may attend to (chapter 2,
and after).

The one convention of the whole package: a **boolean** tensor where ``True``
means "this query may attend to this key", as in
``torch.nn.functional.scaled_dot_product_attention``.
(``torch.nn.MultiheadAttention`` uses the opposite: its ``key_padding_mask`` and
boolean ``attn_mask`` mean True = ignore; invert with ``~mask`` when talking to
it.) Against per-head scores (B, H, Tq, Tk), a 3-D mask is always (B, Tq, Tk),
one mask per sequence shared by the heads. Float masks are refused by the
attention functions: a 0/1 float mask and an additive 0/-inf mask look alike but
mean opposite things, so the caller says which one it is (:func:`additive_mask`
turns a boolean mask into the additive kind).

- :func:`causal_mask`, :func:`earlier_mask`: who comes before whom (chapter 2);
- :func:`padding_mask` (from lengths), :func:`token_padding_mask` (from a
  padding token) and :func:`causal_padding_mask` (a decoder's self-attention):
  which keys are real tokens;
- :func:`position_mask` and :func:`sliding_window_mask`: causal and local
  attention between tokens at given positions, the one rule behind chapter 13's
  windows, the tiles of :func:`helpers.efficient.tiled_attention` and
  :class:`helpers.gpt.CausalSelfAttention`.

Every chapter and every module imports its masks from here, their one home.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from helpers import _validate as check

__all__ = [
    "causal_mask",
    "earlier_mask",
    "padding_mask",
    "token_padding_mask",
    "causal_padding_mask",
    "additive_mask",
    "position_mask",
    "sliding_window_mask",
]


# ------------------------------------------------------------------------ order


def causal_mask(T: int, device: torch.device | str | None = None) -> Tensor:
    """The (T, T) boolean mask of causal attention: query t may attend to keys
    0..t.

    True on and below the diagonal (the package's convention: True = may
    attend).
    """
    check.positive_int("T", T)
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def earlier_mask(T: int, device: torch.device | str | None = None) -> Tensor:
    """The (T, T) boolean mask of the keys strictly before each query: key j <
    query t.

    :func:`causal_mask` without its diagonal: a token does not see itself.
    """
    check.positive_int("T", T)
    return torch.ones(T, T, dtype=torch.bool, device=device).tril(-1)


# ---------------------------------------------------------------------- padding


def padding_mask(
    lengths: Tensor | Sequence[int], max_len: int | None = None
) -> Tensor:
    """A key-padding mask from sequence lengths, shape (B, 1, 1, Tk) with Tk =
    max_len.

    Entry [b, 0, 0, j] is True when key j is a real token of sequence b (j <
    lengths[b]). The two size-1 dimensions broadcast over heads and queries, so
    the same mask serves self-attention (Tq = Tk) and cross-attention (any Tq);
    ``mask[:, 0]`` is the (B, 1, Tk) form for 3-D scores. ``max_len`` defaults
    to the longest length.
    """
    _check_lengths(lengths, max_len)
    if not isinstance(lengths, Tensor):  # a list of ints
        lengths = torch.tensor(list(lengths), dtype=torch.long)
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)
    return (positions < lengths[:, None])[:, None, None, :]


def token_padding_mask(tokens: Tensor, pad_id: int | None) -> Tensor | None:
    """The key-padding mask (B, 1, 1, T) of token ids (B, T): True where a token
    is not ``pad_id``. None when there is no padding token (``pad_id=None``):
    every key is real."""
    return None if pad_id is None else (tokens != pad_id)[:, None, None, :]


def causal_padding_mask(tokens: Tensor, pad_id: int | None) -> Tensor:
    """A decoder's self-attention mask for token ids (B, T): causal, and never a
    padding key.

    Shape (T, T) without ``pad_id``, (B, 1, T, T) with it.
    """
    mask = causal_mask(tokens.shape[-1], tokens.device)
    padding = token_padding_mask(tokens, pad_id)
    return mask if padding is None else mask & padding


def additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The additive form of a boolean mask: 0 where True (may attend), -inf
    where False.

    Adding it to the scores before the softmax is the same as masking them; this
    is the float ``attn_mask`` that ``F.scaled_dot_product_attention`` accepts.
    """
    check.bool_mask(mask)
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


# -------------------------------------------------------------------- positions


def position_mask(
    query_positions: Tensor,
    key_positions: Tensor,
    *,
    causal: bool = True,
    window: int | None = None,
) -> Tensor:
    """The (Tq, Tk) boolean mask (True = may attend) of queries and keys at the
    given positions.

    ``causal``: query at position i sees keys at j <= i. ``window``: only keys
    less than ``window`` positions away (j > i - window when causal, |i - j| <
    window otherwise). The positions need not start at 0: a decoder with a
    key/value cache passes the new queries' positions and every cached key's.
    The one rule behind :func:`sliding_window_mask`, the tiles of
    :func:`helpers.efficient.tiled_attention` and
    :class:`helpers.gpt.CausalSelfAttention`.
    """
    # how far back each key is
    offset = query_positions[:, None] - key_positions[None, :]
    allowed = torch.ones_like(offset, dtype=torch.bool)
    if causal:
        allowed &= offset >= 0
    if window is not None:
        allowed &= offset < window if causal else offset.abs() < window
    return allowed


def sliding_window_mask(
    T: int,
    window: int,
    *,
    causal: bool = True,
    device: torch.device | str | None = None,
) -> Tensor:
    """The (T, T) boolean mask of sliding-window attention (True = may attend).

    Causal (Mistral's kind): query t sees keys t - window + 1, ..., t, that is
    ``window`` keys counting itself. Not causal: keys less than ``window``
    positions away on either side, ``2 * window - 1`` keys. ``window >= T``
    (causal) gives the plain causal mask.
    """
    check.positive_int("T", T)
    check.positive_int("window", window)
    check.boolean("causal", causal)
    positions = torch.arange(T, device=device)
    return position_mask(positions, positions, causal=causal, window=window)


# ------------------------------------------------------------ this module's checks
# Each has one caller, above; the generic checks are in helpers._validate.


def _check_lengths(lengths, max_len) -> None:
    """Sequence lengths (a 1-D integer tensor or a list of ints) and a
    ``max_len`` >= each (None: the longest length)."""
    if not isinstance(lengths, Tensor):
        if isinstance(lengths, (str, bytes)) or not isinstance(
            lengths, Sequence
        ):
            raise TypeError(
                "lengths must be a 1-D integer tensor or a list of "
                f"ints, got {lengths!r}"
            )
        if not all(
            isinstance(n, int) and not isinstance(n, bool) for n in lengths
        ):
            raise TypeError(f"lengths must contain ints, got {list(lengths)!r}")
        lengths = torch.tensor(list(lengths), dtype=torch.long)
    if (
        lengths.dtype.is_floating_point
        or lengths.dtype == torch.bool
        or lengths.is_complex()
    ):
        raise TypeError(
            f"lengths must be an integer tensor, got dtype {lengths.dtype}; "
            "use lengths.long()"
        )
    if lengths.ndim != 1 or lengths.numel() == 0:
        raise ValueError(
            "lengths must be a non-empty 1-D tensor (one length per "
            "sequence), got shape "
            f"{tuple(lengths.shape)}"
        )
    if (lengths < 0).any():
        raise ValueError(
            f"lengths must be non-negative, got {lengths.tolist()}"
        )
    longest = int(lengths.max())
    if max_len is not None and (
        isinstance(max_len, bool) or not isinstance(max_len, int)
    ):
        raise TypeError(f"max_len must be an int or None, got {max_len!r}")
    width = longest if max_len is None else max_len
    if width < 1 or width < longest:
        raise ValueError(
            f"max_len={width} must be positive and at least the longest "
            f"length {longest}; "
            "leave it as None to use the longest length"
        )
