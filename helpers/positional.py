"""Positional information for attention, which on its own sees a sequence as a set.

Chapter 5 builds each piece from scratch; this module is the canonical version later
chapters import. Shapes: ``B`` batch, ``T`` sequence length, ``H`` heads, ``D`` model width
(``d_model``).

- :func:`sinusoidal_encoding` and :class:`SinusoidalPositionalEncoding`: the fixed sine/cosine
  table of Vaswani et al. (2017), added to the input. Columns come in pairs
  ``(sin(t * w_j), cos(t * w_j))`` with angular speeds ``w_j = base ** (-2j / D)``.
- :func:`relative_rotation`: the block-diagonal matrix ``R(k)`` with ``p[t + k] = R(k) @ p[t]``.
- :class:`LearnedPositionalEmbedding`: one trained vector per position (GPT-2, BERT).
- :func:`alibi_slopes` and :func:`alibi_bias`: ALiBi's per-head linear penalty on distance,
  added to the attention scores instead of to the input (Press et al., 2022).
- :func:`apply_rotary`: rotary embeddings (RoPE), which rotate queries and keys so their dot
  product depends on the offset only (Su et al., 2021).
- :func:`check_fixed_base_encoding`: the checker for chapter 5's "your turn" exercise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from helpers._validate import check_positive_int

__all__ = [
    "angular_speeds",
    "sinusoidal_encoding",
    "relative_rotation",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "alibi_slopes",
    "alibi_bias",
    "apply_rotary",
    "check_fixed_base_encoding",
]


# --- argument checks shared by the public functions ----------------------------------------


_check_positive_int = check_positive_int


def _check_even_width(d_model) -> None:
    _check_positive_int("d_model", d_model)
    if d_model % 2:
        nearest = f"{d_model + 1}" if d_model == 1 else f"{d_model + 1} (or {d_model - 1})"
        raise ValueError(
            f"d_model must be even: sine/cosine encodings fill the width in (sin, cos) pairs, "
            f"got d_model={d_model}; use d_model={nearest} or project the input to an even "
            "width first"
        )


def _check_base(base) -> None:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a float, got {type(base).__name__} ({base!r})")
    if not math.isfinite(base) or base <= 1.0:
        raise ValueError(
            f"base must be a finite number > 1 (the angular speeds are base ** (-2j / D)), "
            f"got base={base}; the original Transformer uses 10000.0"
        )


# --- sinusoidal encodings --------------------------------------------------------------------


def angular_speeds(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The angular speeds ``w_j = base ** (-2j / d_model)`` of the D/2 sine/cosine pairs.

    Returns a float64 tensor of shape (D/2,), from 1 radian per position down to
    ``base ** (-(D - 2) / D)``. ``d_model`` must be even.
    """
    _check_even_width(d_model)
    _check_base(base)
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    return base ** (-exponents)


