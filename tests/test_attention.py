"""Tests of helpers.attention: against PyTorch's own attention, and every documented error.

The comparisons that copy weights from PyTorch's modules are in tests/test_interop.py, the
exercise checkers of chapters 2-4 in tests/test_checks.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import close
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import mha_case, qkv_case
from torch import nn

from helpers.attention import (
    MultiHeadAttention,
    PerHeadMultiHeadAttention,
    SingleHeadAttention,
    attend_heads,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from helpers.interop import fuse_heads, load_multihead_attention
from helpers.masks import additive_mask, causal_mask, padding_mask

FEW = settings(max_examples=25, deadline=None)


# ----------------------------------------------------------------- scaled dot-product attention


@st.composite
def sdpa_case(draw):
    """Random q, k, v (with 0-2 batch dimensions) and a random boolean mask or None."""
    q, k, v, gen = draw(qkv_case(max_len=6, max_v_width=5))
    batch, q_len, k_len = q.shape[:-2], q.shape[-2], k.shape[-2]
    mask_kind = draw(st.sampled_from(["none", "full", "2d"]))
    mask = None
    if mask_kind == "full":
        mask = torch.rand(*batch, q_len, k_len, generator=gen) < 0.7
    elif mask_kind == "2d":
        mask = torch.rand(q_len, k_len, generator=gen) < 0.7
    if (
        mask is not None
    ):  # never the pattern of PyTorch's triu mask, which is refused
        mask[..., 0, 0] = True
    return q, k, v, mask


@FEW
@given(sdpa_case())
def test_sdpa_matches_pytorch(case):
    q, k, v, mask = case
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(output, expected)
    assert weights.shape == (*q.shape[:-1], k.shape[-2])


@FEW
@given(sdpa_case())
def test_weights_are_convex_or_zero(case):
    q, k, v, mask = case
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (weights >= 0).all()
    row_sums = weights.sum(-1)
    has_key = torch.ones_like(row_sums, dtype=torch.bool)
    if mask is not None:
        has_key = mask.any(-1).expand_as(row_sums)
    close(row_sums[has_key], torch.ones_like(row_sums[has_key]))
    assert (row_sums[~has_key] == 0).all()


@FEW
@given(sdpa_case())
def test_output_is_weights_times_values(case):
    q, k, v, mask = case
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    reference = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    close(weights, reference)
    close(output, reference @ v)


def test_mask_shapes_2d_3d_4d_broadcast():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=gen) for _ in range(3))
    full = torch.rand(2, 3, 4, 4, generator=gen) < 0.6
    for mask in (
        full[0, 0],
        full[:, :1],
        full[:1, :1, :1],
        causal_mask(4)[None, None],
    ):
        expanded = mask.expand(2, 3, 4, 4)
        close(
            scaled_dot_product_attention(q, k, v, mask)[0],
            scaled_dot_product_attention(q, k, v, expanded)[0],
        )
    # a (B, Tq, Tk) mask against 3-D scores
    q3, k3, v3 = q[:, 0], k[:, 0], v[:, 0]
    close(
        scaled_dot_product_attention(q3, k3, v3, full[:, 0])[0],
        F.scaled_dot_product_attention(q3, k3, v3, attn_mask=full[:, 0]),
    )


def test_fully_masked_row_gives_zero_weights_and_zero_output_without_nan():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, generator=gen, requires_grad=True)
    k, v = torch.randn(5, 4, generator=gen), torch.randn(5, 2, generator=gen)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (weights[1] == 0).all() and (output[1] == 0).all()
    assert torch.isfinite(output).all()
    output.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert (q.grad[1] == 0).all()


def test_masked_keys_get_exactly_zero_weight_even_in_half_precision():
    """Source 003 fills with -1e9, which float16 cannot hold; -inf works in every dtype."""
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(4, 8, generator=gen).half() for _ in range(3))
    with pytest.raises(RuntimeError, match="overflow"):
        (q @ k.T).masked_fill(~causal_mask(4), -1e9)
    _, weights = scaled_dot_product_attention(q, k, v, causal_mask(4))
    assert weights.dtype == torch.float16
    assert (weights[~causal_mask(4)] == 0).all()


def test_minus_1e9_fill_averages_fully_masked_rows_uniformly():
    """The pitfall the package avoids: a large negative fill turns 'no key' into 'every key'."""
    scores = torch.zeros(1, 4).masked_fill(
        torch.ones(1, 4, dtype=torch.bool), -1e9
    )
    assert torch.allclose(scores.softmax(-1), torch.full((1, 4), 0.25))
    mask = torch.zeros(1, 4, dtype=torch.bool)
    _, weights = scaled_dot_product_attention(
        torch.ones(1, 2), torch.ones(4, 2), torch.ones(4, 2), mask
    )
    assert (weights == 0).all()


def test_scale_argument_replaces_sqrt_d():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 6, generator=gen) for _ in range(3))
    close(
        scaled_dot_product_attention(q, k, v, scale=1.0)[1],
        (q @ k.T).softmax(-1),
    )
    close(
        scaled_dot_product_attention(q, k, v, scale=2)[1],
        (2 * q @ k.T).softmax(-1),
    )


@pytest.mark.parametrize(
    ("scale", "error", "match"),
    [
        ("x", TypeError, "scale must be a number, got str"),
        (True, TypeError, "scale must be a number, got bool"),
        (torch.tensor(1.0), TypeError, "scale must be a number, got Tensor"),
        (0.0, ValueError, r"scale must be > 0.*uniform"),
        (-1.0, ValueError, r"scale must be > 0.*least similar keys"),
        (float("inf"), ValueError, "scale must be finite"),
        (float("nan"), ValueError, "scale must be finite"),
    ],
)
def test_scale_must_be_a_positive_number(scale, error, match):
    q = torch.ones(2, 3)
    with pytest.raises(error, match=match):
        scaled_dot_product_attention(q, q, q, scale=scale)


def _rows_moved(attend, query, key_value):
    """Which output rows change when query token 0 is nudged (cross-attention)."""
    nudged = query.clone()
    nudged[:, 0] += 1.0
    before, after = attend(query, key_value), attend(nudged, key_value)
    return ((after - before).abs().amax(dim=-1) > 1e-6).all(dim=0).tolist()


def test_queries_and_keys_are_not_swapped():
    """Source 003 calls attention(k, q, v): then every row follows the nudged query, which
    acts as key 0. In cross-attention with Tq == Tk that runs silently; the modules must not."""
    gen = torch.Generator().manual_seed(4)
    query = torch.randn(2, 5, 8, generator=gen)  # decoder side, Tq = 5
    memory = torch.randn(2, 5, 8, generator=gen)  # encoder side, Tk = 5
    only_first = [True, False, False, False, False]
    torch.manual_seed(4)
    head = SingleHeadAttention(8, 4)
    assert (
        _rows_moved(lambda x, m: head(x, m, m)[0], query, memory) == only_first
    )
    for module in (MultiHeadAttention(8, 2), PerHeadMultiHeadAttention(8, 2)):
        assert _rows_moved(
            lambda x, m, module=module: module(x, m, m), query, memory
        ) == (only_first)
    q, k, v = query[0, :, :4], memory[0, :, :4], memory[0, :, 4:]
    assert (
        _rows_moved(
            lambda x, m: scaled_dot_product_attention(x[0], k, v)[0][None],
            q[None],
            None,
        )
        == only_first
    )
    # the control: the swapped call moves every row, so the test can tell the two apart
    swapped = _rows_moved(
        lambda x, m: scaled_dot_product_attention(k, x[0], v)[0][None],
        q[None],
        None,
    )
    assert all(swapped)


def test_dropout_rescales_without_renormalizing():
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(6, 4, generator=gen) for _ in range(3))
    _, clean = scaled_dot_product_attention(q, k, v)
    _, dropped = scaled_dot_product_attention(
        q, k, v, dropout_p=0.5, generator=torch.Generator().manual_seed(0)
    )
    kept = dropped != 0
    assert kept.any() and (~kept).any()
    close(dropped[kept], clean[kept] / 0.5)
    assert not torch.allclose(dropped.sum(-1), torch.ones(6))


def test_dropout_is_reproducible_with_a_generator_and_off_when_not_training():
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 5, 4, generator=gen) for _ in range(3))
    first = scaled_dot_product_attention(
        q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(9)
    )
    second = scaled_dot_product_attention(
        q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(9)
    )
    assert torch.equal(first[0], second[0])
    evaluated = scaled_dot_product_attention(
        q, k, v, dropout_p=0.3, training=False
    )
    assert torch.equal(evaluated[0], scaled_dot_product_attention(q, k, v)[0])


def test_dropout_keeps_total_weight_one_on_average():
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(10, 16, generator=gen) for _ in range(3))
    q, k = q.expand(2000, 10, 16), k.expand(2000, 10, 16)
    _, weights = scaled_dot_product_attention(
        q, k, v, dropout_p=0.6, generator=gen
    )
    assert abs(weights.sum(-1).mean().item() - 1.0) < 0.02


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("q", "k", "v"), {}, TypeError, "torch.Tensor"),
        (
            (torch.ones(2, 3, dtype=torch.long),) * 3,
            {},
            TypeError,
            "floating-point",
        ),
        (
            (torch.ones(3), torch.ones(3), torch.ones(3)),
            {},
            ValueError,
            "at least 2",
        ),
        (
            (torch.ones(2, 3), torch.ones(2, 4), torch.ones(2, 4)),
            {},
            ValueError,
            "same width",
        ),
        (
            (torch.ones(2, 3), torch.ones(4, 3), torch.ones(5, 3)),
            {},
            ValueError,
            "same length",
        ),
        (
            (torch.ones(2, 3), torch.ones(4, 3), torch.ones(4, 3).double()),
            {},
            TypeError,
            "share a dtype",
        ),
        (
            (torch.ones(2, 2, 3), torch.ones(3, 4, 3), torch.ones(3, 4, 3)),
            {},
            ValueError,
            "do not broadcast",
        ),
        (
            (torch.ones(2, 3),) * 3,
            {"mask": torch.ones(2, 2)},
            TypeError,
            r"mask.bool\(\)",
        ),
        (
            (torch.ones(2, 3),) * 3,
            {"mask": torch.ones(2, 2, dtype=torch.int)},
            TypeError,
            "boolean",
        ),
        (
            (torch.ones(2, 3),) * 3,
            {"mask": [[True]]},
            TypeError,
            "boolean torch.Tensor",
        ),
        (
            (torch.ones(2, 3),) * 3,
            {"mask": torch.ones(3, 2, dtype=torch.bool)},
            ValueError,
            "cannot broadcast",
        ),
        (
            (torch.ones(2, 3),) * 3,
            {"mask": torch.ones(4, 2, 2, dtype=torch.bool)},
            ValueError,
            "cannot broadcast",
        ),
        ((torch.ones(2, 3),) * 3, {"dropout_p": 1.0}, ValueError, r"\[0, 1\)"),
        ((torch.ones(2, 3),) * 3, {"dropout_p": -0.1}, ValueError, r"\[0, 1\)"),
        (
            (torch.ones(2, 3),) * 3,
            {"dropout_p": True},
            TypeError,
            "dropout_p must be a number",
        ),
        (
            (torch.ones(2, 3),) * 3,
            {"dropout_p": "0.1"},
            TypeError,
            "dropout_p must be a number",
        ),
        (
            (torch.ones(2, 3),) * 3,
            {"training": 1},
            TypeError,
            "training must be True or False",
        ),
    ],
)
def test_sdpa_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        scaled_dot_product_attention(*args, **kwargs)


@pytest.mark.parametrize("num_heads", [2, 3])  # B == H and B != H
def test_3d_mask_against_4d_scores_is_per_sequence_shared_by_heads(num_heads):
    """A (B, Tq, Tk) mask is inserted as (B, 1, Tq, Tk), as MultiHeadAttention does; plain
    right-aligned broadcasting would line B up with H (silently wrong when B == H)."""
    gen = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(2, num_heads, 4, 8, generator=gen) for _ in range(3))
    per_sequence = causal_mask(4) & padding_mask([4, 2])[:, 0]  # (B=2, Tq, Tk)
    output, weights = scaled_dot_product_attention(q, k, v, per_sequence)
    expected, expected_weights = scaled_dot_product_attention(
        q, k, v, per_sequence[:, None]
    )
    assert torch.equal(output, expected) and torch.equal(
        weights, expected_weights
    )
    assert (
        weights[1, :, :, 2:] == 0
    ).all()  # sequence 1's padding, in every head
    assert (weights[:, :, ~causal_mask(4)] == 0).all()
    if (
        num_heads == 2
    ):  # the trap: F.sdpa runs and applies sequence b's mask to head b
        lined_up = F.scaled_dot_product_attention(
            q, k, v, attn_mask=per_sequence
        )
        assert not torch.allclose(lined_up, expected)
    else:
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, attn_mask=per_sequence)


def test_per_head_mask_shared_by_the_batch_is_written_1_h_tq_tk():
    q = torch.ones(2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"\(1, H, Tq, Tk\)"):
        scaled_dot_product_attention(
            q, q, q, torch.ones(3, 4, 4, dtype=torch.bool)
        )
    per_head = (
        torch.rand(1, 3, 4, 4, generator=torch.Generator().manual_seed(0)) < 0.7
    )
    _, weights = scaled_dot_product_attention(q, q, q, per_head)
    assert (weights[:, ~per_head[0]] == 0).all()


# ----------------------------------------------------------------- masks


@given(st.integers(1, 12))
@settings(max_examples=10, deadline=None)
def test_causal_mask_is_lower_triangular(T):
    mask = causal_mask(T)
    assert mask.shape == (T, T) and mask.dtype == torch.bool
    rows, cols = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.equal(mask, cols <= rows)


@pytest.mark.parametrize(
    ("T", "error", "match"),
    [
        (0, ValueError, "T must be a positive int, got 0"),
        (2.0, TypeError, "T must be a positive int, got float"),
        (True, TypeError, "T must be a positive int, got bool"),
    ],
)
def test_causal_mask_errors(T, error, match):
    with pytest.raises(error, match=match):
        causal_mask(T)


def test_padding_mask_values_and_shape():
    mask = padding_mask([3, 1, 0], max_len=4)
    assert mask.shape == (3, 1, 1, 4) and mask.dtype == torch.bool
    expected = torch.tensor(
        [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool
    )
    assert torch.equal(mask[:, 0, 0], expected)
    assert padding_mask(torch.tensor([2, 5])).shape == (2, 1, 1, 5)


@pytest.mark.parametrize(
    ("lengths", "max_len", "error", "match"),
    [
        ([2, -1], None, ValueError, "non-negative"),
        ([2, 5], 4, ValueError, "longest length 5"),
        ([0, 0], None, ValueError, "positive"),
        ([], None, ValueError, "non-empty"),
        (torch.tensor([[1, 2]]), None, ValueError, "1-D"),
        (torch.tensor([1.0, 2.0]), None, TypeError, "integer"),
        ([1.5, 2], None, TypeError, "ints"),
        ("12", None, TypeError, "list of ints"),
        ([1, 2], 3.0, TypeError, "max_len"),
    ],
)
def test_padding_mask_errors(lengths, max_len, error, match):
    with pytest.raises(error, match=match):
        padding_mask(lengths, max_len)


def test_padding_mask_serves_cross_attention_with_any_query_length():
    gen = torch.Generator().manual_seed(8)
    q, k, v = (
        torch.randn(2, 7, 4, generator=gen),
        *(torch.randn(2, 3, 4, generator=gen),) * 2,
    )
    mask = padding_mask([3, 2])[:, 0]  # (B, 1, Tk)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    assert weights.shape == (2, 7, 3)
    assert (weights[1, :, 2] == 0).all()


def test_additive_mask_equals_boolean_mask():
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(4, 4, generator=gen) for _ in range(3))
    mask = causal_mask(4)
    additive = additive_mask(mask)
    assert additive.dtype == torch.float32
    assert torch.equal(additive == 0, mask)
    close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
        scaled_dot_product_attention(q, k, v, mask)[0],
    )
    with pytest.raises(TypeError, match="boolean"):
        additive_mask(additive)


def test_torch_mha_uses_the_opposite_convention():
    """nn.MultiheadAttention's boolean masks mean True = ignore: pass ~mask to it."""
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = load_multihead_attention(
        MultiHeadAttention(8, 2, bias=True), torch_mha
    ).eval()
    x = torch.randn(2, 5, 8)
    mask = padding_mask([5, 3])
    expected = ours(x, x, x, mask)
    right, _ = torch_mha(x, x, x, key_padding_mask=~mask[:, 0, 0])
    wrong, _ = torch_mha(x, x, x, key_padding_mask=mask[:, 0, 0])
    close(right, expected)
    assert not torch.allclose(wrong, expected, atol=1e-3)
    causal_right, _ = torch_mha(x, x, x, attn_mask=~causal_mask(5))
    close(causal_right, ours(x, x, x, causal_mask(5)))


