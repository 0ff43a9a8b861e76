"""Checkers for the book's exercises, all in one place.

Each ``check_*`` function takes the reader's code, runs it on small seeded
inputs, and either returns a line starting with "Correct:" or raises
``AssertionError`` with a hint that names the likely mistake. They are grouped
by chapter:

| chapter | checkers |
| --- | --- |
| 1 kernel regression | :func:`check_kernel_regression` |
| 2-3 masking, attention | :func:`check_sliding_window_mask`, :func:`check_attention` |
| 4 multi-head attention | :func:`check_split_heads`, :func:`check_merge_heads`, |
| | :func:`check_parameter_count` |
| 5 positional encoding | :func:`check_fixed_base_encoding` |
| 6 encoder | :func:`check_rms_norm`, :func:`check_block_parameter_count` |
| 7 reversal | :func:`check_sequence_accuracy` |
| 9 encoder-decoder | :func:`check_decoder_input` |
| 10 decoder-only model | :func:`check_sampling_distribution` |
| 12 long sequences | :func:`check_softmax_merge` |
| 13 vision transformer | :func:`check_patchify` |
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers import _validate as check
from helpers.analysis import count_parameters
from helpers.attention import split_heads
from helpers.transformer import EncoderBlock, RMSNorm

__all__ = [
    "check_kernel_regression",
    "check_attention",
    "check_sliding_window_mask",
    "mha_parameter_count",
    "check_split_heads",
    "check_merge_heads",
    "check_parameter_count",
    "check_fixed_base_encoding",
    "check_rms_norm",
    "check_block_parameter_count",
    "check_sequence_accuracy",
    "check_decoder_input",
    "check_sampling_distribution",
    "check_softmax_merge",
    "check_patchify",
]


def _describe(value) -> str:
    return (
        f"shape {tuple(value.shape)}"
        if isinstance(value, Tensor)
        else type(value).__name__
    )


# -------------------------------------------------------------------- chapter 1


def check_kernel_regression(
    fn: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor
    ],
) -> str:
    """Check a reader's Laplace-kernel regression ``fn(queries, keys, values,
    width)``.

    The Laplace kernel is ``exp(-|q - k| / width)``; the prediction is the
    kernel-weighted average of the values. Raises AssertionError with a hint
    when ``fn`` is wrong.
    """
    generator = torch.Generator().manual_seed(1)
    queries = torch.rand(7, generator=generator) * 10
    keys = torch.rand(11, generator=generator) * 10
    values = torch.randn(11, generator=generator)
    for width in (0.3, 1.0, 4.0):
        expected = (
            torch.softmax(-(queries[:, None] - keys[None, :]).abs() / width, -1)
            @ values
        )
        got = fn(queries, keys, values, width)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            raise AssertionError(
                f"expected a tensor of shape {tuple(expected.shape)} (one "
                f"prediction per query), got {_describe(got)}"
            )
        if not torch.allclose(got, expected, atol=1e-5):
            distances = (queries[:, None] - keys[None, :]).abs()
            wrong_axis = torch.exp(-distances / width)
            wrong_axis = (wrong_axis / wrong_axis.sum(0)) @ values
            hint = (
                "your weights are normalized over the queries (axis 0); "
                "normalize each query's weights over the keys (axis -1)"
                if torch.allclose(got, wrong_axis, atol=1e-5)
                else "compare your weights with softmax(-|q - k| / width) over the keys"
            )
            raise AssertionError(f"wrong predictions for width={width}: {hint}")
    return "Correct: your Laplace-kernel regression matches the reference."


# ----------------------------------------------------------------- chapters 2-3


def _reference_attention(
    q: Tensor, k: Tensor, v: Tensor, dim: int = -1, scaled: bool = True
):
    scores = (
        q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scaled else 1.0)
    )
    return scores.softmax(dim=dim) @ v


def check_attention(fn) -> str:
    """Check a reader's ``fn(q, k, v)`` (returning the output, or (output,
    weights)).

    Runs it on seeded inputs: Tq == Tk (where swapped queries and keys still
    run), Tq != Tk, then with batch dimensions; returns a line starting with
    "Correct:" or raises AssertionError naming the likely mistake.
    """
    if not callable(fn):
        raise TypeError(
            f"pass your attention function itself, got {type(fn).__name__}"
        )
    gen = torch.Generator().manual_seed(0)
    cases = (
        ((4, 4), (4, 4), 3),
        ((3, 4), (5, 4), 2),
        ((2, 3, 4, 8), (2, 3, 6, 8), 5),
    )
    for shape_q, shape_k, dv in cases:
        q, k = (
            torch.randn(*shape_q, generator=gen),
            torch.randn(*shape_k, generator=gen),
        )
        v = torch.randn(*shape_k[:-1], dv, generator=gen)
        batched = q.ndim > 2
        try:
            result = fn(q, k, v)
        except Exception as error:
            hint = (
                "it works without batch dimensions, so use k.transpose(-2, "
                "-1), not k.T, so that batch dimensions pass through"
                if batched
                else "check the shapes: scores q @ k^T are (Tq, Tk), and weights @ v is (Tq, dv)"
            )
            raise AssertionError(
                f"your function raised {type(error).__name__}: {error} on q "
                f"{tuple(q.shape)}, "
                f"k {tuple(k.shape)}, v {tuple(v.shape)}; {hint}"
            ) from None
        output = result[0] if isinstance(result, tuple) else result
        expected = _reference_attention(q, k, v)
        if not isinstance(output, Tensor) or output.shape != expected.shape:
            raise AssertionError(
                f"expected an output of shape {tuple(expected.shape)} (..., "
                f"Tq, dv), got {_describe(output)}"
            )
        if torch.allclose(output, expected, atol=1e-5):
            continue
        if torch.allclose(
            output, _reference_attention(q, k, v, scaled=False), atol=1e-5
        ):
            raise AssertionError(
                "the scores are not scaled: divide q @ k^T by sqrt(d)"
            )
        if torch.allclose(
            output, _reference_attention(q, k, v, dim=-2), atol=1e-5
        ):
            raise AssertionError(
                "the softmax runs over queries: take it over the keys, dim=-1"
            )
        if q.shape == k.shape and torch.allclose(
            output, _reference_attention(k, q, v), atol=1e-5
        ):
            raise AssertionError(
                "queries and keys are swapped: the scores are q @ k^T (one "
                "row per query), not k @ q^T"
            )
        raise AssertionError(
            "the output differs from softmax(q k^T / sqrt(d)) v; check that "
            "queries come first "
            "(q @ k^T, not k @ q^T) and that the weights multiply v"
        )
    return "Correct: your attention matches softmax(q k^T / sqrt(d)) v, batched and unbatched."


def check_sliding_window_mask(fn) -> str:
    """Check a reader's ``fn(T, window) -> (T, T) bool``: query t sees keys
    t-window+1..t.

    Returns a line starting with "Correct:" or raises AssertionError with a
    hint.
    """
    if not callable(fn):
        raise TypeError(
            f"pass your mask function itself, got {type(fn).__name__}"
        )
    for T, window in ((5, 2), (6, 1), (4, 4), (7, 3)):
        rows, cols = torch.arange(T)[:, None], torch.arange(T)[None, :]
        expected = (cols <= rows) & (cols > rows - window)
        mask = fn(T, window)
        if not isinstance(mask, Tensor) or mask.shape != (T, T):
            raise AssertionError(
                f"expected a ({T}, {T}) tensor, got {_describe(mask)}"
            )
        if mask.dtype != torch.bool:
            raise AssertionError(
                f"the mask must be boolean, got dtype {mask.dtype}"
            )
        if torch.equal(mask, ~expected):
            raise AssertionError(
                "the mask is inverted: True must mean 'may attend'"
            )
        if not torch.equal(mask, expected):
            wrong = (mask != expected).nonzero()[0].tolist()
            raise AssertionError(
                f"for T={T}, window={window} entry (query, key)={tuple(wrong)} "
                f"is {bool(mask[tuple(wrong)])}; query t may attend to keys "
                "t-window+1, ..., t"
            )
    return "Correct: each query sees itself and the window - 1 keys before it."


# -------------------------------------------------------------------- chapter 4


def mha_parameter_count(
    d_model: int, num_heads: int, bias: bool = False
) -> int:
    """Parameters of standard multi-head attention: ``4 D^2`` weights (+ ``4 D``
    biases).

    ``num_heads`` does not enter: the heads split the width D, they do not add
    to it.
    """
    check.head_width(d_model, num_heads)
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


_CASES = ((2, 5, 12, 3), (1, 7, 8, 2), (3, 4, 16, 4), (2, 3, 6, 6))


def check_split_heads(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check a reader's ``split_heads(x, num_heads)``: (B, T, D) -> (B, H, T,
    d_head)."""
    generator = torch.Generator().manual_seed(4)
    for batch, seq_len, d_model, num_heads in _CASES:
        x = torch.randn(batch, seq_len, d_model, generator=generator)
        expected = split_heads(x, num_heads)
        got = fn(x, num_heads)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            raise AssertionError(
                f"for x of shape {tuple(x.shape)} and num_heads={num_heads} "
                f"expected shape {tuple(expected.shape)} = (B, H, T, d_head), "
                f"got {_describe(got)}"
            )
        if not torch.equal(got, expected):
            d_head = d_model // num_heads
            scrambled = x.reshape(batch, num_heads, seq_len, d_head)
            hint = (
                "you reshaped straight to (B, H, T, d_head): that "
                "reinterprets the memory and mixes positions between heads; "
                "view as (B, T, H, d_head) first, then swap the T and H axes "
                "with .transpose(1, 2)"
                if torch.equal(got, scrambled)
                else "head h must hold features h*d_head:(h+1)*d_head of every position"
            )
            raise AssertionError(f"right shape, wrong content: {hint}")
    return "Correct: your split_heads gives every head its own slice of the features."


