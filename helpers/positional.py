"""Positional information for attention, which on its own sees a sequence as a
set.

Chapter 5 builds each piece from scratch; this module is the canonical version
later chapters import. Shapes: ``B`` batch, ``T`` sequence length, ``H`` heads,
``D`` model width (``d_model``).

- :func:`sinusoidal_encoding` and :class:`SinusoidalPositionalEncoding`: the
  fixed sine/cosine table of Vaswani et al. (2017), added to the input. Columns
  come in pairs ``(sin(t * w_j), cos(t * w_j))`` with angular speeds ``w_j =
  base ** (-2j / D)``.
- :func:`relative_rotation`: the block-diagonal matrix ``R(k)`` with ``p[t + k]
  = R(k) @ p[t]``.
- :class:`LearnedPositionalEmbedding`: one trained vector per position (GPT-2,
  BERT).
- :func:`alibi_slopes` and :func:`alibi_bias`: ALiBi's per-head linear penalty
  on distance, added to the attention scores instead of to the input (Press et
  al., 2022).
- :func:`apply_rotary`: rotary embeddings (RoPE), which rotate queries and keys
  so their dot product depends on the offset only (Su et al., 2021).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from helpers import _validate as check

__all__ = [
    "angular_speeds",
    "sinusoidal_encoding",
    "relative_rotation",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "alibi_slopes",
    "alibi_bias",
    "apply_rotary",
    "fixed_base_encoding",
]


# --- sinusoidal encodings -----------------------------------------------------


def angular_speeds(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The angular speeds ``w_j = base ** (-2j / d_model)`` of the D/2
    sine/cosine pairs.

    Returns a float64 tensor of shape (D/2,), from 1 radian per position down to
    ``base ** (-(D - 2) / D)``. ``d_model`` must be even.
    """
    _check_even_width(d_model)
    _check_encoding_base(base)
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    return base ** (-exponents)