# ----------------------------------------------------------------- multi-head attention


@FEW
@given(mha_case())
def test_fast_and_weights_paths_agree(case):
    seed, d_model, num_heads, bias, query, key, value, mask = case
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_model, num_heads, bias=bias)
    fast = mha(query, key, value, mask)
    slow, weights = mha(query, key, value, mask, return_attention=True)
    assert fast.shape == (query.shape[0], query.shape[1], d_model)
    assert weights.shape == (
        query.shape[0],
        num_heads,
        query.shape[1],
        key.shape[1],
    )
    close(fast, slow)


def test_single_head_attention_shapes():
    head = SingleHeadAttention(8, 3)
    output, weights = head(
        torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    )
    assert output.shape == (2, 4, 3) and weights.shape == (2, 4, 6)


@pytest.mark.parametrize("return_attention", [False, True])
def test_causal_mha_leaks_nothing_from_the_future(return_attention):
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3, bias=True)
    T = 6
    for t in range(T):
        x = torch.randn(2, T, 12, requires_grad=True)
        output = mha(x, x, x, causal_mask(T), return_attention=return_attention)
        output = output[0] if return_attention else output
        output[:, t].sum().backward()
        assert (x.grad[:, t + 1 :] == 0).all()
        assert (x.grad[:, : t + 1].abs().sum(-1) > 0).all()


