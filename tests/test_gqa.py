"""Grouped-query and multi-query attention (chapter 13): helpers.gpt.CausalSelfAttention with
``num_kv_heads`` against PyTorch's ``enable_gqa``, against key/value heads repeated by hand and
against plain multi-head attention; its cache's memory against helpers.efficient.kv_cache_bytes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import close
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.attention import MultiHeadAttention, scaled_dot_product_attention
from helpers.efficient import kv_cache_bytes
from helpers.gpt import GPT, CausalSelfAttention, GPTConfig
from helpers.masks import causal_mask, sliding_window_mask


def _layer(
    d_model, num_heads, num_kv_heads, window=None
) -> CausalSelfAttention:
    fields = dict(
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        window=window,
    )
    return CausalSelfAttention(
        GPTConfig(vocab_size=13, context_length=64, **fields)
    )


def _model(**fields) -> GPT:
    return GPT(
        GPTConfig(
            vocab_size=13, context_length=40, d_model=32, num_heads=4, **fields
        )
    )


def _heads(layer: CausalSelfAttention, x: torch.Tensor):
    """The layer's q (B, H, T, d_head), k and v (B, H_kv, T, d_head), projected by hand."""
    batch, length, _ = x.shape
    kv_width = layer.num_kv_heads * layer.d_head
    q, k, v = layer.qkv_proj(x).split(
        [layer.d_model, kv_width, kv_width], dim=-1
    )
    q = q.view(batch, length, layer.num_heads, layer.d_head).transpose(1, 2)
    k = k.view(batch, length, layer.num_kv_heads, layer.d_head).transpose(1, 2)
    v = v.view(batch, length, layer.num_kv_heads, layer.d_head).transpose(1, 2)
    return q, k, v


def _project_out(
    layer: CausalSelfAttention, heads: torch.Tensor
) -> torch.Tensor:
    batch, _, length, _ = heads.shape
    return layer.out_proj(
        heads.transpose(1, 2).reshape(batch, length, layer.d_model)
    )


@st.composite
def gqa_case(draw):
    num_kv_heads = draw(st.sampled_from([1, 2, 3]))
    num_heads = num_kv_heads * draw(st.sampled_from([1, 2, 4]))
    d_head = draw(st.sampled_from([2, 4]))
    window = draw(st.one_of(st.none(), st.integers(1, 6)))
    seed, batch, length = (
        draw(st.integers(0, 2**16)),
        draw(st.integers(1, 3)),
        draw(st.integers(1, 9)),
    )
    return num_heads, num_kv_heads, d_head, window, seed, batch, length


@settings(max_examples=30, deadline=None)
@given(gqa_case())
def test_grouped_query_attention_equals_pytorchs_enable_gqa(case):
    num_heads, num_kv_heads, d_head, window, seed, batch, length = case
    torch.manual_seed(seed)
    layer = _layer(
        num_heads * d_head, num_heads, num_kv_heads, window=window
    ).eval()
    x = torch.randn(batch, length, num_heads * d_head)
    q, k, v = _heads(layer, x)
    mask = sliding_window_mask(length, window if window is not None else length)
    heads = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=True
    )
    close(layer(x), _project_out(layer, heads))


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads"), [(4, 4), (4, 2), (4, 1), (6, 3)]
)
def test_grouped_query_attention_equals_heads_repeated_by_hand(
    num_heads, num_kv_heads
):
    torch.manual_seed(0)
    layer = _layer(4 * num_heads, num_heads, num_kv_heads).eval()
    x = torch.randn(2, 7, 4 * num_heads)
    q, k, v = _heads(layer, x)
    group = num_heads // num_kv_heads
    # query head h reads key/value head h // group, one head at a time, with the book's kernel
    heads = torch.stack(
        [
            scaled_dot_product_attention(
                q[:, h], k[:, h // group], v[:, h // group], causal_mask(7)
            )[0]
            for h in range(num_heads)
        ],
        dim=1,
    )
    close(layer(x), _project_out(layer, heads))


def test_as_many_kv_heads_as_query_heads_is_plain_multi_head_attention():
    torch.manual_seed(0)
    layer = _layer(16, 4, num_kv_heads=4).eval()
    mha = MultiHeadAttention(16, 4).eval()
    mha.load_state_dict(
        layer.state_dict()
    )  # the same (3D, D) and (D, D) matrices
    x = torch.randn(3, 8, 16)
    close(layer(x), mha(x, x, x, mask=causal_mask(8)), rtol=0)


@pytest.mark.parametrize(("num_kv_heads", "rows"), [(4, 48), (2, 32), (1, 24)])
def test_fewer_kv_heads_shrink_the_projection(num_kv_heads, rows):
    layer = _layer(16, 4, num_kv_heads=num_kv_heads)
    assert layer.qkv_proj.weight.shape == (rows, 16)  # D + 2 * H_kv * d_head


@pytest.mark.parametrize("num_kv_heads", [3, 5])
def test_num_heads_must_be_a_multiple_of_num_kv_heads(num_kv_heads):
    with pytest.raises(
        ValueError, match=r"num_heads=4 is not divisible by num_kv_heads"
    ) as error:
        _layer(16, 4, num_kv_heads=num_kv_heads)
    assert "[1, 2, 4]" in str(error.value)  # the message lists the choices


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_cache_memory_is_what_kv_cache_bytes_computes(num_kv_heads):
    torch.manual_seed(0)
    model = _model(num_layers=3, num_kv_heads=num_kv_heads).eval()
    caches = model.new_caches(2)
    model(torch.zeros(2, 25, dtype=torch.long), caches)
    held = sum(cache.memory_bytes() for cache in caches)
    assert held == kv_cache_bytes(
        3, num_kv_heads, 8, 25, batch_size=2, bytes_per_element=4
    )
    multi_head = kv_cache_bytes(3, 4, 8, 25, batch_size=2, bytes_per_element=4)
    assert held * (4 // num_kv_heads) == multi_head


def test_multi_query_generation_with_and_without_cache_agree():
    torch.manual_seed(1)
    model = _model(num_layers=2, num_kv_heads=1, positions="rope")
    prompt = torch.randint(
        13, (2, 4), generator=torch.Generator().manual_seed(2)
    )
    cached = model.generate(prompt, 12, greedy=True)
    assert torch.equal(
        cached, model.generate(prompt, 12, greedy=True, use_cache=False)
    )
