"""Tests of helpers.checks: every exercise checker accepts a right answer, and each mistake it
names gets its hint (an AssertionError whose message the chapter promises)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from helpers import checks
from helpers.attention import (
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from helpers.kernel import nadaraya_watson
from helpers.tasks.reverse import token_accuracy

# --------------------------------------------------------------------------- chapter 1


def _laplace(queries, keys, values, width):
    return (
        torch.softmax(-(queries[:, None] - keys[None, :]).abs() / width, -1)
        @ values
    )


def _laplace_wrong_axis(queries, keys, values, width):
    kernel = torch.exp(-(queries[:, None] - keys[None, :]).abs() / width)
    return (kernel / kernel.sum(0)) @ values


def test_check_kernel_regression_accepts_a_right_answer():
    assert checks.check_kernel_regression(_laplace).startswith("Correct")


@pytest.mark.parametrize(
    ("fn", "hint"),
    [
        (_laplace_wrong_axis, r"normalized over the queries \(axis 0\)"),
        (
            lambda q, k, v, w: nadaraya_watson(q, k, v, w)[0],
            "compare your weights",
        ),
        (
            lambda q, k, v, w: v,
            r"expected a tensor of shape \(7,\).*got shape \(11,\)",
        ),
        (lambda q, k, v, w: _laplace(q, k, v, w).tolist(), "got list"),
    ],
    ids=["wrong axis", "gaussian kernel", "wrong shape", "not a tensor"],
)
def test_check_kernel_regression_names_the_mistake(fn, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_kernel_regression(fn)


# --------------------------------------------------------------------------- chapters 2-3


def _attention(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1) @ v


def test_check_attention_accepts_correct_answers():
    assert checks.check_attention(_attention).startswith("Correct")
    assert checks.check_attention(scaled_dot_product_attention).startswith(
        "Correct"
    )
    with pytest.raises(
        TypeError, match="pass your attention function itself, got str"
    ):
        checks.check_attention("not a function")


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (
            lambda q, k, v: (q @ k.transpose(-2, -1)).softmax(-1) @ v,
            "not scaled",
        ),
        (
            lambda q, k, v: (
                (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-2) @ v
            ),
            "over queries",
        ),
        (
            lambda q, k, v: (q @ k.T / q.shape[-1] ** 0.5).softmax(-1) @ v,
            r"k\.transpose\(-2, -1\)",
        ),
        (lambda q, k, v: _attention(k, q, v), "queries and keys are swapped"),
        (
            lambda q, k, v: (q @ k.transpose(-2, -1)).softmax(-1) @ v[:2],
            "check the shapes",
        ),
        (lambda q, k, v: _attention(q, k, v) + 1, "queries come first"),
        (
            lambda q, k, v: _attention(q, k, v)[..., :1],
            r"expected an output of shape",
        ),
    ],
    ids=[
        "unscaled",
        "softmax over queries",
        "k.T",
        "swapped",
        "crash",
        "other",
        "shape",
    ],
)
@pytest.mark.filterwarnings(
    "ignore:The use of `x.T` on tensors:UserWarning"
)  # the k.T mistake
def test_check_attention_names_the_mistake(fn, match):
    with pytest.raises(AssertionError, match=match):
        checks.check_attention(fn)


def _window(T, window):
    rows, cols = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (cols <= rows) & (rows - cols < window)


def test_check_sliding_window_mask_accepts_correct_answer():
    assert checks.check_sliding_window_mask(_window).startswith("Correct")
    with pytest.raises(TypeError, match="pass your mask function itself"):
        checks.check_sliding_window_mask(None)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda T, w: ~_window(T, w), "inverted: True must mean 'may attend'"),
        (
            lambda T, w: _window(T, w).float(),
            "must be boolean, got dtype torch.float32",
        ),
        (lambda T, w: _window(T, w)[:-1], r"expected a \(5, 5\) tensor"),
        (lambda T, w: _window(T, w + 1), r"entry \(query, key\)"),
    ],
    ids=["inverted", "float", "shape", "window too wide"],
)
def test_check_sliding_window_mask_names_the_mistake(fn, match):
    with pytest.raises(AssertionError, match=match):
        checks.check_sliding_window_mask(fn)


# --------------------------------------------------------------------------- chapter 4


@pytest.mark.parametrize(
    ("d_model", "num_heads"), [(8, 1), (8, 8), (12, 3), (64, 4), (96, 12)]
)
@pytest.mark.parametrize("bias", [False, True])
def test_parameter_count_formula(d_model, num_heads, bias):
    formula = 4 * d_model**2 + (4 * d_model if bias else 0)
    assert checks.mha_parameter_count(d_model, num_heads, bias) == formula
    torch_layer = nn.MultiheadAttention(d_model, num_heads, bias=bias)
    assert sum(p.numel() for p in torch_layer.parameters()) == formula


def test_parameter_count_refuses_indivisible_width():
    with pytest.raises(ValueError, match="not divisible"):
        checks.mha_parameter_count(10, 3)
    with pytest.raises(
        TypeError, match="d_model must be a positive int, got float"
    ):
        checks.mha_parameter_count(8.0, 2)


def _solution_split(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(
        1, 2
    )


def _solution_merge(x):
    batch, num_heads, seq_len, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_head)


def test_check_split_heads_accepts_the_solution():
    assert checks.check_split_heads(_solution_split).startswith("Correct")
    assert checks.check_split_heads(split_heads).startswith("Correct")


def test_check_split_heads_explains_the_direct_reshape():
    def direct(x, num_heads):
        batch, seq_len, d_model = x.shape
        return x.reshape(batch, num_heads, seq_len, d_model // num_heads)

    with pytest.raises(
        AssertionError, match="right shape, wrong content.*transpose"
    ):
        checks.check_split_heads(direct)


def test_check_split_heads_rejects_a_wrong_shape_or_content():
    with pytest.raises(AssertionError, match=r"\(B, H, T, d_head\)"):
        checks.check_split_heads(lambda x, num_heads: x)
    with pytest.raises(
        AssertionError, match=r"head h must hold features h\*d_head"
    ):
        checks.check_split_heads(
            lambda x, num_heads: _solution_split(x, num_heads).flip(1)
        )


def test_check_merge_heads():
    assert checks.check_merge_heads(_solution_merge).startswith("Correct")
    assert checks.check_merge_heads(merge_heads).startswith("Correct")

    def direct(x):
        batch, num_heads, seq_len, d_head = x.shape
        return x.reshape(batch, seq_len, num_heads * d_head)

    with pytest.raises(
        AssertionError, match="right shape, wrong content.*transpose"
    ):
        checks.check_merge_heads(direct)
    with pytest.raises(AssertionError, match=r"\(B, T, D\)"):
        checks.check_merge_heads(lambda x: x)
    with pytest.raises(
        AssertionError, match=r"merge_heads\(split_heads\(x, H\)\) must give x"
    ):
        checks.check_merge_heads(lambda x: _solution_merge(x.flip(1)))


def test_check_parameter_count():
    def solution(d_model, num_heads, bias):
        return 4 * d_model**2 + (4 * d_model if bias else 0)

    assert checks.check_parameter_count(solution).startswith("Correct")
    with pytest.raises(AssertionError, match="changes with num_heads"):
        checks.check_parameter_count(
            lambda d, h, bias: solution(d, h, bias) * h
        )
    with pytest.raises(AssertionError, match="d_model biases"):
        checks.check_parameter_count(lambda d, h, bias: 4 * d * d)
    with pytest.raises(
        AssertionError, match=r"expected 256 parameters, got 0\.$"
    ):
        checks.check_parameter_count(lambda d, h, bias: 0)


# --------------------------------------------------------------------------- chapter 5


def make_encoding(
    unit="radians", order="sin-cos", layout="interleaved", start=0
):
    def encode(num_positions, bases):
        steps = torch.arange(start, start + num_positions, dtype=torch.float64)[
            :, None
        ]
        turn = {"degrees": 360.0, "radians": 2 * math.pi, "one radian": 1.0}[
            unit
        ]
        angles = (
            turn * steps / torch.tensor(bases, dtype=torch.float64)[None, :]
        )
        first, second = (angles.sin(), angles.cos())
        if order == "cos-sin":
            first, second = second, first
        if layout == "blocks":
            return torch.cat((first, second), dim=1)
        return torch.stack((first, second), dim=-1).reshape(num_positions, -1)

    return encode


def test_checker_accepts_right_answers_in_torch_and_numpy():
    assert checks.check_fixed_base_encoding(make_encoding()).startswith(
        "Correct:"
    )
    numpy_answer = lambda n, b: make_encoding()(n, b).numpy().astype(np.float32)  # noqa: E731
    message = checks.check_fixed_base_encoding(
        numpy_answer, bases=(3, 11), num_positions=30
    )
    assert "offset" in message


@pytest.mark.parametrize(
    ("encoding", "pattern"),
    [
        (make_encoding(unit="degrees"), "degrees"),
        (make_encoding(order="cos-sin"), "swapped"),
        (make_encoding(layout="blocks"), "interleave"),
        (make_encoding(start=1), "start at 1"),
        (make_encoding(unit="one radian"), "not a full turn"),
    ],
)
def test_checker_names_the_usual_mistakes(encoding, pattern):
    with pytest.raises(AssertionError, match=pattern):
        checks.check_fixed_base_encoding(encoding)


def test_checker_reports_shape_and_type_mistakes():
    with pytest.raises(AssertionError, match="transposed"):
        checks.check_fixed_base_encoding(lambda n, b: make_encoding()(n, b).T)
    with pytest.raises(AssertionError, match="sine column AND a cosine column"):
        checks.check_fixed_base_encoding(lambda n, b: torch.zeros(n, len(b)))
    with pytest.raises(AssertionError, match="returned a list"):
        checks.check_fixed_base_encoding(lambda n, b: [[0.0]])
    with pytest.raises(TypeError, match="pass your encoding function itself"):
        checks.check_fixed_base_encoding(make_encoding()(4, (4, 5, 7)))
    with pytest.raises(
        TypeError, match="each base must be a positive int, got float"
    ):
        checks.check_fixed_base_encoding(make_encoding(), bases=(4.0, 5))
    with pytest.raises(
        ValueError, match="num_positions must be a positive int"
    ):
        checks.check_fixed_base_encoding(make_encoding(), num_positions=0)


def test_checker_points_at_the_first_wrong_value():
    def off_by_a_little(num_positions, bases):
        table = make_encoding()(num_positions, bases)
        table[3, 2] += 0.5
        return table

    with pytest.raises(
        AssertionError, match=r"position 3, column 2.*depend on more than"
    ):
        checks.check_fixed_base_encoding(off_by_a_little)


def test_checker_says_when_the_geometry_is_right_but_values_are_not():
    with pytest.raises(
        AssertionError, match="depend on the offset only, though"
    ):
        checks.check_fixed_base_encoding(make_encoding(unit="degrees"))


# --------------------------------------------------------------------------- chapter 6


def test_check_rms_norm_accepts_a_right_answer():
    def rms_norm(x, weight, eps):
        return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * weight

    assert checks.check_rms_norm(rms_norm).startswith("Correct")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (
            lambda x, w, eps: nn.functional.layer_norm(
                x, x.shape[-1:], w, None, eps
            ),
            "LayerNorm",
        ),
        (
            lambda x, w, eps: (
                x / ((x**2).mean(-1, keepdim=True).sqrt() + eps) * w
            ),
            "inside",
        ),
        (
            lambda x, w, eps: (
                x * ((x**2).mean(-1, keepdim=True) + eps).sqrt() * w
            ),
            "multiply",
        ),
        (
            lambda x, w, eps: (
                x / torch.sqrt((x**2).mean(0, keepdim=True) + eps) * w
            ),
            "dim=-1",
        ),
        (lambda x, w, eps: x.sum(-1), r"expected a tensor of shape \(3, 8\)"),
    ],
    ids=["layer norm", "eps outside", "multiplied", "wrong axis", "shape"],
)
def test_check_rms_norm_explains_mistakes(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_rms_norm(wrong)


def test_check_block_parameter_count():
    def right(d, f):
        return 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d

    assert checks.check_block_parameter_count(right).startswith("Correct")
    with pytest.raises(AssertionError, match="LayerNorms"):
        checks.check_block_parameter_count(lambda d, f: right(d, f) - 4 * d)
    with pytest.raises(AssertionError, match="biases"):
        checks.check_block_parameter_count(
            lambda d, f: 4 * d * d + 2 * d * f + 4 * d
        )
    with pytest.raises(AssertionError, match="4 D x D"):
        checks.check_block_parameter_count(lambda d, f: 0)


# --------------------------------------------------------------------------- chapter 7


def test_check_sequence_accuracy():
    def right(logits, targets):
        return (logits.argmax(-1) == targets).all(-1).float().mean()

    assert checks.check_sequence_accuracy(right).startswith("Correct")
    assert checks.check_sequence_accuracy(
        lambda *a: right(*a).item()
    ).startswith("Correct")
    with pytest.raises(AssertionError, match="token accuracy"):
        checks.check_sequence_accuracy(token_accuracy)
    with pytest.raises(AssertionError, match="one number"):
        checks.check_sequence_accuracy(
            lambda logits, targets: logits.argmax(-1) == targets
        )
    with pytest.raises(AssertionError, match="expected"):
        checks.check_sequence_accuracy(lambda logits, targets: 0.0)