def test_unmasked_mha_does_leak_the_future():
    """The control for the test above: without the mask, gradients reach later positions."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(1, 5, 12, requires_grad=True)
    mha(x, x, x)[:, 0].sum().backward()
    assert (x.grad[:, 1:].abs().sum(-1) > 0).all()


def test_eval_mode_is_deterministic_with_dropout():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 7, 16)
    for return_attention in (False, True):
        mha.train()
        first = mha(x, x, x, return_attention=return_attention)
        second = mha(x, x, x, return_attention=return_attention)
        first = first[0] if return_attention else first
        second = second[0] if return_attention else second
        assert not torch.allclose(first, second)
        mha.eval()
        outputs = [
            mha(x, x, x, return_attention=return_attention) for _ in range(2)
        ]
        outputs = [out[0] if return_attention else out for out in outputs]
        assert torch.equal(outputs[0], outputs[1])


def _one_fully_masked_row(bias):
    """A seeded MultiHeadAttention(8, 2), a query, a key and a mask (2, 3, 4) that blocks
    every key of query 1 in batch element 0."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, bias=bias)
    query, key = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False
    return mha, query, key, mask


def test_mha_fully_masked_rows_are_zero_on_both_paths():
    mha, query, key, mask = _one_fully_masked_row(bias=False)
    fast = mha(query, key, key, mask)
    slow, weights = mha(query, key, key, mask, return_attention=True)
    assert (weights[0, :, 1] == 0).all()
    assert torch.isfinite(fast).all()
    close(fast, slow)
    assert (fast[0, 1] == 0).all()  # no bias: zero heads give a zero output


