"""Tests of helpers.interop: weights copied from PyTorch's modules give the same functions.

The book's classes carry no loading methods: :mod:`helpers.interop` is the one way to copy
weights in (``tests/test_structure.py`` pins that no class module imports it).
"""

from __future__ import annotations

import pytest
import torch
from conftest import close, randomize_norms
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import mha_case
from torch import nn

from helpers.attention import MultiHeadAttention, PerHeadMultiHeadAttention
from helpers.interop import (
    fuse_heads,
    load_encoder_block,
    load_multihead_attention,
)
from helpers.masks import causal_mask
from helpers.transformer import (
    EncoderBlock,
    TransformerConfig,
    TransformerEncoder,
)

FEW = settings(max_examples=25, deadline=None)


def torch_layer(
    d_model, num_heads, ffn_width, norm_first, bias=True, dropout=0.1
):
    return nn.TransformerEncoderLayer(
        d_model,
        num_heads,
        ffn_width,
        dropout=dropout,
        batch_first=True,
        norm_first=norm_first,
        bias=bias,
    )


# --------------------------------------------------------------------------- multi-head attention


@FEW
@given(mha_case())
def test_mha_matches_torch_multihead_attention(case):
    seed, d_model, num_heads, bias, query, key, value, mask = case
    torch.manual_seed(seed)
    torch_mha = nn.MultiheadAttention(
        d_model, num_heads, bias=bias, batch_first=True
    )
    mha = load_multihead_attention(
        MultiHeadAttention(d_model, num_heads, bias=bias), torch_mha
    )
    torch_mask = None
    if (
        mask is not None
    ):  # torch wants True = ignore, and (B * H, Tq, Tk) for per-batch masks
        # torch returns NaN for rows with no key (tested separately): let key 0 in everywhere
        mask = mask.clone()
        mask[..., 0] = True
        full = mask if mask.ndim != 3 else mask[:, None]
        full = full.expand(
            query.shape[0], num_heads, query.shape[1], key.shape[1]
        )
        assert full.any(-1).all()
        torch_mask = ~full.reshape(-1, query.shape[1], key.shape[1])
    expected, expected_weights = torch_mha(
        query, key, value, attn_mask=torch_mask
    )
    output, weights = mha(query, key, value, mask, return_attention=True)
    close(output, expected)
    close(weights.mean(dim=1), expected_weights)
    close(mha(query, key, value, mask), expected)


def test_load_multihead_attention_copies_every_weight_and_returns_the_module():
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(8, 2, bias=True, batch_first=True)
    mha = MultiHeadAttention(8, 2, bias=True)
    assert load_multihead_attention(mha, torch_mha) is mha
    assert torch.equal(mha.qkv_proj.weight, torch_mha.in_proj_weight)
    assert torch.equal(mha.qkv_proj.bias, torch_mha.in_proj_bias)
    assert torch.equal(mha.out_proj.weight, torch_mha.out_proj.weight)
    assert torch.equal(mha.out_proj.bias, torch_mha.out_proj.bias)
    assert all(p.grad_fn is None and p.requires_grad for p in mha.parameters())


def test_load_multihead_attention_errors():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(
        TypeError, match="expected torch.nn.MultiheadAttention, got Linear"
    ):
        load_multihead_attention(mha, nn.Linear(8, 8))
    with pytest.raises(
        ValueError, match=r"size mismatch.*num_heads=4.*num_heads=2"
    ):
        load_multihead_attention(mha, nn.MultiheadAttention(8, 4))
    with pytest.raises(ValueError, match="bias mismatch"):
        load_multihead_attention(mha, nn.MultiheadAttention(8, 2, bias=True))
    with pytest.raises(ValueError, match="kdim"):
        load_multihead_attention(
            mha, nn.MultiheadAttention(8, 2, kdim=4, vdim=4)
        )


# --------------------------------------------------------------------------- per-head -> fused


@FEW
@given(mha_case())
def test_per_head_modules_equal_fused(case):
    seed, d_model, num_heads, bias, query, key, value, mask = case
    torch.manual_seed(seed)
    per_head = PerHeadMultiHeadAttention(d_model, num_heads, bias=bias)
    fused = fuse_heads(per_head)
    expected, expected_weights = per_head(
        query, key, value, mask, return_attention=True
    )
    output, weights = fused(query, key, value, mask, return_attention=True)
    close(output, expected)
    close(weights, expected_weights)
    close(fused(query, key, value, mask), expected)