def sinusoidal_encoding(
    num_positions: int,
    d_model: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The sinusoidal position table of shape (T, D), T = ``num_positions``, D =
    ``d_model``.

    Row ``t`` is the encoding of position ``t`` (counting from 0); columns
    ``2j`` and ``2j + 1`` hold ``sin(t * w_j)`` and ``cos(t * w_j)`` with ``w_j
    = base ** (-2j / D)``. The angles are computed in float64 and only the
    result is cast to ``dtype``: computed in float32, the angles of positions
    near 5000 are already off by up to 2e-4 radian.
    """
    check.positive_int("num_positions", num_positions)
    speeds = angular_speeds(d_model, base)  # validates d_model and base
    positions = torch.arange(num_positions, dtype=torch.float64)
    angles = positions[:, None] * speeds[None, :]  # (T, D/2)
    # (T, D/2, 2)
    table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)
    return table.reshape(num_positions, d_model).to(dtype)


def relative_rotation(
    offset: float, d_model: int, base: float = 10000.0
) -> torch.Tensor:
    """The (D, D) block-diagonal matrix ``R(k)`` that moves an encoding ``k``
    positions on.

    For the table ``P = sinusoidal_encoding(T, D, base)``: ``P[t + k] == R(k) @
    P[t]`` for every ``t`` (as rows: ``P[k:] == P[:-k] @ R(k).T``). Block ``j``
    rotates the pair ``(sin, cos)`` by the angle ``k * w_j``; it does not depend
    on ``t``. Returned in float64.
    """
    check.real("offset", offset)
    angles = offset * angular_speeds(d_model, base)  # (D/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    blocks = torch.stack(
        (torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2
    )
    return torch.block_diag(*blocks)  # blocks: (D/2, 2, 2)


class SinusoidalPositionalEncoding(nn.Module):
    """Add the fixed sinusoidal encoding to a batch of sequences: ``x +
    PE[:T]``.

    ``forward(x, offset=0)``: x of shape (B, T, D), D = ``d_model``, whose
    positions are ``offset .. offset + T - 1`` (at most ``max_len - 1``: a
    decoder with a key/value cache continues from ``offset``); returns ``x +
    PE[offset : offset + T]``, the same shape and dtype. The table ``pe`` of
    shape (max_len, D) is a *buffer*: it is saved in the ``state_dict`` and
    moves with ``.to(device)``, but it is not a parameter, so no optimizer ever
    changes it. ``d_model`` must be even (the table is made of sin/cos pairs).
    The input is not rescaled; multiply by ``sqrt(d_model)`` before if a model
    needs that.
    """

    pe: torch.Tensor

    def __init__(
        self, d_model: int, max_len: int = 5000, base: float = 10000.0
    ) -> None:
        super().__init__()
        check.positive_int("max_len", max_len)
        self.d_model = d_model
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base))

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_rows(self, x, offset)
        return x + self.pe[offset : offset + x.shape[1]].to(x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEmbedding(nn.Module):
    """Add one trained vector per position: ``x + W[:T]``, with W of shape
    (max_len, D).

    ``forward(x, offset=0)``: x of shape (B, T, D) at positions ``offset ..
    offset + T - 1`` (at most ``max_len - 1``); returns ``x + W[offset : offset
    + T]``, the same shape. ``W`` is an ``nn.Parameter`` (trained with the
    model, initialised from N(0, 0.02^2), the scale of GPT-2's token
    embeddings; GPT-2's own position table starts from N(0, 0.01^2)), so a
    position the model never saw in training has an untrained vector, and
    positions past ``max_len`` have none at all.
    """

    def __init__(
        self, d_model: int, max_len: int, init_std: float = 0.02
    ) -> None:
        super().__init__()
        check.positive_int("d_model", d_model)
        check.positive_int("max_len", max_len)
        check.positive_number("init_std", init_std, "GPT-2 uses 0.01")
        self.d_model = d_model
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * init_std)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_rows(self, x, offset)
        return x + self.weight[offset : offset + x.shape[1]].to(x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


# --- ALiBi --------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's fixed per-head slopes ``m_h``, shape (H,), float32.

    For H a power of two: the geometric sequence ``2 ** (-8 h / H)`` for h =
    1..H (for H = 8: 1/2, 1/4, ..., 1/256). Otherwise, as in the paper's code:
    the slopes of the largest power of two below H, then every other slope of
    twice that many heads to fill up.
    """
    check.positive_int("num_heads", num_heads)

    def power_of_two_slopes(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two_slopes(closest)
    slopes += power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    num_heads: int, seq_len: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """The ALiBi score bias of shape (H, T, T): ``bias[h, i, j] = -m_h * |i -
    j|``, float32.

    Add it to the attention scores before the softmax (it can be passed as a
    float ``attn_mask`` to ``F.scaled_dot_product_attention``, broadcasting over
    the batch). The paper's causal models only ever see ``j <= i``, where this
    equals ``-m_h * (i - j)``: combine it with a causal mask for a decoder.
    """
    check.positive_int("seq_len", seq_len)
    slopes = alibi_slopes(num_heads).to(device)
    positions = torch.arange(seq_len, device=device)
    # (T, T)
    distance = (positions[:, None] - positions[None, :]).abs().to(torch.float32)
    # (H, T, T); 0.0 - avoids printing -0.0
    return 0.0 - slopes[:, None, None] * distance


# --- RoPE ---------------------------------------------------------------------


def _check_rotary(x, positions) -> None:
    check.tensor("x", x, floating=True)
    if x.dim() < 2:
        raise ValueError(
            "apply_rotary expects x of shape (..., T, D), got shape "
            f"{tuple(x.shape)}; add a sequence dimension"
        )
    seq_len = x.shape[-2]
    if positions is None:
        return
    if not isinstance(positions, torch.Tensor) or positions.shape != (seq_len,):
        shape = (
            tuple(positions.shape)
            if isinstance(positions, torch.Tensor)
            else positions
        )
        raise ValueError(
            f"positions must be a tensor of shape (T,) = ({seq_len},) for x of "
            f"shape {tuple(x.shape)}, got {shape}; pass e.g. "
            f"torch.arange({seq_len})"
        )


def apply_rotary(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    base: float = 10000.0,
) -> torch.Tensor:
    """Rotary position embedding: rotate each pair ``(x[..., 2j], x[...,
    2j+1])`` of x.

    x has shape (..., T, D) (for example (B, H, T, d_head)) with D even;
    ``positions`` has shape (T,) and defaults to ``0, 1, ..., T-1``. The pair j
    of the vector at position t is rotated by the angle ``t * w_j``, ``w_j =
    base ** (-2j / D)``. Apply it to queries and keys (not values): then ``q_m .
    k_n`` depends on the positions only through ``n - m``. Returns the same
    shape and dtype as x; norms are preserved.
    """
    _check_rotary(x, positions)
    seq_len, width = x.shape[-2], x.shape[-1]
    speeds = angular_speeds(width, base)
    if positions is None:
        positions = torch.arange(seq_len)
    # Angles in float64 on the CPU (MPS has no float64), then cast and moved to
    # x. (T, D/2)
    angles = (
        positions.detach().to("cpu", torch.float64)[:, None] * speeds[None, :]
    )
    cos = torch.cos(angles).to(device=x.device, dtype=x.dtype)
    sin = torch.sin(angles).to(device=x.device, dtype=x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack(
        (x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1
    )
    return rotated.flatten(-2)


# --- clock dials --------------------------------------------------------------


def fixed_base_encoding(
    num_positions: int, bases: tuple[int, ...]
) -> torch.Tensor:
    """Chapter 5's clock dials: one hand per period in ``bases``, a float64
    table of shape (T, 2 * len(bases)), T = ``num_positions``.

    Columns ``2k`` and ``2k + 1`` hold ``sin(2 pi t / bases[k])`` and ``cos(2
    pi t / bases[k])`` for positions ``t = 0 .. T - 1``: the hand with period
    ``b`` is back where it started every ``b`` positions.
    """
    check.positive_int("num_positions", num_positions)
    steps = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (T, 1)
    periods = torch.tensor(bases, dtype=torch.float64)
    angles = 2 * math.pi * steps / periods  # (T, len(bases))
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)


# ------------------------------------------------------------ this module's checks
# Each has one caller, above; the generic checks are in helpers._validate.


def _check_even_width(d_model) -> None:
    """A width for sine/cosine pairs."""
    check.positive_int("d_model", d_model)
    if d_model % 2:
        nearest = (
            f"{d_model + 1}"
            if d_model == 1
            else f"{d_model + 1} (or {d_model - 1})"
        )
        raise ValueError(
            "d_model must be even: sine/cosine encodings fill the width in "
            f"(sin, cos) pairs, got d_model={d_model}; use d_model={nearest} "
            "or project the input to an even width first"
        )


def _check_encoding_base(base) -> None:
    check.real("base", base)
    if base <= 1.0:
        raise ValueError(
            "base must be a finite number > 1 (the angular speeds are base ** "
            f"(-2j / D)), got base={float(base)}; the original "
            "Transformer uses 10000.0"
        )


def _check_rows(table: nn.Module, x, offset) -> None:
    """``x (B, T, D)`` for a position table, at positions ``offset .. offset +
    T - 1``, each of which has a row."""
    who = type(table).__name__
    check.sequence("x", x, table.d_model, who, table.max_len)
    check.non_negative_int("offset", offset)
    if offset + x.shape[1] > table.max_len:
        raise ValueError(
            f"positions {offset} .. {offset + x.shape[1] - 1} "
            f"(offset={offset}, T={x.shape[1]}) run past "
            f"max_len={table.max_len} of {who}; build it with max_len >= "
            f"{offset + x.shape[1]} or cut the sequence"
        )