def test_mha_with_bias_gives_a_fully_masked_row_the_output_bias():
    """The zero weights survive the output projection; the zero output does not."""
    mha, query, key, mask = _one_fully_masked_row(bias=True)
    with torch.no_grad():
        for return_attention in (False, True):
            result = mha(
                query, key, key, mask, return_attention=return_attention
            )
            output = result[0] if return_attention else result
            close(output[0, 1], mha.out_proj.bias)
            assert (output[0, 1] != 0).any()


@pytest.mark.parametrize(
    ("d_model", "num_heads", "dropout", "error", "match"),
    [
        (10, 4, 0.0, ValueError, "not divisible"),
        (8, 0, 0.0, ValueError, "positive int"),
        (0, 2, 0.0, ValueError, "positive int"),
        (8.0, 2, 0.0, TypeError, "positive int"),
        (8, 2.0, 0.0, TypeError, "positive int"),
        (8, True, 0.0, TypeError, "positive int"),
        (8, 2, 1.0, ValueError, r"\[0, 1\)"),
        (8, 2, -0.5, ValueError, r"\[0, 1\)"),
    ],
)
def test_mha_constructor_errors(d_model, num_heads, dropout, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention(d_model, num_heads, dropout=dropout)


@pytest.mark.parametrize(
    ("module", "sizes", "error", "match"),
    [
        (PerHeadMultiHeadAttention, (10, 4), ValueError, "not divisible"),
        (
            PerHeadMultiHeadAttention,
            (8.0, 2),
            TypeError,
            "d_model must be a positive int",
        ),
        (
            PerHeadMultiHeadAttention,
            (8, 0),
            ValueError,
            "num_heads must be a positive int",
        ),
        (
            SingleHeadAttention,
            (8.0, 4),
            TypeError,
            "d_model must be a positive int",
        ),
        (
            SingleHeadAttention,
            (8, "4"),
            TypeError,
            "d_head must be a positive int",
        ),
        (
            SingleHeadAttention,
            (8, 0),
            ValueError,
            "d_head must be a positive int",
        ),
    ],
)
def test_per_head_and_single_head_constructor_errors(
    module, sizes, error, match
):
    """``PerHeadMultiHeadAttention(d_model, num_heads)`` and
    ``SingleHeadAttention(d_model, d_head)`` refuse bad sizes."""
    with pytest.raises(error, match=match):
        module(*sizes)


@pytest.mark.parametrize(
    ("shapes", "mask", "error", "match"),
    [
        (
            ((3, 8), (3, 8), (3, 8)),
            None,
            ValueError,
            r"\(B, T, D=8\).*unsqueeze\(0\)",
        ),
        (
            ((2, 3, 6), (2, 3, 8), (2, 3, 8)),
            None,
            ValueError,
            "project it to 8 features",
        ),
        (((2, 3, 8), (2, 4, 8), (2, 5, 8)), None, ValueError, "same length"),
        (((2, 3, 8), (1, 4, 8), (1, 4, 8)), None, ValueError, "batch size"),
        (
            ((2, 3, 8), (2, 4, 8), (2, 4, 8)),
            torch.ones(3, 3, dtype=torch.bool),
            ValueError,
            "broadcast",
        ),
        (
            ((2, 3, 8), (2, 4, 8), (2, 4, 8)),
            torch.ones(4, dtype=torch.bool),
            ValueError,
            "2-D",
        ),
        (
            ((2, 3, 8), (2, 4, 8), (2, 4, 8)),
            torch.ones(3, 4),
            TypeError,
            r"mask.bool\(\)",
        ),
        (
            ((2, 3, 8), (2, 4, 8), (2, 4, 8)),
            "float64",
            TypeError,
            "share a dtype",
        ),
    ],
)
def test_mha_forward_errors(shapes, mask, error, match):
    mha = MultiHeadAttention(8, 2)
    query, key, value = (torch.randn(*shape) for shape in shapes)
    if (
        mask == "float64"
    ):  # a key of another dtype, which the fused kernel would reject
        mask, key = None, key.double()
    for module in (mha, PerHeadMultiHeadAttention(8, 2)):
        with pytest.raises(error, match=match):
            module(query, key, value, mask)


def test_mha_rejects_non_tensors():
    with pytest.raises(TypeError, match="torch.Tensor"):
        MultiHeadAttention(8, 2)([[0.0] * 8], [[0.0] * 8], [[0.0] * 8])


def test_self_attention_uses_one_fused_projection():
    """Self-attention and cross-attention with the same tensor give the same result."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, bias=True)
    x = torch.randn(2, 5, 8)
    close(mha(x, x, x), mha(x, x.clone(), x.clone()))
    assert mha.qkv_proj.weight.shape == (24, 8)


# ----------------------------------------------------------------- masks of the other convention


def _torch_causal(T: int) -> torch.Tensor:
    """PyTorch's causal mask: True = blocked (the opposite of this package's convention)."""
    return torch.triu(torch.ones(T, T, dtype=torch.bool), 1)


@pytest.mark.parametrize("T", [2, 5])
def test_sdpa_refuses_pytorchs_causal_mask(T):
    q = torch.randn(2, T, 4, generator=torch.Generator().manual_seed(0))
    for mask in (_torch_causal(T), _torch_causal(T).expand(2, T, T)):
        with pytest.raises(
            ValueError, match=r"PyTorch's causal mask torch\.triu\(ones, 1\)"
        ) as info:
            scaled_dot_product_attention(q, q, q, mask)
        assert "True = may attend" in str(info.value) and "~mask" in str(
            info.value
        )
    _, weights = scaled_dot_product_attention(
        q, q, q, ~_torch_causal(T)
    )  # the fix it names
    assert torch.equal(weights != 0, causal_mask(T).expand(2, T, T))


@pytest.mark.parametrize(
    "module", [MultiHeadAttention, PerHeadMultiHeadAttention]
)
@pytest.mark.parametrize("return_attention", [False, True])
def test_multi_head_layers_refuse_pytorchs_causal_mask(
    module, return_attention
):
    torch.manual_seed(0)
    layer = module(8, 2)
    x = torch.randn(2, 5, 8)
    for mask in (_torch_causal(5), _torch_causal(5)[None].expand(2, 5, 5)):
        with pytest.raises(
            ValueError, match=r"torch\.triu\(ones, 1\).*True = may attend"
        ):
            layer(x, x, x, mask, return_attention=return_attention)
    fixed = layer(
        x, x, x, ~_torch_causal(5), return_attention=return_attention
    )  # the fix
    expected = layer(x, x, x, causal_mask(5), return_attention=return_attention)
    if return_attention:
        fixed, expected = fixed[0], expected[0]
    close(fixed, expected)


def _legitimate_masks(T: int) -> dict[str, torch.Tensor]:
    empty_rows = causal_mask(T).clone()
    empty_rows[1] = (
        False  # a query with no key at all, but others see themselves
    )
    return {
        "causal": causal_mask(T),
        "padding": padding_mask([T, 2])[:, 0].expand(2, T, T),
        "padding with an empty sequence": padding_mask([T, 0], max_len=T)[
            :, 0
        ].expand(2, T, T),
        "empty rows, diagonal partly True": empty_rows,
        "leave one out (no diagonal, every row has keys)": ~torch.eye(
            T, dtype=torch.bool
        ),
        "all True": torch.ones(T, T, dtype=torch.bool),
    }


@pytest.mark.parametrize("name", list(_legitimate_masks(4)))
def test_legitimate_masks_are_not_taken_for_pytorchs_convention(name):
    mask = _legitimate_masks(4)[name]
    q = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1))
    _, weights = scaled_dot_product_attention(q, q, q, mask)
    assert (weights[~mask.expand(2, 4, 4)] == 0).all()
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2)
    fast = layer(q, q, q, mask)
    slow, _ = layer(q, q, q, mask, return_attention=True)
    close(fast, slow)


def test_a_strictly_causal_mask_is_not_taken_for_pytorchs_convention():
    strictly_causal = torch.tril(torch.ones(4, 4, dtype=torch.bool), -1)
    q = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    _, weights = scaled_dot_product_attention(q, q, q, strictly_causal)
    assert (weights[0] == 0).all() and torch.equal(
        weights[1:] != 0, strictly_causal[1:]
    )
    nothing = torch.zeros(
        4, 4, dtype=torch.bool
    )  # documented: every row gives zeros
    assert (scaled_dot_product_attention(q, q, q, nothing)[0] == 0).all()


def test_padding_mask_with_an_empty_sequence_in_self_attention():
    """A (B, 1, 1, Tk) padding mask is never square: the triu check must not look at it."""
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(2))
    mask = padding_mask([3, 0])
    torch.manual_seed(0)
    output = MultiHeadAttention(8, 2)(x, x, x, mask)
    assert (output[1] == 0).all() and torch.isfinite(output).all()


# ----------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    "module", [MultiHeadAttention, PerHeadMultiHeadAttention]
)
def test_multi_head_layers_refuse_float64_input_naming_both_dtypes(module):
    layer = module(8, 2)
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    with pytest.raises(
        TypeError, match=r"dtype torch\.float64.*parameters are torch\.float32"
    ):
        layer(x, x, x)
    assert (
        layer.double()(x, x, x).dtype == torch.float64
    )  # the fix the message names


def test_multi_head_layers_refuse_integer_input():
    x = torch.ones(2, 3, 8, dtype=torch.long)
    with pytest.raises(TypeError, match="floating-point query.*nn.Embedding"):
        MultiHeadAttention(8, 2)(x, x, x)


# ----------------------------------------------------------------- split and merge heads


def test_split_and_merge_heads_round_trip():
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(3))
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(
        heads[:, 1], x[..., 4:8]
    )  # head h: features h*4 .. h*4 + 3
    assert torch.equal(merge_heads(heads), x)


# ----------------------------------------------------------------- the one kernel


def _kernel_inputs(num_heads, num_kv_heads, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, num_heads, 5, 4, generator=gen)
    k, v = (torch.randn(2, num_kv_heads, 6, 4, generator=gen) for _ in "kv")
    return q, k, v


def _row_without_keys():
    mask = padding_mask([6, 3])[:, 0].expand(2, 5, 6).clone()  # (B, Tq, Tk)
    mask[1, 0] = False  # sequence 1's query 0 may see no key
    return mask


KERNEL_MASKS = {
    "none": None,
    "2d": causal_mask(6)[1:],  # (Tq, Tk): query t sees keys 0 .. t + 1
    "3d": _row_without_keys(),  # (B, Tq, Tk), shared by the heads
    "4d": torch.rand(2, 4, 5, 6, generator=torch.Generator().manual_seed(1))
    < 0.6,  # (B, H, Tq, Tk), one per head
}


def _alibi_like(num_heads):
    """A float bias (H, Tq, Tk): a distance penalty per head, and -inf on every
    key of query 4 (a row with no key)."""
    distance = (torch.arange(5)[:, None] - torch.arange(6)[None]).abs().float()
    bias = -torch.arange(1, num_heads + 1.0)[:, None, None] * distance / 4
    bias[:, 4] = float("-inf")
    return bias


def _head_mask(mask, h):
    """Query head h's mask, for 3-D q (B, Tq, d)."""
    if mask is None or mask.ndim == 2:
        return mask
    mask = mask[:, None] if mask.ndim == 3 else mask  # (B, H | 1, Tq, Tk)
    return mask[:, min(h, mask.shape[1] - 1)]