@pytest.mark.parametrize("bias", [False, True])
def test_fuse_heads_stacks_each_heads_rows_and_shares_the_output_layer(bias):
    torch.manual_seed(0)
    per_head = PerHeadMultiHeadAttention(12, 3, bias=bias)
    fused = fuse_heads(per_head)
    assert isinstance(fused, MultiHeadAttention)
    assert (fused.d_model, fused.num_heads) == (12, 3)
    for block, name in enumerate(("query", "key", "value")):
        for h, head in enumerate(per_head.heads):
            rows = slice(block * 12 + 4 * h, block * 12 + 4 * (h + 1))
            assert torch.equal(
                fused.qkv_proj.weight[rows], getattr(head, name).weight
            )
            if bias:
                assert torch.equal(
                    fused.qkv_proj.bias[rows], getattr(head, name).bias
                )
    assert torch.equal(fused.out_proj.weight, per_head.out_proj.weight)
    assert (fused.qkv_proj.bias is None) == (not bias)


# --------------------------------------------------------------------------- encoder blocks


@settings(max_examples=25, deadline=None)
@given(
    d_head=st.integers(1, 6),
    num_heads=st.integers(1, 4),
    ffn_width=st.integers(1, 24),
    seq_len=st.integers(1, 6),
    norm_first=st.booleans(),
    bias=st.booleans(),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_block_matches_torch_encoder_layer(
    d_head, num_heads, ffn_width, seq_len, norm_first, bias, masked, seed
):
    generator = torch.Generator().manual_seed(seed)
    d_model = d_head * num_heads
    reference = torch_layer(
        d_model, num_heads, ffn_width, norm_first, bias=bias
    ).eval()
    if bias:
        randomize_norms(reference, generator)
    block = EncoderBlock(
        d_model, num_heads, ffn_width, 0.1, norm_first, bias=bias
    ).eval()
    load_encoder_block(block, reference)
    x = torch.randn(3, seq_len, d_model, generator=generator)
    mask = causal_mask(seq_len) if masked else None
    # torch's boolean src_mask means True = may NOT attend: the opposite of ours.
    expected = reference(x, src_mask=None if mask is None else ~mask)
    close(block(x, mask=mask), expected)


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_matches_torch_encoder(norm_first):
    torch.manual_seed(0)
    layer = torch_layer(16, 4, 32, norm_first)
    final = nn.LayerNorm(16) if norm_first else None
    reference = nn.TransformerEncoder(
        layer, 3, norm=final, enable_nested_tensor=False
    ).eval()
    randomize_norms(reference, torch.Generator().manual_seed(1))
    encoder = TransformerEncoder(
        TransformerConfig(
            num_layers=3,
            d_model=16,
            num_heads=4,
            ffn_width=32,
            dropout=0.1,
            norm_first=norm_first,
        )
    ).eval()
    for block, torch_block in zip(
        encoder.blocks, reference.layers, strict=True
    ):
        assert load_encoder_block(block, torch_block) is block
    if norm_first:
        encoder.final_norm.load_state_dict(reference.norm.state_dict())
    x = torch.randn(2, 9, 16)
    close(encoder(x), reference(x))


def test_load_encoder_block_rejects_mismatches():
    block = EncoderBlock(8, 2, 16)
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        load_encoder_block(block, nn.Linear(8, 8))
    with pytest.raises(ValueError, match="norm_first mismatch"):
        load_encoder_block(block, torch_layer(8, 2, 16, norm_first=False))
    gelu = nn.TransformerEncoderLayer(
        8, 2, 16, activation="gelu", norm_first=True
    )
    with pytest.raises(ValueError, match="activation='relu'"):
        load_encoder_block(block, gelu)
    eps = nn.TransformerEncoderLayer(
        8, 2, 16, layer_norm_eps=1e-6, norm_first=True
    )
    with pytest.raises(ValueError, match="eps=1e-06"):
        load_encoder_block(block, eps)
    with pytest.raises(ValueError, match="norm='layer'"):
        load_encoder_block(
            EncoderBlock(8, 2, 16, norm="rms"), torch_layer(8, 2, 16, True)
        )
    with pytest.raises(ValueError, match="feed-forward shape mismatch"):
        load_encoder_block(block, torch_layer(8, 2, 32, norm_first=True))
    with pytest.raises(ValueError, match="bias mismatch"):
        load_encoder_block(
            block, torch_layer(8, 2, 16, norm_first=True, bias=False)
        )


def test_load_encoder_block_warns_about_sequence_first_layers():
    layer = nn.TransformerEncoderLayer(
        16, 2, 32, dropout=0.0, batch_first=False
    )
    with pytest.warns(UserWarning, match="batch_first=True"):
        load_encoder_block(EncoderBlock(16, 2, 32, norm_first=False), layer)
