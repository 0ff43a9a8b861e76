"""Chapter 2's task: sequences whose second half repeats the first, for a tiny
next-token model trained with and without the causal mask.

The first ``half`` tokens are drawn uniformly from ``vocab_size`` symbols; the
next ``half`` copy them in order. A model that predicts each next token from
the tokens before it can get the copied half right and must guess the random
half, so its loss cannot fall below :func:`loss_floor`. A model that sees the
whole sequence reads each answer instead, and its training loss falls to zero.
The model and its training loop are written in the chapter.
"""

from __future__ import annotations

import math

import torch

from helpers import _validate as check

__all__ = ["VOCAB_SIZE", "HALF", "copy_sequences", "loss_floor"]

VOCAB_SIZE = 16
HALF = 8


def copy_sequences(
    num_sequences: int,
    half: int = HALF,
    vocab_size: int = VOCAB_SIZE,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``num_sequences`` int64 sequences of length ``2 * half``: ``half``
    uniform random tokens, then the same tokens again."""
    check.positive_int("num_sequences", num_sequences)
    check.positive_int("half", half)
    check.positive_int("vocab_size", vocab_size)
    if generator is not None:
        check.generator(generator)
    first = torch.randint(
        vocab_size, (num_sequences, half), generator=generator
    )
    return torch.cat([first, first], dim=1)


def loss_floor(half: int = HALF, vocab_size: int = VOCAB_SIZE) -> float:
    """The lowest mean next-token cross-entropy (nats) a model that sees only
    the past can reach on :func:`copy_sequences`: of the ``2 * half - 1``
    targets, the ``half - 1`` in the random half cost ``log(vocab_size)`` each
    (a uniform guess is the best there is), the ``half`` copied ones cost 0."""
    check.positive_int("half", half)
    check.positive_int("vocab_size", vocab_size)
    return (half - 1) / (2 * half - 1) * math.log(vocab_size)