@pytest.mark.parametrize("mask_kind", list(KERNEL_MASKS))
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads"), [(4, 4), (4, 2), (4, 1)]
)
def test_attend_heads_is_each_query_head_attending_to_its_key_value_head(
    mask_kind, with_bias, num_heads, num_kv_heads
):
    """The fused path and the written-out path equal a loop over the query
    heads, head h reading key/value head h // group through
    scaled_dot_product_attention; a row with no key is zero on both paths."""
    q, k, v = _kernel_inputs(num_heads, num_kv_heads)
    mask = KERNEL_MASKS[mask_kind]
    bias = _alibi_like(num_heads) if with_bias else None
    group = num_heads // num_kv_heads
    expected = [
        scaled_dot_product_attention(
            q[:, h],
            k[:, h // group],
            v[:, h // group],
            _head_mask(mask, h),
            bias=None if bias is None else bias[h],
        )
        for h in range(num_heads)
    ]
    fused, no_weights = attend_heads(q, k, v, mask, bias=bias)
    written, weights = attend_heads(q, k, v, mask, bias=bias, need_weights=True)
    assert no_weights is None and not fused.isnan().any()
    close(fused, torch.stack([output for output, _ in expected], dim=1))
    close(written, torch.stack([output for output, _ in expected], dim=1))
    close(weights, torch.stack([weight for _, weight in expected], dim=1))
    rows = []  # rows with no key: zero outputs
    if with_bias:
        rows.append((slice(None), slice(None), 4))
    if mask_kind == "3d":
        rows.append((1, slice(None), 0))
    for row in rows:
        assert (fused[row] == 0).all() and (written[row] == 0).all()


def test_attend_heads_reads_grouped_key_value_heads_without_copying_them():
    """A key/value head is read in place by its group of query heads: the kernel
    writes no more with one key/value head for 8 query heads than with the
    head already repeated 8 times (a copy per query head would add 8 copies of
    the keys and values)."""
    from helpers.analysis import DispatchCounter

    q, k, v = _kernel_inputs(8, 1)
    k, v = (torch.cat([x] * 100, dim=2) for x in (k, v))  # 600 keys
    written = []
    for kv_heads in (1, 8):
        keys, values = (x.repeat(1, kv_heads, 1, 1) for x in (k, v))
        with DispatchCounter() as counter:
            attend_heads(q, keys, values)
        written.append(counter.elements_written)
    assert written[0] <= written[1]


def test_scaled_dot_product_attention_adds_a_float_bias():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 4, 5, generator=gen) for _ in "qkv")
    bias = torch.randn(3, 4, 4, generator=gen)  # (H, Tq, Tk), from the right
    output, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    mask = causal_mask(4)
    output, _ = scaled_dot_product_attention(q, k, v, mask, bias=bias)
    both = bias.masked_fill(~mask, float("-inf"))
    close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=both))
    with pytest.raises(TypeError, match="bias must be a floating-point tensor"):
        scaled_dot_product_attention(q, k, v, bias=mask)
    with pytest.raises(
        ValueError, match=r"bias of shape \(5, 4\) cannot broadcast"
    ):
        scaled_dot_product_attention(q, k, v, bias=torch.zeros(5, 4))
    with pytest.raises(TypeError, match="q, bias must share a dtype"):
        scaled_dot_product_attention(q, k, v, bias=bias.double())


