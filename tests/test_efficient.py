"""Tests of helpers.efficient: tiled attention against PyTorch's kernel, local attention, the
cost arithmetic and the timer, and every documented error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import qkv_case
from torch.nn.attention.bias import causal_lower_right
from torch.utils.flop_counter import FlopCounterMode

from helpers.analysis import peak_cpu_bytes
from helpers.attention import scaled_dot_product_attention
from helpers.efficient import (
    attention_cost,
    kv_cache_bytes,
    median_seconds,
    online_softmax_update,
    receptive_field,
    tiled_attention,
)
from helpers.masks import causal_mask, position_mask, sliding_window_mask

FEW = settings(max_examples=40, deadline=None)


def _reference_mask(
    q_len: int, k_len: int, causal: bool, window: int | None
) -> torch.Tensor:
    # the queries are the last q_len positions (bottom-right alignment)
    query_positions = torch.arange(q_len) + k_len - q_len
    offset = query_positions[:, None] - torch.arange(k_len)[None, :]
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        allowed &= offset >= 0
    if window is not None:
        allowed &= (offset < window) if causal else (offset.abs() < window)
    return allowed


# --------------------------------------------------------------------------- tiled attention


@st.composite
def tiled_case(draw):
    q, k, v, _ = draw(qkv_case(max_len=40, max_v_width=6))
    causal = draw(st.booleans())
    block_size = draw(st.sampled_from([1, 2, 3, 5, 8, 16, 64]))
    return q, k, v, causal, block_size


@FEW
@given(tiled_case())
def test_tiled_attention_equals_pytorchs_kernel(case):
    """Causal with Tq != Tk: PyTorch's bottom-right mask (``causal_lower_right``),
    not ``is_causal=True`` (top left); with Tq > Tk the first Tq - Tk queries see
    no key and get zeros, the rest are the square causal case."""
    q, k, v, causal, block_size = case
    q_len, k_len = q.shape[-2], k.shape[-2]
    got = tiled_attention(q, k, v, causal=causal, block_size=block_size)
    if not causal:
        expected = F.scaled_dot_product_attention(q, k, v)
    elif q_len <= k_len:
        mask = causal_lower_right(q_len, k_len)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        blind = q_len - k_len
        assert torch.equal(
            got[..., :blind, :], torch.zeros_like(got[..., :blind, :])
        )
        got = got[..., blind:, :]
        expected = F.scaled_dot_product_attention(
            q[..., blind:, :], k, v, is_causal=True
        )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("block_size", [1, 4, 64])
def test_causal_tiled_attention_aligns_fewer_queries_to_the_end(
    window, block_size
):
    """A decoding step's queries are the last positions: one query reads every key
    (with a window, the last ``window``), as FlashAttention 2 and PyTorch's
    ``causal_lower_right`` align it; the top-left alignment of
    ``is_causal=True`` would let it read key 0 only."""
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 1, 8, generator=gen, dtype=torch.float64)
    k, v = (
        torch.randn(2, 3, 20, 8, generator=gen, dtype=torch.float64)
        for _ in range(2)
    )
    got = tiled_attention(
        q, k, v, causal=True, window=window, block_size=block_size
    )
    last = slice(None) if window is None else slice(-window, None)
    expected = F.scaled_dot_product_attention(
        q, k[..., last, :], v[..., last, :]
    )
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-12)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(
        top_left, v[..., :1, :]
    )  # key 0 only: the other convention
    assert not torch.allclose(got, top_left, atol=1e-3)
    # several new queries: the last rows of the square causal attention
    q5 = torch.randn(2, 3, 5, 8, generator=gen, dtype=torch.float64)
    square_q = torch.cat(
        [torch.zeros(2, 3, 15, 8, dtype=torch.float64), q5], -2
    )
    mask = _reference_mask(20, 20, True, window)
    square, _ = scaled_dot_product_attention(square_q, k, v, mask)
    got = tiled_attention(
        q5, k, v, causal=True, window=window, block_size=block_size
    )
    torch.testing.assert_close(got, square[..., -5:, :], atol=1e-12, rtol=1e-12)


@FEW
@given(tiled_case(), st.integers(1, 12))
def test_windowed_tiled_attention_equals_the_masked_reference(case, window):
    q, k, v, causal, block_size = case
    mask = _reference_mask(q.shape[-2], k.shape[-2], causal, window)
    expected, _ = scaled_dot_product_attention(
        q, k, v, mask
    )  # rows with no key: zeros
    got = tiled_attention(
        q, k, v, causal=causal, window=window, block_size=block_size
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("block_size", [1, 7, 32, 1000])
def test_tiled_attention_is_exact_in_float64(block_size):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, 50, 16, generator=gen, dtype=torch.float64)
        for _ in range(3)
    )
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        got = tiled_attention(q, k, v, causal=causal, block_size=block_size)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-12)


def test_tiled_attention_takes_a_scale_and_keeps_large_scores_finite():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 30, 4, generator=gen) for _ in range(3))
    expected = F.scaled_dot_product_attention(
        q, k, v, scale=300.0
    )  # scores in the thousands
    got = tiled_attention(q, k, v, scale=300.0, block_size=4)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_a_query_with_no_allowed_key_gets_zeros():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (
        torch.randn(10, 4, generator=gen),
        torch.randn(3, 4),
        torch.randn(3, 5),
    )
    # the 10 queries sit at positions -7 .. 2 (aligned to the end), the keys at
    # 0 .. 2: queries 0 .. 5 are 2+ positions from every key
    got = tiled_attention(q, k, v, window=2, block_size=2)
    assert torch.equal(got[:6], torch.zeros(6, 5))
    assert torch.isfinite(got).all() and (got[6:].abs().sum(-1) > 0).all()


def test_tiled_attention_never_holds_the_weight_matrix():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1024, 32, generator=gen) for _ in range(3))
    with torch.inference_mode():
        naive = peak_cpu_bytes(lambda: scaled_dot_product_attention(q, k, v)[0])
        tiled = peak_cpu_bytes(lambda: tiled_attention(q, k, v, block_size=64))
    assert naive >= 2 * 4 * 1024 * 1024  # scores and weights, float32
    assert tiled < naive / 10


def test_causal_tiles_above_the_diagonal_are_skipped():
    q = k = v = torch.randn(1, 256, 8)
    with FlopCounterMode(display=False) as full:
        tiled_attention(q, k, v, block_size=32)
    with FlopCounterMode(display=False) as causal:
        tiled_attention(q, k, v, causal=True, block_size=32)
    # 8 x 8 tiles; causal keeps the 36 on and below the diagonal
    assert causal.get_total_flops() * 64 == full.get_total_flops() * 36


def softmax_problem(seed, rows, keys, width):
    """Scores (rows, keys) and values (keys, width), drawn from ``seed``, and the empty
    running state (max, sum, accumulator) that online softmax starts from."""
    gen = torch.Generator().manual_seed(seed)
    scores, values = (
        torch.randn(rows, keys, generator=gen),
        torch.randn(keys, width, generator=gen),
    )
    empty = (
        torch.full((rows, 1), float("-inf")),
        torch.zeros(rows, 1),
        torch.zeros(rows, width),
    )
    return scores, values, empty


def test_online_softmax_update_streams_a_softmax():
    scores, values, state = softmax_problem(4, rows=3, keys=20, width=2)
    for start in range(0, 20, 6):
        state = online_softmax_update(
            *state, scores[:, start : start + 6], values[start : start + 6]
        )
    running_max, running_sum, accumulator = state
    torch.testing.assert_close(running_max[:, 0], scores.amax(-1))
    torch.testing.assert_close(
        accumulator / running_sum, scores.softmax(-1) @ values
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"block_size": 0}, ValueError, "block_size"),
        ({"block_size": 2.0}, TypeError, "block_size"),
        ({"window": 0}, ValueError, "window"),
        ({"causal": 1}, TypeError, "causal"),
        ({"scale": -1.0}, ValueError, "scale"),
    ],
)
def test_tiled_attention_errors(kwargs, error, message):
    q = torch.randn(4, 8)
    with pytest.raises(error, match=message):
        tiled_attention(q, q, q, **kwargs)


def test_tiled_attention_refuses_mismatched_inputs():
    with pytest.raises(TypeError, match="floating-point"):
        tiled_attention(
            torch.ones(4, 8, dtype=torch.long),
            torch.randn(4, 8),
            torch.randn(4, 8),
        )
    with pytest.raises(ValueError, match="same width"):
        tiled_attention(torch.randn(4, 8), torch.randn(4, 6), torch.randn(4, 8))


# --------------------------------------------------------------------------- local attention


def test_sliding_window_mask_matches_chapter_2s_exercise():
    from helpers.checks import check_sliding_window_mask

    assert check_sliding_window_mask(sliding_window_mask).startswith("Correct")


def test_sliding_window_mask_without_causality_is_symmetric():
    mask = sliding_window_mask(9, 3, causal=False)
    assert torch.equal(mask, mask.T)
    assert (
        mask.sum(-1)[4].item() == 5
    )  # 2 * window - 1 keys away from the edges
    assert torch.equal(sliding_window_mask(6, 6), causal_mask(6))


@pytest.mark.parametrize("window", [None, 1, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_position_mask_of_later_queries_is_the_last_rows_of_the_square_mask(
    causal, window
):
    # a decoder with a cache: 3 new queries at positions 5, 6, 7 against keys 0..7
    rows = position_mask(
        torch.arange(5, 8), torch.arange(8), causal=causal, window=window
    )
    assert torch.equal(rows, _reference_mask(8, 8, causal, window)[5:])


@pytest.mark.parametrize(
    ("window", "num_layers"), [(1, 3), (2, 1), (3, 4), (5, 2)]
)
def test_receptive_field_is_what_stacked_masks_reach(window, num_layers):
    T = 40
    step = sliding_window_mask(T, window).long()
    reach = torch.eye(T, dtype=torch.int64)
    for _ in range(num_layers):
        reach = (
            (step @ reach) > 0
        ).long()  # who position t can draw on, one more layer
    assert reach[-1].sum().item() == receptive_field(window, num_layers)


def test_sliding_window_mask_errors():
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(5, 0)
    with pytest.raises(TypeError, match="causal"):
        sliding_window_mask(5, 2, causal="yes")
    with pytest.raises(TypeError, match="num_layers"):
        receptive_field(4, 2.5)


# --------------------------------------------------------------------------- arithmetic


@pytest.mark.parametrize("causal", [False, True])
def test_attention_cost_counts_the_flops_pytorch_counts(causal):
    B, H, T, d = 2, 3, 64, 16
    q = k = v = torch.randn(B, H, T, d)
    with FlopCounterMode(display=False) as counter:
        if causal:
            tiled_attention(
                q, k, v, causal=True, block_size=8
            )  # skips masked tiles
        else:
            scaled_dot_product_attention(q, k, v)
    cost = attention_cost(
        T, H, d, batch_size=B, bytes_per_element=4, causal=causal
    )
    if (
        causal
    ):  # the diagonal tiles are computed in full: (n + 1) / 2n of the square
        n = T // 8
        assert counter.get_total_flops() == 4 * B * H * T * T * d * (n + 1) // (
            2 * n
        )
        assert cost["flops"] == 4 * B * H * T * T * d / 2
    else:
        assert counter.get_total_flops() == cost["flops"]
    assert cost["weights_bytes"] == B * H * T * T * 4
    assert cost["qkvo_bytes"] == 4 * q.numel() * 4


def test_kv_cache_of_llama_2_7b():
    # 32 layers, 32 key/value heads of width 128, float16: 0.5 MiB per token, 2 GiB at 4096
    assert kv_cache_bytes(32, 32, 128, 1) == 2**19
    assert kv_cache_bytes(32, 32, 128, 4096) == 2 * 2**30
    assert (
        kv_cache_bytes(32, 8, 128, 4096, batch_size=2, bytes_per_element=4)
        == 2 * 2**30
    )


def test_arithmetic_errors():
    with pytest.raises(ValueError, match="seq_len"):
        attention_cost(0, 1, 1)
    with pytest.raises(TypeError, match="num_kv_heads"):
        kv_cache_bytes(2, 1.5, 64, 10)


def test_median_seconds_is_a_median_of_positive_times():
    calls = []
    seconds = median_seconds(
        lambda x: calls.append(x), 1, repeats=3, warmup_calls=2
    )
    assert len(calls) == 5 and 0 <= seconds < 0.1
    with pytest.raises(TypeError, match="callable"):
        median_seconds(3)


# --------------------------------------------------------------------------- the exercise checker


def _merge(state_1, state_2):
    (m1, l1, a1), (m2, l2, a2) = state_1, state_2
    m = torch.maximum(m1, m2)
    shift = m.masked_fill(m == float("-inf"), 0.0)  # both halves masked
    r1, r2 = torch.exp(m1 - shift), torch.exp(m2 - shift)
    return m, l1 * r1 + l2 * r2, a1 * r1 + a2 * r2


def test_check_softmax_merge_accepts_a_right_merge_and_names_wrong_ones():
    from helpers.checks import check_softmax_merge

    assert check_softmax_merge(_merge).startswith("Correct")

    def unscaled(state_1, state_2):
        (m1, l1, a1), (m2, l2, a2) = state_1, state_2
        return torch.maximum(m1, m2), l1 + l2, a1 + a2

    with pytest.raises(AssertionError, match="rescale both"):
        check_softmax_merge(unscaled)

    def unguarded(state_1, state_2):  # NaN where both halves are fully masked
        (m1, l1, a1), (m2, l2, a2) = state_1, state_2
        m = torch.maximum(m1, m2)
        r1, r2 = torch.exp(m1 - m), torch.exp(m2 - m)
        return m, l1 * r1 + l2 * r2, a1 * r1 + a2 * r2

    with pytest.raises(AssertionError, match="all masked.*against 0"):
        check_softmax_merge(unguarded)
    with pytest.raises(AssertionError, match="tuple"):
        check_softmax_merge(lambda a, b: a[2])
    with pytest.raises(AssertionError, match="running_max"):
        check_softmax_merge(
            lambda a, b: (torch.zeros_like(a[0]), *_merge(a, b)[1:])
        )
    with pytest.raises(TypeError, match="merge function"):
        check_softmax_merge(3)


def test_merging_states_is_what_tiled_attention_does_across_key_blocks():
    scores, values, empty = softmax_problem(5, rows=2, keys=12, width=3)
    first = online_softmax_update(*empty, scores[:, :5], values[:5])
    second = online_softmax_update(*empty, scores[:, 5:], values[5:])
    running_max, running_sum, accumulator = _merge(first, second)
    torch.testing.assert_close(
        accumulator / running_sum, scores.softmax(-1) @ values
    )


# ------------------------------------------------------------------ chapter 8's model, windowed


@pytest.mark.parametrize("window", [1, 3, 12])
def test_windowed_shapes_model_sees_its_window_and_the_convolutions(window):
    from helpers.tasks.shapes import make_shapes_attention_model

    torch.manual_seed(0)
    model = make_shapes_attention_model(window=window)
    probe = torch.randn(1, 1, 100, requires_grad=True)
    model(probe)[0, 0, 50].backward()
    seen = (probe.grad[0, 0] != 0).nonzero().flatten()
    reach = (
        window - 1 + 8
    )  # two convolutions of width 5 on each side of the attention
    assert seen.min().item() == 50 - reach and seen.max().item() == 50 + reach


def test_no_window_is_chapter_8s_model_exactly():
    from helpers.tasks.shapes import (
        make_shapes_attention_model,
        train_shapes_model,
    )

    torch.manual_seed(0)
    plain = make_shapes_attention_model()
    torch.manual_seed(0)
    full = make_shapes_attention_model(
        window=100
    )  # every key of a 100-sample signal
    x = torch.randn(4, 1, 100)
    assert torch.equal(plain(x), full(x)) and "window" not in repr(plain)
    with pytest.raises(
        ValueError, match="window=5 applies to the attention layer"
    ):
        train_shapes_model("CNN", 0, None, None, None, window=5)
    with pytest.raises(ValueError, match="window"):
        make_shapes_attention_model(window=0)
