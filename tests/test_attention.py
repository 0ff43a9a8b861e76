"""Tests of helpers.attention: against PyTorch's own attention, and every documented error."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers.attention import (
    MultiHeadAttention,
    PerHeadMultiHeadAttention,
    SingleHeadAttention,
    additive_mask,
    causal_mask,
    check_attention,
    check_sliding_window_mask,
    padding_mask,
    scaled_dot_product_attention,
)

FEW = settings(max_examples=25, deadline=None)
ATOL = 1e-5


def _close(actual: torch.Tensor, expected: torch.Tensor, atol: float = ATOL) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-4)


# ----------------------------------------------------------------- scaled dot-product attention


@st.composite
def sdpa_case(draw):
    """Random q, k, v (with 0-2 batch dimensions) and a random boolean mask or None."""
    seed = draw(st.integers(0, 2**16))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    q_len, k_len = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    width, v_width = draw(st.integers(1, 8)), draw(st.integers(1, 5))
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, q_len, width, generator=gen)
    k = torch.randn(*batch, k_len, width, generator=gen)
    v = torch.randn(*batch, k_len, v_width, generator=gen)
    mask_kind = draw(st.sampled_from(["none", "full", "2d"]))
    mask = None
    if mask_kind == "full":
        mask = torch.rand(*batch, q_len, k_len, generator=gen) < 0.7
    elif mask_kind == "2d":
        mask = torch.rand(q_len, k_len, generator=gen) < 0.7
    return q, k, v, mask


@FEW
@given(sdpa_case())
def test_sdpa_matches_pytorch(case):
    q, k, v, mask = case
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    _close(output, expected)
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
    _close(row_sums[has_key], torch.ones_like(row_sums[has_key]))
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
    _close(weights, reference)
    _close(output, reference @ v)


def test_mask_shapes_2d_3d_4d_broadcast():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=gen) for _ in range(3))
    full = torch.rand(2, 3, 4, 4, generator=gen) < 0.6
    for mask in (full[0, 0], full[:, :1], full[:1, :1, :1], causal_mask(4)[None, None]):
        expanded = mask.expand(2, 3, 4, 4)
        _close(
            scaled_dot_product_attention(q, k, v, mask)[0],
            scaled_dot_product_attention(q, k, v, expanded)[0],
        )
    # a (B, Tq, Tk) mask against 3-D scores
    q3, k3, v3 = q[:, 0], k[:, 0], v[:, 0]
    _close(
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
    scores = torch.zeros(1, 4).masked_fill(torch.ones(1, 4, dtype=torch.bool), -1e9)
    assert torch.allclose(scores.softmax(-1), torch.full((1, 4), 0.25))
    mask = torch.zeros(1, 4, dtype=torch.bool)
    _, weights = scaled_dot_product_attention(
        torch.ones(1, 2), torch.ones(4, 2), torch.ones(4, 2), mask
    )
    assert (weights == 0).all()


def test_scale_argument_replaces_sqrt_d():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 6, generator=gen) for _ in range(3))
    _close(
        scaled_dot_product_attention(q, k, v, scale=1.0)[1],
        (q @ k.T).softmax(-1),
    )
    _close(scaled_dot_product_attention(q, k, v, scale=2)[1], (2 * q @ k.T).softmax(-1))


@pytest.mark.parametrize(
    ("scale", "error", "match"),
    [
        ("x", TypeError, "positive number or None"),
        (True, TypeError, "positive number or None"),
        (torch.tensor(1.0), TypeError, "positive number or None"),
        (0.0, ValueError, "positive finite"),
        (-1.0, ValueError, "positive finite"),
        (float("inf"), ValueError, "positive finite"),
        (float("nan"), ValueError, "positive finite"),
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
    assert _rows_moved(lambda x, m: head(x, m, m)[0], query, memory) == only_first
    for module in (MultiHeadAttention(8, 2), PerHeadMultiHeadAttention(8, 2)):
        assert _rows_moved(lambda x, m, module=module: module(x, m, m), query, memory) == (
            only_first
        )
    q, k, v = query[0, :, :4], memory[0, :, :4], memory[0, :, 4:]
    assert (
        _rows_moved(lambda x, m: scaled_dot_product_attention(x[0], k, v)[0][None], q[None], None)
        == only_first
    )
    # the control: the swapped call moves every row, so the test can tell the two apart
    swapped = _rows_moved(
        lambda x, m: scaled_dot_product_attention(k, x[0], v)[0][None], q[None], None
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
    _close(dropped[kept], clean[kept] / 0.5)
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
    evaluated = scaled_dot_product_attention(q, k, v, dropout_p=0.3, training=False)
    assert torch.equal(evaluated[0], scaled_dot_product_attention(q, k, v)[0])


def test_dropout_keeps_total_weight_one_on_average():
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(10, 16, generator=gen) for _ in range(3))
    q, k = q.expand(2000, 10, 16), k.expand(2000, 10, 16)
    _, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.6, generator=gen)
    assert abs(weights.sum(-1).mean().item() - 1.0) < 0.02


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("q", "k", "v"), {}, TypeError, "torch.Tensor"),
        ((torch.ones(2, 3, dtype=torch.long),) * 3, {}, TypeError, "floating-point"),
        ((torch.ones(3), torch.ones(3), torch.ones(3)), {}, ValueError, "at least 2"),
        ((torch.ones(2, 3), torch.ones(2, 4), torch.ones(2, 4)), {}, ValueError, "same width"),
        ((torch.ones(2, 3), torch.ones(4, 3), torch.ones(5, 3)), {}, ValueError, "same length"),
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
        ((torch.ones(2, 3),) * 3, {"mask": torch.ones(2, 2)}, TypeError, r"mask.bool\(\)"),
        (
            (torch.ones(2, 3),) * 3,
            {"mask": torch.ones(2, 2, dtype=torch.int)},
            TypeError,
            "boolean",
        ),
        ((torch.ones(2, 3),) * 3, {"mask": [[True]]}, TypeError, "boolean torch.Tensor"),
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
        ((torch.ones(2, 3),) * 3, {"dropout_p": True}, TypeError, "float"),
        ((torch.ones(2, 3),) * 3, {"training": 1}, TypeError, "bool"),
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
    expected, expected_weights = scaled_dot_product_attention(q, k, v, per_sequence[:, None])
    assert torch.equal(output, expected) and torch.equal(weights, expected_weights)
    assert (weights[1, :, :, 2:] == 0).all()  # sequence 1's padding, in every head
    assert (weights[:, :, ~causal_mask(4)] == 0).all()
    if num_heads == 2:  # the trap: F.sdpa runs and applies sequence b's mask to head b
        lined_up = F.scaled_dot_product_attention(q, k, v, attn_mask=per_sequence)
        assert not torch.allclose(lined_up, expected)
    else:
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, attn_mask=per_sequence)


def test_per_head_mask_shared_by_the_batch_is_written_1_h_tq_tk():
    q = torch.ones(2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"\(1, H, Tq, Tk\)"):
        scaled_dot_product_attention(q, q, q, torch.ones(3, 4, 4, dtype=torch.bool))
    per_head = torch.rand(1, 3, 4, 4, generator=torch.Generator().manual_seed(0)) < 0.7
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
        (0, ValueError, "positive sequence length"),
        (2.0, TypeError, "int"),
        (True, TypeError, "int"),
    ],
)
def test_causal_mask_errors(T, error, match):
    with pytest.raises(error, match=match):
        causal_mask(T)


def test_padding_mask_values_and_shape():
    mask = padding_mask([3, 1, 0], max_len=4)
    assert mask.shape == (3, 1, 1, 4) and mask.dtype == torch.bool
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
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
    q, k, v = torch.randn(2, 7, 4, generator=gen), *(torch.randn(2, 3, 4, generator=gen),) * 2
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
    _close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
        scaled_dot_product_attention(q, k, v, mask)[0],
    )
    with pytest.raises(TypeError, match="boolean"):
        additive_mask(additive)


def test_torch_mha_uses_the_opposite_convention():
    """nn.MultiheadAttention's boolean masks mean True = ignore: pass ~mask to it."""
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = MultiHeadAttention(8, 2, bias=True).load_from_torch(torch_mha).eval()
    x = torch.randn(2, 5, 8)
    mask = padding_mask([5, 3])
    expected = ours(x, x, x, mask)
    right, _ = torch_mha(x, x, x, key_padding_mask=~mask[:, 0, 0])
    wrong, _ = torch_mha(x, x, x, key_padding_mask=mask[:, 0, 0])
    _close(right, expected)
    assert not torch.allclose(wrong, expected, atol=1e-3)
    causal_right, _ = torch_mha(x, x, x, attn_mask=~causal_mask(5))
    _close(causal_right, ours(x, x, x, causal_mask(5)))