def check_merge_heads(fn: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Check a reader's ``merge_heads(x)``: (B, H, T, d_head) -> (B, T, D),
    inverse of splitting."""
    generator = torch.Generator().manual_seed(5)
    for batch, seq_len, d_model, num_heads in _CASES:
        x = torch.randn(batch, seq_len, d_model, generator=generator)
        heads = split_heads(x, num_heads)
        got = fn(heads)
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            raise AssertionError(
                f"for heads of shape {tuple(heads.shape)} expected shape "
                f"{tuple(x.shape)} "
                f"= (B, T, D), got {_describe(got)}"
            )
        if not torch.equal(got, x):
            hint = (
                "you reshaped (B, H, T, d_head) straight to (B, T, D): move "
                "the head axis next to d_head first with "
                ".transpose(1, 2), then reshape"
                if torch.equal(got, heads.reshape(x.shape))
                else "merge_heads(split_heads(x, H)) must give x back exactly"
            )
            raise AssertionError(f"right shape, wrong content: {hint}")
    return "Correct: your merge_heads undoes split_heads exactly."


def check_parameter_count(fn: Callable[[int, int, bool], int]) -> str:
    """Check a reader's ``count(d_model, num_heads, bias)`` against torch's own
    layer."""
    for d_model, num_heads in ((8, 1), (8, 2), (12, 3), (64, 8), (64, 16)):
        for bias in (False, True):
            module = nn.MultiheadAttention(
                d_model, num_heads, bias=bias, batch_first=True
            )
            expected = sum(
                parameter.numel() for parameter in module.parameters()
            )
            got = fn(d_model, num_heads, bias)
            if got != expected:
                hint = ""
                if fn(d_model, 1, bias) != got:
                    hint = (
                        " Your count changes with num_heads, but the heads "
                        "split the width d_model between them: more heads, "
                        "same number of weights."
                    )
                elif bias and got == expected - 4 * d_model:
                    hint = " With bias=True each of the four projections has d_model biases."
                raise AssertionError(
                    f"d_model={d_model}, num_heads={num_heads}, bias={bias}: "
                    f"expected {expected} parameters, got {got}.{hint}"
                )
    return "Correct: your formula matches torch.nn.MultiheadAttention for every case tried."


# -------------------------------------------------------------------- chapter 5


def _fixed_base_reference(
    num_positions: int, bases: Sequence[int]
) -> np.ndarray:
    angles = (
        2
        * np.pi
        * np.arange(num_positions)[:, None]
        / np.asarray(bases, float)[None, :]
    )
    return np.stack((np.sin(angles), np.cos(angles)), axis=-1).reshape(
        num_positions, -1
    )


def _diagnose(got: np.ndarray, num_positions: int, bases: Sequence[int]) -> str:
    """Name the usual mistake that produces ``got``, or say where it first goes
    wrong."""
    steps = np.arange(num_positions)[:, None]
    speeds = 1.0 / np.asarray(bases, float)[None, :]
    expected = _fixed_base_reference(num_positions, bases)

    def pairs(angles: np.ndarray, first=np.sin, second=np.cos) -> np.ndarray:
        return np.stack((first(angles), second(angles)), -1).reshape(
            num_positions, -1
        )

    known_mistakes = [
        (
            pairs(360 * steps * speeds),
            "the angles look like degrees (360 / base per position); "
            "torch.sin and np.sin take radians: use 2 * pi / base per position",
        ),
        (
            pairs(2 * np.pi * steps * speeds, np.cos, np.sin),
            "sine and cosine are swapped: column 2k should be sin, "
            "column 2k + 1 cos",
        ),
        (
            np.concatenate(
                (
                    np.sin(2 * np.pi * steps * speeds),
                    np.cos(2 * np.pi * steps * speeds),
                ),
                1,
            ),
            "all sines come first and then all cosines; interleave them "
            "instead: sin(base 1), cos(base 1), sin(base 2), cos(base 2), ...",
        ),
        (
            pairs(2 * np.pi * (steps + 1) * speeds),
            "positions start at 1; the first row is position 0 (angle 0)",
        ),
        (
            pairs(steps * speeds),
            "the angle moves 1 / base radian per position, which is not a "
            "full turn in `base` steps: use 2 * pi / base",
        ),
    ]
    for candidate, hint in known_mistakes:
        if candidate.shape == got.shape and np.allclose(
            candidate, got, atol=1e-4
        ):
            return hint
    row, col = np.argwhere(~np.isclose(got, expected, atol=1e-5))[0]
    return (
        f"first difference at position {row}, column {col}: got "
        f"{got[row, col]:.4f}, "
        f"expected {expected[row, col]:.4f}"
    )


def check_fixed_base_encoding(
    encode: Callable[[int, Sequence[int]], object],
    bases: Sequence[int] = (4, 5, 7),
    num_positions: int = 16,
) -> str:
    """Check a reader's fixed-base positional encoding; return a message if it
    is right.

    ``encode(num_positions, bases)`` must return a tensor or array of shape
    (num_positions, 2 * len(bases)) whose columns ``2k`` and ``2k + 1`` are
    ``sin(2 pi t / bases[k])`` and ``cos(2 pi t / bases[k])`` for positions t =
    0, 1, ... A wrong answer raises ``AssertionError`` whose message names the
    likely mistake. A right one also has distances between positions that depend
    on the offset only, which the returned message reports.
    """
    if not callable(encode):
        raise TypeError(
            f"pass your encoding function itself, got {type(encode).__name__}"
        )
    check.positive_int("num_positions", num_positions)
    for base in bases:
        check.positive_int("each base", base)
    expected_shape = (num_positions, 2 * len(bases))
    result = encode(num_positions, bases)
    if isinstance(result, torch.Tensor):
        result = result.detach().cpu().numpy()
    if not isinstance(result, np.ndarray):
        raise AssertionError(
            f"encode returned a {type(result).__name__}; return a torch.Tensor "
            "or a NumPy array "
            f"of shape {expected_shape}"
        )
    got = result.astype(np.float64)
    if got.shape != expected_shape:
        hint = ""
        if got.shape == expected_shape[::-1]:
            hint = " (it looks transposed: one row per position, please)"
        elif got.shape == (num_positions, len(bases)):
            hint = " (one column per base: each base needs a sine column AND a cosine column)"
        raise AssertionError(
            f"expected shape {expected_shape}, got {got.shape}{hint}"
        )
    distances = np.linalg.norm(got[:, None, :] - got[None, :, :], axis=-1)
    offset_only = all(
        np.ptp(np.diagonal(distances, k)) < 1e-4 for k in range(num_positions)
    )
    if not np.allclose(
        got, _fixed_base_reference(num_positions, bases), atol=1e-5
    ):
        geometry = (
            "distances between your positions do depend on the offset only, though"
            if offset_only
            else "and distances between your positions depend on more than their offset"
        )
        diagnosis = _diagnose(got, num_positions, bases)
        raise AssertionError(f"not yet right: {diagnosis} ({geometry})")
    return (
        f"Correct: {num_positions} positions x {2 * len(bases)} columns, and "
        "the distance between two positions depends only on their offset "
        "(every diagonal of the distance matrix is constant to within 1e-4)."
    )


# -------------------------------------------------------------------- chapter 6


def check_rms_norm(fn) -> str:
    """Check a reader's ``fn(x, weight, eps)`` computing RMSNorm over the last
    dimension.

    Returns a line starting with "Correct:", or raises AssertionError with a
    hint.
    """
    generator = torch.Generator().manual_seed(6)
    for shape, eps in (((3, 8), 1e-6), ((2, 4, 6), 1e-2), ((5, 1), 0.5)):
        # off-centre on purpose
        x = 2 * torch.randn(shape, generator=generator) + 1
        weight = torch.randn(shape[-1], generator=generator)
        reference = RMSNorm(shape[-1], eps=eps)
        with torch.no_grad():
            reference.weight.copy_(weight)
            expected = reference(x)
        got = fn(x, weight, eps)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            raise AssertionError(
                f"expected a tensor of shape {tuple(x.shape)}, "
                f"got {_describe(got)}"
            )
        if torch.allclose(got, expected, atol=1e-5):
            continue
        centred = x - x.mean(-1, keepdim=True)
        hints = (
            (
                centred
                * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
                * weight,
                "you subtract the mean: that is LayerNorm; "
                "RMSNorm does not centre",
            ),
            (
                x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight,
                "eps goes inside the square root: x / sqrt(mean(x**2) + eps)",
            ),
            (
                x * x.pow(2).mean(-1, keepdim=True).add(eps).sqrt() * weight,
                "divide by the root mean square, do not multiply by it",
            ),
        )
        hint = next(
            (
                text
                for wrong, text in hints
                if torch.allclose(got, wrong, atol=1e-5)
            ),
            "average x**2 over the last dimension only (dim=-1, keepdim=True)",
        )
        raise AssertionError(
            f"wrong output for input shape {shape}, eps={eps}: {hint}"
        )
    return "Correct: your RMSNorm matches helpers.transformer.RMSNorm."


def check_block_parameter_count(fn) -> str:
    """Check a reader's formula ``fn(d_model, ffn_width)`` for the parameters of
    one block.

    The block is ``EncoderBlock(d_model, num_heads, ffn_width)`` with biases and
    LayerNorm. Returns a line starting with "Correct:", or raises AssertionError
    with a hint.
    """
    for d_model, num_heads, ffn_width in (
        (8, 2, 32),
        (12, 3, 20),
        (512, 8, 2048),
    ):
        expected = count_parameters(EncoderBlock(d_model, num_heads, ffn_width))
        got = fn(d_model, ffn_width)
        if got == expected:
            continue
        without_norms = expected - 4 * d_model
        without_biases = expected - (4 * d_model + ffn_width + d_model)
        hint = {
            without_norms: "add the two LayerNorms: a gain and a bias of size D each",
            without_biases: "add the biases: 4D in attention, F + D in the feed-forward network",
        }.get(
            got,
            "attention has 4 D x D matrices, the feed-forward "
            "network D x F and F x D",
        )
        raise AssertionError(
            f"for d_model={d_model}, ffn_width={ffn_width} the block has "
            f"{expected:,} parameters, your formula gives {got!r}: {hint}"
        )
    return "Correct: your formula matches count_parameters(EncoderBlock(...))."


# -------------------------------------------------------------------- chapter 7


def check_sequence_accuracy(fn) -> str:
    """Check a reader's ``fn(logits, targets)``: the fraction of sequences
    *entirely* right.

    ``logits`` is ``(B, T, C)``, ``targets`` ``(B, T)``; a sequence counts only
    if the arg-max is right at every one of its ``T`` positions. Returns a line
    starting with "Correct:", or raises AssertionError with a hint.
    """
    generator = torch.Generator().manual_seed(7)
    targets = torch.randint(5, (8, 6), generator=generator)
    logits = 3 * F.one_hot(targets, 5).float() + torch.rand(
        8, 6, 5, generator=generator
    )
    flip = torch.rand(8, 6, generator=generator) < 0.08  # a few wrong tokens
    logits[flip] = logits[flip].roll(1, dims=-1)
    expected = (logits.argmax(-1) == targets).all(dim=-1).float().mean()
    got = fn(logits, targets)
    one_number = isinstance(got, (float, int)) or (
        isinstance(got, torch.Tensor) and got.numel() == 1
    )
    if not one_number:
        raise AssertionError(
            f"return one number (a 0-dim tensor or a float), got {got!r}"
        )
    got_value = float(got)
    if abs(got_value - expected.item()) < 1e-6:
        return "Correct: your sequence accuracy matches."
    token_accuracy = (logits.argmax(-1) == targets).float().mean()
    if abs(got_value - token_accuracy.item()) < 1e-6:
        raise AssertionError(
            "that is the token accuracy: require every position to be right"
        )
    raise AssertionError(
        f"expected {expected.item():.4f}, got {got_value:.4f}: compare "
        "argmax(-1) with the "
        "targets, then .all(dim=-1) over positions, then average over sequences"
    )


# -------------------------------------------------------------------- chapter 9


def check_decoder_input(fn) -> str:
    """Check a reader's ``fn(target, start_id)``: the decoder's input under
    teacher forcing.

    ``target`` is an int64 ``(B, T)`` batch of target tokens; the answer is
    ``(B, T)`` too: ``start_id`` at position 0, then ``target[:, :-1]`` (the
    target shifted right by one). Returns a line starting with "Correct:", or
    raises AssertionError with a hint.
    """
    target = torch.randint(
        3, 13, (4, 6), generator=torch.Generator().manual_seed(9)
    )
    start_id = 1
    expected = torch.cat([torch.full((4, 1), start_id), target[:, :-1]], dim=1)
    got = fn(target.clone(), start_id)
    if not isinstance(got, Tensor):
        raise AssertionError(
            f"return a tensor of shape (B, T), got {type(got).__name__}"
        )
    if torch.equal(got, expected):
        return "Correct: the decoder reads the start token, then the target shifted right."
    if got.shape == (4, 7):
        raise AssertionError(
            "got shape (4, 7) for a target of shape (4, 6): drop the target's "
            "last token, which no position has to read (it is "
            "only ever predicted)"
        )
    if got.shape == expected.shape and torch.equal(got[:, :-1], target[:, 1:]):
        raise AssertionError(
            "you shifted left: position t must read token t - 1, never token "
            "t + 1 (that is the answer it has to predict)"
        )
    if got.shape == expected.shape and torch.equal(got, target):
        raise AssertionError(
            "that is the target itself: each position would read its own answer"
        )
    raise AssertionError(
        f"expected {expected[0].tolist()} for the target {target[0].tolist()} "
        f"and start_id={start_id}, got "
        f"{got[0].tolist() if got.ndim == 2 else got.tolist()}"
    )


# ------------------------------------------------------------------- chapter 10


def check_sampling_distribution(fn) -> str:
    """Check a reader's ``fn(logits, temperature, top_k)``: the distribution a
    sampler uses.

    The answer is ``softmax(logits / temperature)`` over the last dimension,
    restricted to the ``top_k`` largest logits (all of them when ``top_k`` is
    None) and renormalized. Returns a line starting with "Correct:", or raises
    AssertionError with a hint.
    """
    from helpers.gpt import next_token_probabilities

    logits = torch.randn(3, 9, generator=torch.Generator().manual_seed(10)) * 2
    for temperature, top_k in (
        (1.0, None),
        (0.5, None),
        (2.0, None),
        (1.0, 3),
        (0.7, 1),
    ):
        expected = next_token_probabilities(logits, temperature, top_k)
        got = fn(logits.clone(), temperature, top_k)
        if not isinstance(got, Tensor) or got.shape != expected.shape:
            raise AssertionError(
                f"return a tensor of the logits' shape {tuple(logits.shape)}, "
                f"got {_describe(got)}"
            )
        if torch.allclose(got, expected, atol=1e-6):
            continue
        setting = f"temperature={temperature}, top_k={top_k}"
        if not torch.allclose(got.sum(-1), torch.ones(3), atol=1e-5):
            raise AssertionError(
                f"{setting}: each row must sum to 1; divide the logits by the "
                "temperature before the softmax, and cut the tail with "
                "-inf before it too"
            )
        if temperature != 1.0 and torch.allclose(
            got, (logits * temperature).softmax(-1)
        ):
            raise AssertionError(
                f"{setting}: divide the logits by the temperature, not multiply"
            )
        kept = (got > 0).sum(-1)
        if top_k is not None and not (kept == top_k).all():
            raise AssertionError(
                f"{setting}: keep exactly the {top_k} largest logits of each "
                f"row (you keep {kept.tolist()} tokens) and give the "
                "others probability 0"
            )
        if temperature != 1.0:
            raise AssertionError(
                f"{setting}: use softmax(logits / temperature)"
            )
        raise AssertionError(
            f"{setting}: expected {expected[0].numpy().round(4).tolist()}, "
            f"got {got[0].detach().numpy().round(4).tolist()}"
        )
    return "Correct: your sampling distribution matches helpers.gpt.next_token_probabilities."


# ------------------------------------------------------------------- chapter 13


def _softmax_state(
    scores: Tensor, values: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The online softmax's state (max, sum, accumulator) after reading all
    ``scores``."""
    running_max = scores.amax(dim=-1, keepdim=True)
    shift = running_max.masked_fill(running_max == float("-inf"), 0.0)
    weights = torch.exp(scores - shift)
    return running_max, weights.sum(dim=-1, keepdim=True), weights @ values


def check_softmax_merge(fn) -> str:
    """Check a reader's ``fn(state_1, state_2) -> state``: two partial softmaxes
    merged.

    A state is ``(running_max (..., 1), running_sum (..., 1), accumulator (...,
    dv))`` as in :func:`helpers.efficient.online_softmax_update`, for two
    disjoint sets of keys; the merged state must be that of all the keys (same
    maximum, same sum, same accumulator). Returns a line starting with
    "Correct:", or raises AssertionError with a hint.
    """
    if not callable(fn):
        raise TypeError(
            f"pass your merge function itself, got {type(fn).__name__}"
        )
    generator = torch.Generator().manual_seed(11)
    scores = 20 * torch.randn(3, 10, generator=generator)
    values = torch.randn(10, 4, generator=generator)
    scores[2, 5:] = float("-inf")  # the last half of query 2's keys is masked
    # query 3 has every key masked (a padding row): both halves have m = -inf
    scores = torch.cat([scores, torch.full((1, 10), float("-inf"))])
    live = slice(0, 3)  # the queries that read at least one key
    cases = {"halves": 5, "uneven halves": 2}
    for name, split in cases.items():
        first = _softmax_state(scores[:, :split], values[:split])
        second = _softmax_state(scores[:, split:], values[split:])
        got = fn(first, second)
        if not (isinstance(got, tuple) and len(got) == 3):
            raise AssertionError(
                "return a tuple (running_max, running_sum, accumulator), "
                f"got {_describe(got)}"
            )
        expected = _softmax_state(scores, values)
        masked_sum, masked_accumulator = got[1][3], got[2][3]
        if not (
            torch.equal(masked_sum, torch.zeros_like(masked_sum))
            and torch.equal(
                masked_accumulator, torch.zeros_like(masked_accumulator)
            )
        ):
            raise AssertionError(
                f"{name}: a query whose keys are all masked must keep "
                f"running_sum 0 and accumulator 0, got {masked_sum.tolist()} "
                f"and {masked_accumulator.tolist()}; both halves have m = -inf "
                "there, and exp(-inf - (-inf)) is NaN: rescale against 0 "
                "where the common maximum is -inf, as "
                "online_softmax_update does"
            )
        output = got[2][live] / got[1][live]
        if not torch.isfinite(output).all():
            raise AssertionError(
                f"{name}: the merged output has NaN or inf; rescale each half "
                "by exp(m_half - m) with m the larger of the two maxima (a "
                "half of masked keys has m = -inf, and exp(-inf "
                "- m) = 0 is fine)"
            )
        truth = scores[live].softmax(-1) @ values
        if not torch.allclose(output, truth, atol=1e-5):
            plain = (first[2] + second[2]) / (first[1] + second[1])
            if torch.allclose(output, plain[live], atol=1e-6):
                raise AssertionError(
                    "you added the sums and accumulators as they are: each "
                    "half was summed against its own maximum, so rescale both "
                    "by exp(m_half - m) first"
                )
            raise AssertionError(
                f"{name}: accumulator / running_sum should be softmax(scores) "
                "@ values over all the keys, and it is not"
            )
        for index, label in ((0, "running_max"), (1, "running_sum")):
            if not torch.allclose(got[index], expected[index], rtol=1e-5):
                raise AssertionError(
                    f"{name}: the output is right but {label} is not the state "
                    "of all the keys; a later merge would go wrong (the max "
                    "is the larger of the two)"
                )
    return (
        "Correct: two partial softmaxes merge into the softmax of all the keys."
    )


# ------------------------------------------------------------------- chapter 14


def check_patchify(fn) -> str:
    """Check a reader's ``fn(images, patch_size)``: ``(B, C, S, S) -> (B, N, C *
    P * P)``.

    Patches numbered row by row, each flattened as (channel, row, column), as
    :func:`helpers.vit.patchify` does (the order that makes it equal to a
    strided ``Conv2d``). Returns a line starting with "Correct:", or raises
    AssertionError with a hint. The grey case has ``N != C * P * P`` (9 patches
    of 4 pixels), so a transposed result shows.
    """
    from helpers.vit import patchify

    if not callable(fn):
        raise TypeError(
            f"pass your patchify function itself, got {type(fn).__name__}"
        )
    cases = {
        "one grey image": (1, 1, 6, 2),
        "a batch of RGB images": (2, 3, 6, 3),
    }
    for number, (name, (batch, channels, side, patch)) in enumerate(
        cases.items()
    ):
        images = torch.arange(
            batch * channels * side * side, dtype=torch.float32
        )
        images = images.reshape(batch, channels, side, side)
        expected = patchify(images, patch)
        grid = side // patch
        try:
            got = fn(images, patch)
        except Exception as error:
            hint = (
                "it ran on one grey image: take the batch size and the "
                "channels from images.shape rather than fixing them"
                if number
                else "split each side with images.reshape(B, C, G, P, G, P), "
                "G = S // P, then permute"
            )
            raise AssertionError(
                f"{name}: your function raised {type(error).__name__}: {error} "
                f"on images of shape {tuple(images.shape)} with "
                f"patch_size={patch}; {hint}"
            ) from None
        # N != C * P * P in both cases: it shows
        transposed = expected.transpose(1, 2)
        if (
            isinstance(got, Tensor)
            and got.shape == transposed.shape
            and got.equal(transposed)
        ):
            raise AssertionError(
                f"{name}: your result is (B, C * P * P, N), the layout "
                "torch.nn.functional.unfold returns; transpose it "
                "with .transpose(1, 2)"
            )
        if not isinstance(got, Tensor) or got.shape != expected.shape:
            raise AssertionError(
                f"{name}: expected shape {tuple(expected.shape)} (B, number of "
                f"patches, C * P * P), got {_describe(got)}"
            )
        if torch.equal(got, expected):
            continue
        strips = images.reshape(batch, -1, channels * patch * patch)
        if torch.equal(got, strips):
            raise AssertionError(
                f"{name}: your patches are runs of consecutive pixels (a "
                "reshape alone), not squares: split each side into (grid, "
                "patch) and permute the two grid axes before the patch axes"
            )
        # (B, C, G, G, P, P)
        blocks = images.unfold(2, patch, patch).unfold(3, patch, patch)
        if torch.equal(got, blocks.reshape(batch, grid * grid, -1)):
            raise AssertionError(
                f"{name}: Tensor.unfold gives (B, C, G, G, P, P), with the "
                "channels before the "
                "grid axes: move them behind, .permute(0, 2, 3, 1, 4, 5), "
                "before flattening"
            )
        if torch.equal(got.sort(dim=-1).values, expected.sort(dim=-1).values):
            raise AssertionError(
                f"{name}: each patch holds the right pixels in another order; "
                "flatten them as (channel, row, column), the order "
                "of a Conv2d weight"
            )
        if torch.equal(got.sort(dim=1).values, expected.sort(dim=1).values):
            raise AssertionError(
                f"{name}: the right patches in the wrong order; number them "
                "row by row (left to right, then top to bottom)"
            )
        raise AssertionError(f"{name}: the patches hold the wrong pixels")
    return "Correct: your patches are square, numbered row by row, flattened as a Conv2d's."