def test_split_heads_refuses_an_indivisible_width():
    with pytest.raises(ValueError, match="not divisible"):
        split_heads(torch.zeros(2, 5, 12), 5)


# ----------------------------------------------------------------- chapter 4's claims


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("d_model", "num_heads"), [(8, 1), (8, 8), (12, 3), (64, 4), (96, 12)]
)
@pytest.mark.parametrize("bias", [False, True])
def test_parameter_count_is_4_d_squared_whatever_the_heads(
    d_model, num_heads, bias
):
    formula = 4 * d_model**2 + (4 * d_model if bias else 0)
    for module in (
        MultiHeadAttention(d_model, num_heads, bias=bias),
        PerHeadMultiHeadAttention(d_model, num_heads, bias=bias),
        nn.MultiheadAttention(d_model, num_heads, bias=bias),
    ):
        assert sum(p.numel() for p in module.parameters()) == formula, type(
            module
        ).__name__


@settings(max_examples=20, deadline=None)
@given(
    q_len=st.integers(1, 7),
    k_len=st.integers(1, 7),
    num_heads=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 2**16),
)
def test_per_head_cross_attention(q_len, k_len, num_heads, seed):
    """Pins source 003's swapped q/k: weights are (B, H, Tq, Tk), rows sum to one over keys."""
    torch.manual_seed(seed)
    d_model = 8
    per_head = PerHeadMultiHeadAttention(d_model, num_heads)
    query, memory = (
        _randn(2, q_len, d_model, seed=seed),
        _randn(2, k_len, d_model, seed=seed + 1),
    )
    output, weights = per_head(query, memory, memory, return_attention=True)
    assert output.shape == (2, q_len, d_model)
    assert weights.shape == (2, num_heads, q_len, k_len)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, num_heads, q_len))
    close(output, fuse_heads(per_head)(query, memory, memory))