# ----------------------------------------------------------------- multi-head attention


@st.composite
def mha_case(draw):
    seed = draw(st.integers(0, 2**16))
    num_heads = draw(st.integers(1, 4))
    d_model = num_heads * draw(st.integers(1, 4))
    batch, q_len = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    self_attention = draw(st.booleans())
    k_len = q_len if self_attention else draw(st.integers(1, 5))
    bias = draw(st.booleans())
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, q_len, d_model, generator=gen)
    key = query if self_attention else torch.randn(batch, k_len, d_model, generator=gen)
    value = query if self_attention else torch.randn(batch, k_len, d_model, generator=gen)
    mask_kind = draw(st.sampled_from(["none", "2d", "3d", "4d", "padding"]))
    shapes = {
        "2d": (q_len, k_len),
        "3d": (batch, q_len, k_len),
        "4d": (batch, num_heads, q_len, k_len),
    }
    mask = None
    if mask_kind in shapes:
        mask = torch.rand(*shapes[mask_kind], generator=gen) < 0.7
    elif mask_kind == "padding":
        lengths = torch.randint(1, k_len + 1, (batch,), generator=gen)
        mask = padding_mask(lengths, max_len=k_len)
    return seed, d_model, num_heads, bias, query, key, value, mask


@FEW
@given(mha_case())
def test_fast_and_weights_paths_agree(case):
    seed, d_model, num_heads, bias, query, key, value, mask = case
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_model, num_heads, bias=bias)
    fast = mha(query, key, value, mask)
    slow, weights = mha(query, key, value, mask, return_attention=True)
    assert fast.shape == (query.shape[0], query.shape[1], d_model)
    assert weights.shape == (query.shape[0], num_heads, query.shape[1], key.shape[1])
    _close(fast, slow)


