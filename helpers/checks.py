"""Checkers for the exercises of chapter 4 (multi-head attention).

Each ``check_*`` function takes the reader's code, runs it on small seeded inputs, and either
returns a line starting with "Correct:" or raises ``AssertionError`` with a hint that names
the likely mistake. Shapes: ``B`` batch, ``T`` sequence, ``H`` heads, ``D`` model width
(``d_model``), ``d_head = D / H``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = [
    "split_heads",
    "merge_heads",
    "mha_parameter_count",
    "check_split_heads",
    "check_merge_heads",
    "check_parameter_count",
]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, d_head): head ``h`` gets features ``h*d_head:(h+1)*d_head``."""
    batch, seq_len, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; "
            "pick num_heads among the divisors of d_model"
        )
    return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d_head) -> (B, T, D): the inverse of ``split_heads``."""
    batch, num_heads, seq_len, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_head)


def mha_parameter_count(d_model: int, num_heads: int, bias: bool = False) -> int:
    """Parameters of standard multi-head attention: ``4 D^2`` weights (+ ``4 D`` biases).

    ``num_heads`` does not enter: the heads split the width D, they do not add to it.
    """
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def _shape(value) -> str:
    if isinstance(value, torch.Tensor):
        return str(tuple(value.shape))
    return type(value).__name__


_CASES = ((2, 5, 12, 3), (1, 7, 8, 2), (3, 4, 16, 4), (2, 3, 6, 6))


def check_split_heads(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check a reader's ``split_heads(x, num_heads)``: (B, T, D) -> (B, H, T, d_head)."""
    generator = torch.Generator().manual_seed(4)
    for batch, seq_len, d_model, num_heads in _CASES:
        x = torch.randn(batch, seq_len, d_model, generator=generator)
        expected = split_heads(x, num_heads)
        got = fn(x, num_heads)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            raise AssertionError(
                f"for x of shape {tuple(x.shape)} and num_heads={num_heads} expected shape "
                f"{tuple(expected.shape)} = (B, H, T, d_head), got {_shape(got)}"
            )
        if not torch.equal(got, expected):
            d_head = d_model // num_heads
            scrambled = x.reshape(batch, num_heads, seq_len, d_head)
            hint = (
                "you reshaped straight to (B, H, T, d_head): that reinterprets the memory "
                "and mixes positions between heads; view as (B, T, H, d_head) first, then "
                "swap the T and H axes with .transpose(1, 2)"
                if torch.equal(got, scrambled)
                else "head h must hold features h*d_head:(h+1)*d_head of every position"
            )
            raise AssertionError(f"right shape, wrong content: {hint}")
    return "Correct: your split_heads gives every head its own slice of the features."


def check_merge_heads(fn: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Check a reader's ``merge_heads(x)``: (B, H, T, d_head) -> (B, T, D), inverse of splitting."""
    generator = torch.Generator().manual_seed(5)
    for batch, seq_len, d_model, num_heads in _CASES:
        x = torch.randn(batch, seq_len, d_model, generator=generator)
        heads = split_heads(x, num_heads)
        got = fn(heads)
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            raise AssertionError(
                f"for heads of shape {tuple(heads.shape)} expected shape {tuple(x.shape)} "
                f"= (B, T, D), got {_shape(got)}"
            )
        if not torch.equal(got, x):
            hint = (
                "you reshaped (B, H, T, d_head) straight to (B, T, D): move the head axis "
                "next to d_head first with .transpose(1, 2), then reshape"
                if torch.equal(got, heads.reshape(x.shape))
                else "merge_heads(split_heads(x, H)) must give x back exactly"
            )
            raise AssertionError(f"right shape, wrong content: {hint}")
    return "Correct: your merge_heads undoes split_heads exactly."


def check_parameter_count(fn: Callable[[int, int, bool], int]) -> str:
    """Check a reader's ``count(d_model, num_heads, bias)`` against torch's own layer."""
    for d_model, num_heads in ((8, 1), (8, 2), (12, 3), (64, 8), (64, 16)):
        for bias in (False, True):
            module = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True)
            expected = sum(parameter.numel() for parameter in module.parameters())
            got = fn(d_model, num_heads, bias)
            if got != expected:
                hint = ""
                if fn(d_model, 1, bias) != got:
                    hint = (
                        " Your count changes with num_heads, but the heads split the width "
                        "d_model between them: more heads, same number of weights."
                    )
                elif bias and got == expected - 4 * d_model:
                    hint = " With bias=True each of the four projections has d_model biases."
                raise AssertionError(
                    f"d_model={d_model}, num_heads={num_heads}, bias={bias}: expected "
                    f"{expected} parameters, got {got}.{hint}"
                )
    return "Correct: your formula matches torch.nn.MultiheadAttention for every case tried."