@settings(max_examples=20, deadline=None)
@given(
    q_len=st.integers(1, 6), k_len=st.integers(1, 6), seed=st.integers(0, 2**16)
)
def test_permutation_symmetries(q_len, k_len, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(12, 3)
    query, memory = (
        _randn(2, q_len, 12, seed=seed),
        _randn(2, k_len, 12, seed=seed + 1),
    )
    q_order, k_order = torch.randperm(q_len), torch.randperm(k_len)
    reference = mha(query, memory, memory)
    close(mha(query[:, q_order], memory, memory), reference[:, q_order])
    close(mha(query, memory[:, k_order], memory[:, k_order]), reference)


def test_permutation_symmetries_with_mask():
    """A mask encodes positions: it must be permuted with the inputs (source 000 omits it)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    x = _randn(2, 6, 12)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    mask = causal_mask(6)
    reference = mha(x, x, x, mask=mask)
    moved = mha(
        x[:, order], x[:, order], x[:, order], mask=mask[order][:, order]
    )
    close(moved, reference[:, order])
    kept = mha(x[:, order], x[:, order], x[:, order], mask=mask)
    assert (kept - reference[:, order]).abs().max() > 1e-2


def test_a_fixed_causal_mask_allows_only_the_identity_permutation():
    """Chapter 4, exercise 4: under a fixed causal mask no reordering of positions is free."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    x = _randn(1, 4, 12)
    causal = causal_mask(4)
    reference = mha(x, x, x, mask=causal)
    allowed = [
        order
        for order in itertools.permutations(range(4))
        if torch.allclose(
            mha(x[:, order], x[:, order], x[:, order], mask=causal),
            reference[:, order],
            atol=1e-6,
        )
    ]
    assert allowed == [(0, 1, 2, 3)]


def test_heads_own_their_rows_of_qkv_and_columns_of_out_proj():
    """The documented weight layout: head h is rows h*d_head:(h+1)*d_head of each q/k/v block
    and the same columns of out_proj. Moving all four together reorders the heads and changes
    nothing else (chapter 4, exercise 3)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    order = [2, 0, 1]
    rows = torch.cat(
        [torch.arange(h * mha.d_head, (h + 1) * mha.d_head) for h in order]
    )
    permuted = MultiHeadAttention(12, 3)
    with torch.no_grad():
        for block in range(3):
            permuted.qkv_proj.weight[block * 12 : (block + 1) * 12] = (
                mha.qkv_proj.weight[block * 12 + rows]
            )
        permuted.out_proj.weight.copy_(mha.out_proj.weight[:, rows])
    x = _randn(2, 5, 12)
    output, weights = mha(x, x, x, return_attention=True)
    permuted_output, permuted_weights = permuted(x, x, x, return_attention=True)
    close(permuted_output, output)
    close(permuted_weights, weights[:, order])


def test_attention_width_is_the_embedding_width():
    """Source 002 sizes attention by the vocabulary; the fix sizes it by the embeddings."""
    torch.manual_seed(0)
    n_vocab, n_embd = 65, 32
    embedded = nn.Embedding(n_vocab, n_embd)(torch.randint(0, n_vocab, (2, 8)))
    assert MultiHeadAttention(n_embd, 4)(
        embedded, embedded, embedded
    ).shape == (2, 8, n_embd)
    with pytest.raises(ValueError, match=r"d_model=65 but query has width 32"):
        MultiHeadAttention(n_vocab, 5)(embedded, embedded, embedded)


def test_indivisible_width_is_refused():
    for module in (MultiHeadAttention, PerHeadMultiHeadAttention):
        with pytest.raises(
            ValueError,
            match=r"not divisible by num_heads.*among \[1, 5, 13, 65\]",
        ):
            module(65, 4)


def test_source_001_value_width():
    """Source 001's unprojected values crash its output layer unless the input width is
    d_model. Here every head projects its values to d_head, and an input of another width is
    refused up front with a message, not a matmul error deep inside."""
    same, narrow = _randn(2, 5, 4), _randn(2, 5, 3)
    for num_heads in (1, 2, 4):
        per_head = PerHeadMultiHeadAttention(4, num_heads)
        assert all(
            head.value.out_features == 4 // num_heads for head in per_head.heads
        )
        assert per_head(same, same, same).shape == (2, 5, 4)
        with pytest.raises(ValueError, match="project it to 4 features"):
            per_head(narrow, narrow, narrow)


# ----------------------------------------------------------------- the texts' own layers, ported
# Chapter 4 points to the Sources and errata page (book/sources.md) for two mistakes in code the
# chapter does not show. These ports run those mistakes, so that the page's claims are checked.


class _Source001Head(nn.Module):
    """Source 001's head, trimmed (no mask): full-width projections, values optionally raw."""

    def __init__(self, hidden_dim, input_dim=None, proj_values=False):
        super().__init__()
        self.d_k, self.proj_values = hidden_dim, proj_values
        input_dim = hidden_dim if input_dim is None else input_dim
        self.linear_query = nn.Linear(input_dim, hidden_dim)
        self.linear_key = nn.Linear(input_dim, hidden_dim)
        self.linear_value = nn.Linear(input_dim, hidden_dim)

    def init_keys(self, keys):
        self.proj_keys = self.linear_key(keys)
        self.values = self.linear_value(keys) if self.proj_values else keys

    def forward(self, query):
        scores = (
            self.linear_query(query)
            @ self.proj_keys.transpose(1, 2)
            / math.sqrt(self.d_k)
        )
        return scores.softmax(dim=-1) @ self.values


class _Source001MHA(nn.Module):
    """Source 001's multi-head module: H full-width heads, then a (H * D -> D) output layer."""

    def __init__(self, n_heads, d_model, input_dim=None, proj_values=True):
        super().__init__()
        self.linear_out = nn.Linear(n_heads * d_model, d_model)
        self.attn_heads = nn.ModuleList(
            _Source001Head(d_model, input_dim, proj_values)
            for _ in range(n_heads)
        )

    def init_keys(self, keys):
        for head in self.attn_heads:
            head.init_keys(keys)

    def forward(self, query):
        return self.linear_out(
            torch.cat([head(query) for head in self.attn_heads], dim=-1)
        )


def test_source_001_heads_crash_on_raw_values_of_another_width():
    torch.manual_seed(0)
    narrow, same = _randn(2, 5, 3), _randn(2, 5, 4, seed=1)
    projected = _Source001MHA(
        n_heads=2, d_model=4, input_dim=3, proj_values=True
    )
    raw_same = _Source001MHA(n_heads=2, d_model=4, proj_values=False)
    raw_narrow = _Source001MHA(
        n_heads=2, d_model=4, input_dim=3, proj_values=False
    )
    projected.init_keys(narrow)
    raw_same.init_keys(same)
    raw_narrow.init_keys(narrow)
    assert projected(narrow).shape == (2, 5, 4)
    assert raw_same(same).shape == (
        2,
        5,
        4,
    )  # runs only because input_dim == d_model
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        raw_narrow(narrow)


def test_source_001_full_width_heads_cost_about_h_times_the_standard_layer():
    """Not a mistake, a design: 3H(D^2 + D) + H D^2 + D parameters against 4D^2 + 4D."""
    d, h = 64, 16
    count = sum(p.numel() for p in _Source001MHA(h, d).parameters())
    assert count == 3 * h * (d * d + d) + h * d * d + d
    assert (
        sum(p.numel() for p in _Source001MHA(1, d).parameters())
        == 4 * d * d + 4 * d
    )
    assert 15 < count / (4 * d * d + 4 * d) < 16


class _VocabWidthMHA(nn.Module):
    """Source 002's attention, ported: its width is input_dim, the vocabulary size there.

    ``qkv_size`` is defined (the text uses it undefined); ``dim`` is accepted and ignored.
    """

    def __init__(self, input_dim: int, dim: int, n_heads: int):
        super().__init__()
        self.n_heads, self.qkv_size = n_heads, input_dim // n_heads
        self.query, self.key, self.value = (
            nn.Linear(input_dim, self.qkv_size * n_heads, bias=False)
            for _ in range(3)
        )
        self.output = nn.Linear(input_dim, input_dim, bias=False)

    def forward(self, x):  # x: (T, input_dim), one sequence, as in the text
        seq = x.shape[0]
        q, k, v = (
            p(x).reshape(seq, self.n_heads, -1)
            for p in (self.query, self.key, self.value)
        )
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(self.qkv_size)
        heads = torch.einsum("hts,shd->thd", scores.softmax(dim=-1), v)
        return self.output(heads.reshape(seq, -1))


def test_source_002_vocabulary_width_crashes_on_embeddings():
    torch.manual_seed(0)
    n_vocab, n_embd, n_heads = 65, 32, 4
    embedded = nn.Embedding(n_vocab, n_embd)(torch.randint(0, n_vocab, (8,)))
    layer = _VocabWidthMHA(
        input_dim=n_vocab, dim=n_vocab // n_heads, n_heads=n_heads
    )
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        layer(
            embedded
        )  # (1) the embeddings, as the text's own model feeds them
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        layer(
            _randn(8, n_vocab)
        )  # (2) 4 heads of 65 // 4 = 16 features: 64, not 65
    # the text's demonstration runs: a vocabulary padded to 128 splits into its 2 heads
    assert _VocabWidthMHA(128, 64, 2)(_randn(8, 128)).shape == (8, 128)
    # (3) the size is tied to the vocabulary: four (V, V) matrices
    assert (
        sum(p.numel() for p in _VocabWidthMHA(128, 64, 2).parameters())
        == 4 * 128**2
    )
    assert (
        4 * 50_304**2 > 10**10
    )  # a GPT-2-sized vocabulary (the page's "ten billion")
    fixed = MultiHeadAttention(n_embd, n_heads)
    assert fixed(embedded[None], embedded[None], embedded[None]).shape == (
        1,
        8,
        n_embd,
    )
