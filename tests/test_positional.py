"""Tests of helpers.positional: properties of every encoding, the module contract, the errors.

The checker of chapter 5's exercise is tested in tests/test_checks.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    angular_speeds,
    apply_rotary,
    relative_rotation,
    sinusoidal_encoding,
)

even_widths = st.integers(1, 64).map(lambda half: 2 * half)
bases = st.floats(2.0, 1e5)


def reference_table(
    num_positions: int, d_model: int, base: float = 10000.0
) -> np.ndarray:
    """The formula of Vaswani et al. written out loop by loop, in float64."""
    table = np.zeros((num_positions, d_model))
    for t in range(num_positions):
        for j in range(d_model // 2):
            angle = t / base ** (2 * j / d_model)
            table[t, 2 * j] = math.sin(angle)
            table[t, 2 * j + 1] = math.cos(angle)
    return table


# --- sinusoidal_encoding -----


@settings(max_examples=30, deadline=None)
@given(num_positions=st.integers(1, 40), d_model=even_widths, base=bases)
def test_sinusoidal_matches_the_formula(num_positions, d_model, base):
    table = sinusoidal_encoding(
        num_positions, d_model, base, dtype=torch.float64
    )
    assert table.shape == (num_positions, d_model)
    np.testing.assert_allclose(
        table.numpy(), reference_table(num_positions, d_model, base), atol=1e-12
    )


def test_first_rows_for_d_model_8():
    # The four rows the source notebook prints, to four decimals.
    expected = [
        [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
        [0.8415, 0.5403, 0.0998, 0.9950, 0.0100, 1.0000, 0.0010, 1.0000],
        [0.9093, -0.4161, 0.1987, 0.9801, 0.0200, 0.9998, 0.0020, 1.0000],
        [0.1411, -0.9900, 0.2955, 0.9553, 0.0300, 0.9996, 0.0030, 1.0000],
    ]
    torch.testing.assert_close(
        sinusoidal_encoding(4, 8), torch.tensor(expected), atol=6e-5, rtol=0
    )


def test_floor_exponent_of_source_003_is_not_the_formula():
    """Pins the fix of source 003's bug: exponent floor(2i/E) gives only two speeds.

    The right table has D/2 distinct angular speeds, geometric from 1 down to base**(-(D-2)/D).
    """
    d_model = 16
    speeds = angular_speeds(d_model)
    assert len(torch.unique(speeds)) == d_model // 2
    ratios = speeds[1:] / speeds[:-1]
    torch.testing.assert_close(
        ratios, torch.full_like(ratios, 10000.0 ** (-2 / d_model))
    )
    i = torch.arange(d_model)
    buggy_exponent = torch.floor(2 * i / d_model)
    assert set(buggy_exponent.tolist()) == {
        0.0,
        1.0,
    }  # the bug: two speeds, 1 and 1e-4


@settings(max_examples=30, deadline=None)
@given(num_positions=st.integers(1, 300), d_model=even_widths, base=bases)
def test_sinusoidal_is_bounded_with_constant_norm(num_positions, d_model, base):
    table = sinusoidal_encoding(
        num_positions, d_model, base, dtype=torch.float64
    )
    assert table.abs().max() <= 1.0
    norms = table.norm(dim=1)
    torch.testing.assert_close(
        norms, torch.full_like(norms, math.sqrt(d_model / 2))
    )


@settings(max_examples=25, deadline=None)
@given(d_model=even_widths, base=bases, offset=st.integers(0, 60))
def test_distances_depend_on_the_offset_only(d_model, base, offset):
    table = sinusoidal_encoding(200, d_model, base, dtype=torch.float64)
    distances = (table[offset:] - table[: 200 - offset]).norm(
        dim=1
    )  # every pair (t, t + offset)
    assert distances.max() - distances.min() < 1e-9


def test_float32_table_is_accurate_at_large_positions():
    # Angles are computed in float64: position 4999 is as accurate as position 1.
    table = sinusoidal_encoding(5000, 64)
    np.testing.assert_allclose(
        table[-1].double().numpy(), reference_table(5000, 64)[-1], atol=1e-6
    )


# --- relative_rotation -----


@settings(max_examples=25, deadline=None)
@given(d_model=even_widths, base=bases, offset=st.integers(-50, 50))
def test_rotation_moves_every_position_by_the_offset(d_model, base, offset):
    table = sinusoidal_encoding(120, d_model, base, dtype=torch.float64)
    rotation = relative_rotation(offset, d_model, base)
    start = max(0, -offset)
    moved = table[start : 70 + start] @ rotation.T  # rows: p[t] -> R(k) p[t]
    torch.testing.assert_close(
        moved, table[start + offset : 70 + start + offset]
    )
    eye = torch.eye(d_model, dtype=torch.float64)
    torch.testing.assert_close(rotation @ rotation.T, eye)  # orthogonal


# --- the module -----


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(1, 3), seq_len=st.integers(1, 20), d_model=even_widths)
def test_module_adds_the_table(batch, seq_len, d_model):
    module = SinusoidalPositionalEncoding(d_model, max_len=20)
    x = torch.randn(batch, seq_len, d_model)
    out = module(x)
    assert out.shape == x.shape
    torch.testing.assert_close(
        out - x, sinusoidal_encoding(seq_len, d_model).expand_as(x)
    )


def test_module_table_is_a_buffer_not_a_parameter():
    module = SinusoidalPositionalEncoding(8, max_len=50)
    assert list(module.parameters()) == []
    assert list(module.state_dict()) == ["pe"]
    assert module.pe.shape == (50, 8)
    assert not module.pe.requires_grad
    moved = module.to(
        torch.float64
    )  # buffers follow .to(...) like parameters do
    assert moved.pe.dtype == torch.float64
    restored = SinusoidalPositionalEncoding(8, max_len=50)
    restored.load_state_dict(module.state_dict())
    torch.testing.assert_close(restored.pe, module.pe.float())


def test_module_default_max_len_and_dtype():
    module = SinusoidalPositionalEncoding(16)
    assert module.pe.shape == (5000, 16)
    x = torch.zeros(1, 3, 16, dtype=torch.float64)
    assert module(x).dtype == torch.float64
    assert "max_len=5000" in repr(module)


def test_module_too_long_sequence_is_a_clear_error():
    module = SinusoidalPositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match=r"T=11 exceeds max_len=10"):
        module(torch.zeros(1, 11, 8))


def test_module_wrong_shapes_are_clear_errors():
    module = SinusoidalPositionalEncoding(8, max_len=10)
    with pytest.raises(
        ValueError, match=r"shape \(B, T, D=8\), got \(5, 8\).*unsqueeze\(0\)"
    ):
        module(torch.zeros(5, 8))
    with pytest.raises(ValueError, match=r"d_model=8 but x has width 6"):
        module(torch.zeros(1, 5, 6))
    with pytest.raises(TypeError, match="torch.Tensor"):
        module(np.zeros((1, 5, 8)))


@pytest.mark.parametrize("d_model", [1, 7, 513])
def test_odd_d_model_is_refused_clearly(d_model):
    # The sources' recipe crashes with a shape mismatch deep inside a slice assignment.
    with pytest.raises(
        ValueError, match=rf"d_model must be even.*d_model={d_model}"
    ):
        SinusoidalPositionalEncoding(d_model)
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_encoding(4, d_model)


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        (
            {"num_positions": 0, "d_model": 8},
            ValueError,
            "num_positions must be a positive int",
        ),
        (
            {"num_positions": 3.0, "d_model": 8},
            TypeError,
            "num_positions must be a positive int, got float",
        ),
        (
            {"num_positions": 3, "d_model": True},
            TypeError,
            "d_model must be a positive int, got bool",
        ),
        (
            {"num_positions": 3, "d_model": 8.0},
            TypeError,
            "d_model must be a positive int, got float",
        ),
        (
            {"num_positions": 3, "d_model": 8, "base": 1.0},
            ValueError,
            "base must be a finite",
        ),
        (
            {"num_positions": 3, "d_model": 8, "base": float("inf")},
            ValueError,
            "base must be finite",
        ),
        (
            {"num_positions": 3, "d_model": 8, "base": "10000"},
            TypeError,
            "base must be a number, got str",
        ),
    ],
)
def test_sinusoidal_argument_errors(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        sinusoidal_encoding(**kwargs)


def test_module_and_rotation_argument_errors():
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        SinusoidalPositionalEncoding(8, max_len=0)
    with pytest.raises(TypeError, match="offset must be a number"):
        relative_rotation("3", 8)


# --- learned embeddings -----


def test_learned_embedding_is_a_parameter_and_adds_rows():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(6, max_len=12)
    names = [name for name, _ in module.named_parameters()]
    assert names == ["weight"]
    assert module.weight.shape == (12, 6)
    assert 0.01 < module.weight.std().item() < 0.04
    x = torch.randn(2, 5, 6)
    torch.testing.assert_close(
        module(x) - x, module.weight[:5].detach().expand(2, 5, 6)
    )
    module(
        x
    ).sum().backward()  # the table is trained: positions used get a gradient
    assert module.weight.grad[:5].abs().min() > 0
    assert module.weight.grad[5:].abs().max() == 0


def test_learned_embedding_errors():
    module = LearnedPositionalEmbedding(6, max_len=4)
    with pytest.raises(ValueError, match=r"T=5 exceeds max_len=4"):
        module(torch.zeros(1, 5, 6))
    with pytest.raises(ValueError, match="init_std must be > 0"):
        LearnedPositionalEmbedding(6, max_len=4, init_std=0.0)
    with pytest.raises(ValueError, match="d_model must be a positive int"):
        LearnedPositionalEmbedding(0, max_len=4)


# --- ALiBi -----


def test_alibi_slopes_match_the_paper():
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)])
    )
    torch.testing.assert_close(
        alibi_slopes(2), torch.tensor([2.0**-4, 2.0**-8])
    )
    # Not a power of two: 4 heads' slopes, then every other slope of 8 heads.
    expected_6 = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(expected_6))


@settings(max_examples=25, deadline=None)
@given(num_heads=st.integers(1, 16), seq_len=st.integers(1, 30))
def test_alibi_bias_is_a_linear_penalty_on_distance(num_heads, seq_len):
    bias = alibi_bias(num_heads, seq_len)
    slopes = alibi_slopes(num_heads)
    assert bias.shape == (num_heads, seq_len, seq_len)
    assert (slopes > 0).all() and (slopes <= 1).all()
    assert (bias <= 0).all() and (
        torch.diagonal(bias, dim1=1, dim2=2) == 0
    ).all()
    torch.testing.assert_close(bias, bias.transpose(1, 2))
    for offset in range(
        1, seq_len
    ):  # constant along diagonals: translation invariant
        diagonal = torch.diagonal(bias, offset, dim1=1, dim2=2)
        torch.testing.assert_close(
            diagonal, (-slopes * offset)[:, None].expand_as(diagonal)
        )


def test_alibi_bias_works_as_an_sdpa_float_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 6, 8).unbind(0)  # (B, H, T, d_head)
    bias = alibi_bias(4, 6)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) + bias
    expected = torch.softmax(scores, dim=-1) @ v
    got = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=bias
    )
    torch.testing.assert_close(got, expected)


def test_alibi_argument_errors():
    with pytest.raises(ValueError, match="num_heads must be a positive int"):
        alibi_bias(0, 4)
    with pytest.raises(
        TypeError, match="seq_len must be a positive int, got float"
    ):
        alibi_bias(2, 4.5)


# --- RoPE -----


@settings(max_examples=30, deadline=None)
@given(
    d_model=even_widths,
    m=st.integers(0, 500),
    n=st.integers(0, 500),
    shift=st.integers(-200, 200),
    seed=st.integers(0, 2**16),
)
def test_rotary_dot_product_depends_on_the_offset_only(
    d_model, m, n, shift, seed
):
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, d_model, generator=generator, dtype=torch.float64)

    def score(query_position: int, key_position: int) -> torch.Tensor:
        rotated_q = apply_rotary(q, torch.tensor([query_position]))
        rotated_k = apply_rotary(k, torch.tensor([key_position]))
        return (rotated_q * rotated_k).sum()

    torch.testing.assert_close(score(m, n), score(m + shift, n + shift))


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(1, 3), seq_len=st.integers(1, 12), d_model=even_widths)
def test_rotary_keeps_shape_dtype_and_norms(batch, seq_len, d_model):
    x = torch.randn(batch, 2, seq_len, d_model)
    rotated = apply_rotary(x)
    assert rotated.shape == x.shape and rotated.dtype == x.dtype
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(
        rotated[..., 0, :], x[..., 0, :]
    )  # position 0: no rotation


def test_rotary_pairs_rotate_by_position_times_speed():
    x = torch.zeros(1, 4, dtype=torch.float64)
    x[0, 0], x[0, 2] = 1.0, 1.0  # unit vectors in pair 0 and pair 1
    rotated = apply_rotary(x, torch.tensor([3]), base=100.0)
    speeds = torch.tensor([1.0, 100.0 ** (-0.5)], dtype=torch.float64)
    angles = 3 * speeds
    expected = torch.stack((angles.cos(), angles.sin()), -1).reshape(1, 4)
    torch.testing.assert_close(rotated, expected)


@settings(max_examples=30, deadline=None)
@given(
    seq_len=st.integers(1, 8),
    d_model=even_widths,
    offset=st.integers(-1000, 1000),
    base=bases,
)
def test_rotary_is_the_transposed_relative_rotation(
    seq_len, d_model, offset, base
):
    # RoPE turns pairs counter-clockwise: R(k)^T x in chapter 5's notation, x @ R(k) as rows.
    x = torch.randn(seq_len, d_model, dtype=torch.float64)
    rotated = apply_rotary(x, torch.full((seq_len,), offset), base=base)
    rotation = relative_rotation(offset, d_model, base)
    torch.testing.assert_close(rotated, x @ rotation)
    torch.testing.assert_close(rotated.T, rotation.T @ x.T)


def test_rotary_argument_errors():
    with pytest.raises(ValueError, match="d_model must be even"):
        apply_rotary(torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., T, D\)"):
        apply_rotary(torch.zeros(4))
    with pytest.raises(
        ValueError, match=r"positions must be a tensor of shape \(T,\) = \(3,\)"
    ):
        apply_rotary(torch.zeros(3, 4), torch.arange(4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        apply_rotary([[0.0, 1.0]])


def test_sinusoidal_positions_are_far_apart():
    """Unlike dials with integer periods (4, 5, 7 repeat after 140), no two positions coincide.

    By the offset property the closest pair among 5000 positions is the closest offset to 0.
    """
    table = sinusoidal_encoding(5000, 64, dtype=torch.float64)
    gaps = (table[1:] - table[0]).norm(dim=1)
    assert gaps.min() > 1.0


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_everything_runs_on_the_device_of_its_input(device):
    module = SinusoidalPositionalEncoding(8, max_len=16).to(device)
    x = torch.zeros(2, 5, 8, device=device)
    assert module(x).device == x.device
    assert apply_rotary(x).device == x.device
    assert apply_rotary(x, torch.arange(5, device=device)).device == x.device
    assert (
        alibi_bias(4, 5, device=device).device.type == torch.device(device).type
    )


def test_odd_d_model_message_suggests_only_valid_widths():
    with pytest.raises(ValueError, match=r"use d_model=2 or project"):
        sinusoidal_encoding(3, 1)


# --- misuse: the wrong kind of value ----------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    [
        SinusoidalPositionalEncoding(8, max_len=10),
        LearnedPositionalEmbedding(8, max_len=10),
    ],
    ids=["sinusoidal", "learned"],
)
def test_integer_sequences_are_refused(module):
    """Token ids (int64) must go through an nn.Embedding first: adding positions to them
    would silently cast or fail deep inside."""
    tokens = torch.randint(0, 10, (2, 5, 8))
    with pytest.raises(
        TypeError,
        match=r"floating-point x, got dtype torch\.int64.*nn\.Embedding",
    ):
        module(tokens)


@pytest.mark.parametrize(
    ("build", "error", "pattern"),
    [
        (
            lambda: LearnedPositionalEmbedding(8, 16, init_std="0.02"),
            TypeError,
            "init_std must be a number, got str",
        ),
        (
            lambda: LearnedPositionalEmbedding(8.0, 16),
            TypeError,
            "d_model must be a positive int, got float",
        ),
        (
            lambda: LearnedPositionalEmbedding(8, 16.0),
            TypeError,
            "max_len must be a positive int, got float",
        ),
        (
            lambda: SinusoidalPositionalEncoding(8.0),
            TypeError,
            "d_model must be a positive int, got float",
        ),
        (
            lambda: SinusoidalPositionalEncoding(8, max_len=16.0),
            TypeError,
            "max_len must be a positive int, got float",
        ),
        (
            lambda: SinusoidalPositionalEncoding(8, base="1e4"),
            TypeError,
            "base must be a number, got str",
        ),
        (
            lambda: alibi_slopes(2.0),
            TypeError,
            "num_heads must be a positive int, got float",
        ),
        (
            lambda: apply_rotary(torch.ones(3, 4, dtype=torch.long)),
            TypeError,
            "floating-point tensor",
        ),
    ],
)
def test_the_wrong_kind_of_argument_is_a_type_error(build, error, pattern):
    with pytest.raises(error, match=pattern):
        build()


def test_fixed_base_encoding_turns_one_hand_per_period():
    from helpers.checks import check_fixed_base_encoding
    from helpers.positional import fixed_base_encoding

    table = fixed_base_encoding(10, (4, 5))
    assert table.shape == (10, 4) and table.dtype == torch.float64
    # the hand with period 4 is back at 12 o'clock (sin 0, cos 1) at t = 4 and 8
    for t in (0, 4, 8):
        assert torch.allclose(
            table[t, :2], torch.tensor([0.0, 1.0], dtype=torch.float64)
        )
    assert not torch.allclose(table[5, :2], table[0, :2])
    check_fixed_base_encoding(
        fixed_base_encoding
    )  # the exercise's checker agrees
    with pytest.raises(ValueError, match="num_positions"):
        fixed_base_encoding(0, (4,))
