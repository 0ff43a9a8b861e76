"""Hypothesis strategies shared by several test modules."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from helpers.masks import padding_mask


@st.composite
def qkv_case(draw, max_len: int, max_v_width: int):
    """Random q, k, v with 0-2 batch dimensions and lengths up to ``max_len``, and the
    generator that drew them (for more random tensors of the same case)."""
    seed = draw(st.integers(0, 2**16))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    q_len, k_len = draw(st.integers(1, max_len)), draw(st.integers(1, max_len))
    width, v_width = draw(st.integers(1, 8)), draw(st.integers(1, max_v_width))
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, q_len, width, generator=gen)
    k = torch.randn(*batch, k_len, width, generator=gen)
    v = torch.randn(*batch, k_len, v_width, generator=gen)
    return q, k, v, gen


@st.composite
def mha_case(draw):
    """A multi-head attention problem: seed, d_model, num_heads, bias, query, key, value, mask.

    Self- or cross-attention, with no mask or a random 2-D, 3-D, 4-D or padding mask.
    """
    seed = draw(st.integers(0, 2**16))
    num_heads = draw(st.integers(1, 4))
    d_model = num_heads * draw(st.integers(1, 4))
    batch, q_len = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    self_attention = draw(st.booleans())
    k_len = q_len if self_attention else draw(st.integers(1, 5))
    bias = draw(st.booleans())
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, q_len, d_model, generator=gen)
    key = (
        query
        if self_attention
        else torch.randn(batch, k_len, d_model, generator=gen)
    )
    value = (
        query
        if self_attention
        else torch.randn(batch, k_len, d_model, generator=gen)
    )
    mask_kind = draw(st.sampled_from(["none", "2d", "3d", "4d", "padding"]))
    shapes = {
        "2d": (q_len, k_len),
        "3d": (batch, q_len, k_len),
        "4d": (batch, num_heads, q_len, k_len),
    }
    mask = None
    if mask_kind in shapes:
        mask = torch.rand(*shapes[mask_kind], generator=gen) < 0.7
        mask[..., 0, 0] = (
            True  # never the pattern of PyTorch's triu mask, which is refused
        )
    elif mask_kind == "padding":
        lengths = torch.randint(1, k_len + 1, (batch,), generator=gen)
        mask = padding_mask(lengths, max_len=k_len)
    return seed, d_model, num_heads, bias, query, key, value, mask