@FEW
@given(mha_case())
def test_mha_matches_torch_multihead_attention(case):
    seed, d_model, num_heads, bias, query, key, value, mask = case
    torch.manual_seed(seed)
    torch_mha = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True)
    mha = MultiHeadAttention(d_model, num_heads, bias=bias).load_from_torch(torch_mha)
    torch_mask = None
    if mask is not None:  # torch wants True = ignore, and (B * H, Tq, Tk) for per-batch masks
        # torch returns NaN for rows with no key (tested separately): let key 0 in everywhere
        mask = mask.clone()
        mask[..., 0] = True
        full = mask if mask.ndim != 3 else mask[:, None]
        full = full.expand(query.shape[0], num_heads, query.shape[1], key.shape[1])
        assert full.any(-1).all()
        torch_mask = ~full.reshape(-1, query.shape[1], key.shape[1])
    expected, expected_weights = torch_mha(query, key, value, attn_mask=torch_mask)
    output, weights = mha(query, key, value, mask, return_attention=True)
    _close(output, expected)
    _close(weights.mean(dim=1), expected_weights)


@FEW
@given(mha_case())
def test_per_head_modules_equal_fused(case):
    seed, d_model, num_heads, bias, query, key, value, mask = case
    torch.manual_seed(seed)
    per_head = PerHeadMultiHeadAttention(d_model, num_heads, bias=bias)
    fused = per_head.fused()
    expected, expected_weights = per_head(query, key, value, mask, return_attention=True)
    output, weights = fused(query, key, value, mask, return_attention=True)
    _close(output, expected)
    _close(weights, expected_weights)
    _close(fused(query, key, value, mask), expected)


def test_single_head_attention_shapes():
    head = SingleHeadAttention(8, 3)
    output, weights = head(torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8))
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
        outputs = [mha(x, x, x, return_attention=return_attention) for _ in range(2)]
        outputs = [out[0] if return_attention else out for out in outputs]
        assert torch.equal(outputs[0], outputs[1])


def test_mha_fully_masked_rows_are_zero_on_both_paths():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, bias=False)
    query, key = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False
    fast = mha(query, key, key, mask)
    slow, weights = mha(query, key, key, mask, return_attention=True)
    assert (weights[0, :, 1] == 0).all()
    assert torch.isfinite(fast).all()
    _close(fast, slow)
    assert (fast[0, 1] == 0).all()  # no bias: zero heads give a zero output


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
    ("d_model", "num_heads", "error", "match"),
    [
        (10, 4, ValueError, "not divisible"),
        (8.0, 2, TypeError, "d_model must be a positive int"),
        (8, 0, ValueError, "num_heads must be a positive int"),
    ],
)
def test_per_head_constructor_errors(d_model, num_heads, error, match):
    with pytest.raises(error, match=match):
        PerHeadMultiHeadAttention(d_model, num_heads)


@pytest.mark.parametrize(
    ("d_model", "d_head", "error", "match"),
    [
        (8.0, 4, TypeError, "d_model must be a positive int"),
        (8, "4", TypeError, "d_head must be a positive int"),
        (8, 0, ValueError, "d_head must be a positive int"),
    ],
)
def test_single_head_constructor_errors(d_model, d_head, error, match):
    with pytest.raises(error, match=match):
        SingleHeadAttention(d_model, d_head)