def sinusoidal_encoding(
    num_positions: int, d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The sinusoidal position table of shape (T, D), T = ``num_positions``, D = ``d_model``.

    Row ``t`` is the encoding of position ``t`` (counting from 0); columns ``2j`` and ``2j + 1``
    hold ``sin(t * w_j)`` and ``cos(t * w_j)`` with ``w_j = base ** (-2j / D)``. The angles are
    computed in float64 and only the result is cast to ``dtype``: computed in float32, the
    angles of positions near 5000 are already off by up to 2e-4 radian.
    """
    _check_positive_int("num_positions", num_positions)
    speeds = angular_speeds(d_model, base)  # validates d_model and base
    positions = torch.arange(num_positions, dtype=torch.float64)
    angles = positions[:, None] * speeds[None, :]  # (T, D/2)
    table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)  # (T, D/2, 2)
    return table.reshape(num_positions, d_model).to(dtype)


def relative_rotation(offset: float, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (D, D) block-diagonal matrix ``R(k)`` that moves an encoding ``k`` positions on.

    For the table ``P = sinusoidal_encoding(T, D, base)``: ``P[t + k] == R(k) @ P[t]`` for every
    ``t`` (as rows: ``P[k:] == P[:-k] @ R(k).T``). Block ``j`` rotates the pair
    ``(sin, cos)`` by the angle ``k * w_j``; it does not depend on ``t``. Returned in float64.
    """
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise TypeError(f"offset must be a number, got {type(offset).__name__} ({offset!r})")
    angles = offset * angular_speeds(d_model, base)  # (D/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    blocks = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)
    return torch.block_diag(*blocks)  # blocks: (D/2, 2, 2)


def _check_sequence_input(x, d_model: int, max_len: int, who: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who} expects a torch.Tensor of shape (B, T, D), got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(
            f"{who} expects x of shape (B, T, D), got shape {tuple(x.shape)}; "
            "add a batch dimension with x.unsqueeze(0) if you have a single sequence"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{who} was built for d_model={d_model} but x has width {x.shape[-1]} "
            f"(shape {tuple(x.shape)}); build it with d_model={x.shape[-1]}"
        )
    if x.shape[1] > max_len:
        raise ValueError(
            f"sequence length T={x.shape[1]} exceeds max_len={max_len} of {who}; "
            f"build it with max_len >= {x.shape[1]} or cut the sequence"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Add the fixed sinusoidal encoding to a batch of sequences: ``x + PE[:T]``.

    ``forward(x)``: x of shape (B, T, D) with T <= ``max_len`` and D = ``d_model``; returns the
    same shape and dtype. The table ``pe`` of shape (max_len, D) is a *buffer*: it is saved in
    the ``state_dict`` and moves with ``.to(device)``, but it is not a parameter, so no
    optimizer ever changes it. ``d_model`` must be even (the table is made of sin/cos pairs).
    The input is not rescaled; multiply by ``sqrt(d_model)`` before if a model needs that.
    """

    pe: torch.Tensor

    def __init__(self, d_model: int, max_len: int = 5000, base: float = 10000.0) -> None:
        super().__init__()
        _check_positive_int("max_len", max_len)
        self.d_model = d_model
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_sequence_input(x, self.d_model, self.max_len, type(self).__name__)
        return x + self.pe[: x.shape[1]].to(x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEmbedding(nn.Module):
    """Add one trained vector per position: ``x + W[:T]``, with W of shape (max_len, D).

    ``forward(x)``: x of shape (B, T, D) with T <= ``max_len``; returns the same shape. ``W``
    is an ``nn.Parameter`` (trained with the model, initialised from N(0, 0.02^2) as in GPT-2),
    so a position the model never saw in training has an untrained vector, and positions past
    ``max_len`` have none at all.
    """

    def __init__(self, d_model: int, max_len: int, init_std: float = 0.02) -> None:
        super().__init__()
        _check_positive_int("d_model", d_model)
        _check_positive_int("max_len", max_len)
        if not init_std > 0:
            raise ValueError(f"init_std must be > 0, got {init_std}; GPT-2 uses 0.02")
        self.d_model = d_model
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_sequence_input(x, self.d_model, self.max_len, type(self).__name__)
        return x + self.weight[: x.shape[1]].to(x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


# --- ALiBi -----------------------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's fixed per-head slopes ``m_h``, shape (H,), float32.

    For H a power of two: the geometric sequence ``2 ** (-8 h / H)`` for h = 1..H (for H = 8:
    1/2, 1/4, ..., 1/256). Otherwise, as in the paper's code: the slopes of the largest power
    of two below H, then every other slope of twice that many heads to fill up.
    """
    _check_positive_int("num_heads", num_heads)

    def power_of_two_slopes(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two_slopes(closest)
    slopes += power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    num_heads: int, seq_len: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """The ALiBi score bias of shape (H, T, T): ``bias[h, i, j] = -m_h * |i - j|``, float32.

    Add it to the attention scores before the softmax (it can be passed as a float
    ``attn_mask`` to ``F.scaled_dot_product_attention``, broadcasting over the batch). The
    paper's causal models only ever see ``j <= i``, where this equals ``-m_h * (i - j)``:
    combine it with a causal mask for a decoder.
    """
    _check_positive_int("seq_len", seq_len)
    slopes = alibi_slopes(num_heads).to(device)  # validates num_heads
    positions = torch.arange(seq_len, device=device)
    distance = (positions[:, None] - positions[None, :]).abs().to(torch.float32)  # (T, T)
    return 0.0 - slopes[:, None, None] * distance  # (H, T, T); 0.0 - avoids printing -0.0


# --- RoPE ------------------------------------------------------------------------------------


def apply_rotary(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """Rotary position embedding: rotate each pair ``(x[..., 2j], x[..., 2j+1])`` of x.

    x has shape (..., T, D) (for example (B, H, T, d_head)) with D even; ``positions`` has shape
    (T,) and defaults to ``0, 1, ..., T-1``. The pair j of the vector at position t is rotated
    by the angle ``t * w_j``, ``w_j = base ** (-2j / D)``. Apply it to queries and keys (not
    values): then ``q_m . k_n`` depends on the positions only through ``n - m``. Returns the
    same shape and dtype as x; norms are preserved.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"apply_rotary expects a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 2:
        raise ValueError(
            f"apply_rotary expects x of shape (..., T, D), got shape {tuple(x.shape)}; "
            "add a sequence dimension"
        )
    seq_len, width = x.shape[-2], x.shape[-1]
    speeds = angular_speeds(width, base)  # validates width (even) and base
    if positions is None:
        positions = torch.arange(seq_len)
    if not isinstance(positions, torch.Tensor) or positions.shape != (seq_len,):
        shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else positions
        raise ValueError(
            f"positions must be a tensor of shape (T,) = ({seq_len},) for x of shape "
            f"{tuple(x.shape)}, got {shape}; pass e.g. torch.arange({seq_len})"
        )
    # Angles in float64 on the CPU (MPS has no float64), then cast and moved to x.
    angles = positions.detach().to("cpu", torch.float64)[:, None] * speeds[None, :]  # (T, D/2)
    cos = torch.cos(angles).to(device=x.device, dtype=x.dtype)
    sin = torch.sin(angles).to(device=x.device, dtype=x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)


# --- the "your turn" checker -----------------------------------------------------------------


def _fixed_base_reference(num_positions: int, bases: Sequence[int]) -> np.ndarray:
    angles = 2 * np.pi * np.arange(num_positions)[:, None] / np.asarray(bases, float)[None, :]
    return np.stack((np.sin(angles), np.cos(angles)), axis=-1).reshape(num_positions, -1)


def _diagnose(got: np.ndarray, num_positions: int, bases: Sequence[int]) -> str:
    """Name the usual mistake that produces ``got``, or say where it first goes wrong."""
    steps = np.arange(num_positions)[:, None]
    speeds = 1.0 / np.asarray(bases, float)[None, :]
    expected = _fixed_base_reference(num_positions, bases)

    def pairs(angles: np.ndarray, first=np.sin, second=np.cos) -> np.ndarray:
        return np.stack((first(angles), second(angles)), -1).reshape(num_positions, -1)

    known_mistakes = [
        (
            pairs(360 * steps * speeds),
            "the angles look like degrees (360 / base per position); torch.sin and np.sin "
            "take radians: use 2 * pi / base per position",
        ),
        (
            pairs(2 * np.pi * steps * speeds, np.cos, np.sin),
            "sine and cosine are swapped: column 2k should be sin, column 2k + 1 cos",
        ),
        (
            np.concatenate(
                (np.sin(2 * np.pi * steps * speeds), np.cos(2 * np.pi * steps * speeds)), 1
            ),
            "all sines come first and then all cosines; interleave them instead: "
            "sin(base 1), cos(base 1), sin(base 2), cos(base 2), ...",
        ),
        (
            pairs(2 * np.pi * (steps + 1) * speeds),
            "positions start at 1; the first row is position 0 (angle 0)",
        ),
        (
            pairs(steps * speeds),
            "the angle moves 1 / base radian per position, which is not a full turn in `base` "
            "steps: use 2 * pi / base",
        ),
    ]
    for candidate, hint in known_mistakes:
        if candidate.shape == got.shape and np.allclose(candidate, got, atol=1e-4):
            return hint
    row, col = np.argwhere(~np.isclose(got, expected, atol=1e-5))[0]
    return (
        f"first difference at position {row}, column {col}: got {got[row, col]:.4f}, "
        f"expected {expected[row, col]:.4f}"
    )


def check_fixed_base_encoding(
    encode: Callable[[int, Sequence[int]], object],
    bases: Sequence[int] = (4, 5, 7),
    num_positions: int = 16,
) -> str:
    """Check a reader's fixed-base positional encoding; return a message if it is right.

    ``encode(num_positions, bases)`` must return a tensor or array of shape
    (num_positions, 2 * len(bases)) whose columns ``2k`` and ``2k + 1`` are
    ``sin(2 pi t / bases[k])`` and ``cos(2 pi t / bases[k])`` for positions t = 0, 1, ...
    A wrong answer raises ``AssertionError`` whose message names the likely mistake. A right
    one also has distances between positions that depend on the offset only, which the
    returned message reports.
    """
    if not callable(encode):
        raise TypeError(f"pass your encoding function itself, got {type(encode).__name__}")
    _check_positive_int("num_positions", num_positions)
    for base in bases:
        _check_positive_int("each base", base)
    expected_shape = (num_positions, 2 * len(bases))
    result = encode(num_positions, bases)
    if isinstance(result, torch.Tensor):
        result = result.detach().cpu().numpy()
    if not isinstance(result, np.ndarray):
        raise AssertionError(
            f"encode returned a {type(result).__name__}; return a torch.Tensor or a NumPy array "
            f"of shape {expected_shape}"
        )
    got = result.astype(np.float64)
    if got.shape != expected_shape:
        hint = ""
        if got.shape == expected_shape[::-1]:
            hint = " (it looks transposed: one row per position, please)"
        elif got.shape == (num_positions, len(bases)):
            hint = " (one column per base: each base needs a sine column AND a cosine column)"
        raise AssertionError(f"expected shape {expected_shape}, got {got.shape}{hint}")
    distances = np.linalg.norm(got[:, None, :] - got[None, :, :], axis=-1)
    offset_only = all(np.ptp(np.diagonal(distances, k)) < 1e-4 for k in range(num_positions))
    if not np.allclose(got, _fixed_base_reference(num_positions, bases), atol=1e-5):
        geometry = (
            "distances between your positions do depend on the offset only, though"
            if offset_only
            else "and distances between your positions depend on more than their offset"
        )
        raise AssertionError(f"not yet right: {_diagnose(got, num_positions, bases)} ({geometry})")
    return (
        f"Correct: {num_positions} positions x {2 * len(bases)} columns, and the distance "
        "between two positions depends only on their offset (every diagonal of the distance "
        "matrix is constant to within 1e-4)."
    )