@pytest.mark.parametrize(
    ("shapes", "mask", "error", "match"),
    [
        (((3, 8), (3, 8), (3, 8)), None, ValueError, r"x\[None\]"),
        (((2, 3, 6), (2, 3, 8), (2, 3, 8)), None, ValueError, "project it to 8 features"),
        (((2, 3, 8), (2, 4, 8), (2, 5, 8)), None, ValueError, "same length"),
        (((2, 3, 8), (1, 4, 8), (1, 4, 8)), None, ValueError, "batch size"),
        (
            ((2, 3, 8), (2, 4, 8), (2, 4, 8)),
            torch.ones(3, 3, dtype=torch.bool),
            ValueError,
            "broadcast",
        ),
        (((2, 3, 8), (2, 4, 8), (2, 4, 8)), torch.ones(4, dtype=torch.bool), ValueError, "2-D"),
        (((2, 3, 8), (2, 4, 8), (2, 4, 8)), torch.ones(3, 4), TypeError, r"mask.bool\(\)"),
        (((2, 3, 8), (2, 4, 8), (2, 4, 8)), "float64", TypeError, "share a dtype"),
    ],
)
def test_mha_forward_errors(shapes, mask, error, match):
    mha = MultiHeadAttention(8, 2)
    query, key, value = (torch.randn(*shape) for shape in shapes)
    if mask == "float64":  # a key of another dtype, which the fused kernel would reject
        mask, key = None, key.double()
    for module in (mha, PerHeadMultiHeadAttention(8, 2)):
        with pytest.raises(error, match=match):
            module(query, key, value, mask)


def test_mha_rejects_non_tensors():
    with pytest.raises(TypeError, match="torch.Tensor"):
        MultiHeadAttention(8, 2)([[0.0] * 8], [[0.0] * 8], [[0.0] * 8])


def test_load_from_torch_errors():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="MultiheadAttention"):
        mha.load_from_torch(nn.Linear(8, 8))
    with pytest.raises(ValueError, match="size mismatch"):
        mha.load_from_torch(nn.MultiheadAttention(8, 4))
    with pytest.raises(ValueError, match="bias mismatch"):
        mha.load_from_torch(nn.MultiheadAttention(8, 2, bias=True))
    with pytest.raises(ValueError, match="kdim"):
        mha.load_from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4))


def test_self_attention_uses_one_fused_projection():
    """Self-attention and cross-attention with the same tensor give the same result."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, bias=True)
    x = torch.randn(2, 5, 8)
    _close(mha(x, x, x), mha(x, x.clone(), x.clone()))
    assert mha.qkv_proj.weight.shape == (24, 8)


# ----------------------------------------------------------------- exercise checkers


def _attention(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1) @ v


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda q, k, v: (q @ k.transpose(-2, -1)).softmax(-1) @ v, "not scaled"),
        (
            lambda q, k, v: (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-2) @ v,
            "over queries",
        ),
        (lambda q, k, v: (q @ k.T / q.shape[-1] ** 0.5).softmax(-1) @ v, "transpose"),
        (lambda q, k, v: _attention(k, q, v), "queries and keys are swapped"),
        (lambda q, k, v: (q @ k.transpose(-2, -1)).softmax(-1) @ v[:2], "check the shapes"),
        (lambda q, k, v: _attention(q, k, v) + 1, "queries come first"),
        (lambda q, k, v: _attention(q, k, v)[..., :1], "shape"),
    ],
)
def test_check_attention_names_the_mistake(fn, match):
    with pytest.raises(AssertionError, match=match):
        check_attention(fn)


def test_check_attention_accepts_correct_answers():
    assert check_attention(_attention).startswith("Correct")
    assert check_attention(scaled_dot_product_attention).startswith("Correct")
    with pytest.raises(TypeError):
        check_attention("not a function")


def _window(T, window):
    rows, cols = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (cols <= rows) & (rows - cols < window)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda T, w: ~_window(T, w), "inverted"),
        (lambda T, w: _window(T, w).float(), "boolean"),
        (lambda T, w: _window(T, w)[:-1], "tensor"),
        (lambda T, w: _window(T, w + 1), "entry"),
    ],
)
def test_check_sliding_window_mask_names_the_mistake(fn, match):
    with pytest.raises(AssertionError, match=match):
        check_sliding_window_mask(fn)


def test_check_sliding_window_mask_accepts_correct_answer():
    assert check_sliding_window_mask(_window).startswith("Correct")
    with pytest.raises(TypeError):
        check_sliding_window_mask(None)
