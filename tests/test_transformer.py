"""Tests of helpers.transformer: norms, feed-forward, encoder blocks and the encoder stack.

The comparisons with torch.nn.TransformerEncoderLayer are in tests/test_interop.py, parameter
counts in tests/test_analysis.py, the chapter 6 checkers in tests/test_checks.py.
"""

from __future__ import annotations

import pytest
import torch
from conftest import host_reads, small_config
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers.analysis import count_parameters
from helpers.masks import causal_mask, padding_mask
from helpers.transformer import (
    EncoderBlock,
    FeedForward,
    RMSNorm,
    TransformerConfig,
    TransformerEncoder,
    make_norm,
)

# --- shapes -------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq_len=st.integers(1, 7),
    num_heads=st.sampled_from([1, 2, 4]),
    num_layers=st.integers(1, 3),
    norm_first=st.booleans(),
)
def test_encoder_shapes_and_attention_maps(
    batch, seq_len, num_heads, num_layers, norm_first
):
    d_model = 8
    encoder = TransformerEncoder(
        small_config(
            num_layers=num_layers, num_heads=num_heads, norm_first=norm_first
        )
    )
    x = torch.randn(batch, seq_len, d_model)
    assert encoder(x).shape == (batch, seq_len, d_model)
    maps = encoder.get_attention_maps(x)
    assert len(maps) == num_layers
    for weights in maps:
        assert weights.shape == (batch, num_heads, seq_len, seq_len)
        torch.testing.assert_close(
            weights.sum(-1), torch.ones(batch, num_heads, seq_len)
        )


def test_block_returns_attention_on_request():
    block = EncoderBlock(8, 2, 16)
    x = torch.randn(2, 5, 8)
    output, weights = block(x, return_attention=True)
    torch.testing.assert_close(output, block(x))
    assert weights.shape == (2, 2, 5, 5)


def test_final_norm_default_follows_norm_first():
    small = small_config(num_layers=1)
    pre_norm = TransformerEncoder(small.replace(norm_first=True))
    post_norm = TransformerEncoder(small.replace(norm_first=False))
    assert isinstance(pre_norm.final_norm, nn.LayerNorm)
    assert isinstance(post_norm.final_norm, nn.Identity)
    encoder = TransformerEncoder(
        small.replace(norm_first=True, final_norm=False)
    )
    assert isinstance(encoder.final_norm, nn.Identity)


# --- masks and symmetry ------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [True, False])
def test_causal_mask_blocks_the_future_through_the_stack(norm_first):
    torch.manual_seed(0)
    encoder = TransformerEncoder(
        small_config(num_layers=3, norm_first=norm_first)
    ).eval()
    seq_len = 6
    x = torch.randn(1, seq_len, 8, requires_grad=True)
    output = encoder(x, mask=causal_mask(seq_len))
    probe = torch.randn(
        8
    )  # not .sum(): a LayerNorm's outputs sum to a constant
    for t in range(seq_len):
        (grad,) = torch.autograd.grad(
            output[0, t] @ probe, x, retain_graph=True
        )
        influence = grad[0].abs().sum(-1)
        assert torch.all(influence[t + 1 :] == 0), (
            f"position {t} sees the future"
        )
        assert torch.all(influence[: t + 1] > 0), (
            f"position {t} ignores its past"
        )


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    encoder = TransformerEncoder(small_config()).eval()
    x = torch.randn(2, 7, 8)
    mask = padding_mask([4, 7], max_len=7)
    changed = x.clone()
    changed[0, 4:] = (
        torch.randn(3, 8) * 10
    )  # only the padding of sequence 0 changes
    torch.testing.assert_close(
        encoder(changed, mask)[0, :4], encoder(x, mask)[0, :4]
    )


@settings(max_examples=15, deadline=None)
@given(
    seq_len=st.integers(2, 8),
    seed=st.integers(0, 2**16),
    norm_first=st.booleans(),
)
def test_encoder_is_permutation_equivariant(seq_len, seed, norm_first):
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    encoder = TransformerEncoder(small_config(norm_first=norm_first)).eval()
    x = torch.randn(2, seq_len, 8, generator=generator)
    permutation = torch.randperm(seq_len, generator=generator)
    torch.testing.assert_close(
        encoder(x[:, permutation]), encoder(x)[:, permutation]
    )


# --- the seed bugs, pinned --------------------------------------------------------------------


def test_attention_maps_are_computed_from_the_normalized_input():
    """Source 000 fed the un-normalized x to self_attn when collecting pre-LN maps."""
    torch.manual_seed(0)
    encoder = TransformerEncoder(
        TransformerConfig(num_layers=2, d_model=16, num_heads=2, ffn_width=32)
    ).eval()
    x = 4 * torch.randn(1, 10, 16) + 2  # far from the LayerNorm's unit scale
    maps = encoder.get_attention_maps(x)
    hidden = x
    for block, weights in zip(encoder.blocks, maps, strict=True):
        normalized = block.norm1(hidden)
        _, expected = block.self_attn(
            normalized, normalized, normalized, return_attention=True
        )
        _, seed_style = block.self_attn(
            hidden, hidden, hidden, return_attention=True
        )
        torch.testing.assert_close(weights, expected)
        assert (weights - seed_style).abs().max() > 0.1
        hidden = block(hidden)


@pytest.mark.parametrize("norm_first", [True, False])
def test_dropout_never_touches_the_residual_stream(norm_first):
    """Source 003 applied dropout after the residual sum, dropping the skip path itself."""
    torch.manual_seed(0)
    block = EncoderBlock(8, 2, 16, dropout=0.5, norm_first=norm_first).train()
    with torch.no_grad():  # both sublayers now output exactly zero
        for module in (block.self_attn, block.ffn):
            for parameter in module.parameters():
                parameter.zero_()
    x = torch.randn(4, 6, 8)
    expected = x if norm_first else block.norm2(block.norm1(x))
    torch.testing.assert_close(block(x), expected)


def test_blocks_have_separate_norms():
    """Sources 002 and 003 share one norm between the sublayers; ours has two."""
    block = EncoderBlock(8, 2, 16)
    assert block.norm1 is not block.norm2
    assert block.norm1.weight.data_ptr() != block.norm2.weight.data_ptr()


# --- parameter counts ---------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_block_parameter_count_formula(bias, norm):
    d_model, ffn_width = 12, 40
    block = EncoderBlock(d_model, 3, ffn_width, bias=bias, norm=norm)
    attention = 4 * d_model**2 + (4 * d_model if bias else 0)
    ffn = 2 * d_model * ffn_width + ((ffn_width + d_model) if bias else 0)
    norms = 2 * (2 * d_model if norm == "layer" and bias else d_model)
    assert count_parameters(block) == attention + ffn + norms


# --- RMSNorm -----------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(d_model=st.integers(2, 32), seed=st.integers(0, 2**16))
def test_rmsnorm_matches_torch(d_model, seed):
    generator = torch.Generator().manual_seed(seed)
    ours = RMSNorm(d_model, eps=1e-6)
    reference = nn.RMSNorm(d_model, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(d_model, generator=generator))
        reference.weight.copy_(ours.weight)
    x = 3 * torch.randn(4, 5, d_model, generator=generator)
    torch.testing.assert_close(ours(x), reference(x))


@settings(max_examples=25, deadline=None)
@given(d_model=st.integers(2, 32), seed=st.integers(0, 2**16))
def test_rmsnorm_equals_layernorm_exactly_on_centred_inputs(d_model, seed):
    generator = torch.Generator().manual_seed(seed)
    rms = RMSNorm(d_model, eps=1e-5).double()
    layer = nn.LayerNorm(d_model, eps=1e-5, bias=False).double()
    x = torch.randn(6, d_model, generator=generator, dtype=torch.float64) + 2.0
    centred = x - x.mean(-1, keepdim=True)
    torch.testing.assert_close(rms(centred), layer(centred))
    torch.testing.assert_close(
        rms(centred), layer(x)
    )  # LayerNorm = centring + RMSNorm
    assert (rms(x) - layer(x)).abs().max() > 0.1  # off-centre inputs differ


def test_make_norm():
    assert isinstance(make_norm("layer", 4), nn.LayerNorm)
    assert make_norm("layer", 4, bias=False).bias is None
    assert isinstance(make_norm("rms", 4), RMSNorm)


# --- documented errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_model": 10, "num_heads": 4}, ValueError, "not divisible"),
        ({"dropout": 1.0}, ValueError, r"\[0, 1\)"),
        ({"dropout": "0.1"}, TypeError, "dropout"),
        ({"num_heads": 0}, ValueError, "positive"),
        (
            {"d_model": 8.0},
            TypeError,
            "d_model must be a positive int, got float",
        ),
        (
            {"ffn_width": 16.0},
            TypeError,
            "ffn_width must be a positive int, got float",
        ),
        ({"eps": "1e-5"}, TypeError, "eps must be a number"),
        ({"ffn_width": 0}, ValueError, "ffn_width"),
        ({"norm": "batch"}, ValueError, "norm must be one of"),
        ({"norm_first": "yes"}, TypeError, "norm_first"),
    ],
)
def test_block_rejects_bad_arguments(kwargs, error, message):
    arguments = {"d_model": 8, "num_heads": 2, "ffn_width": 16} | kwargs
    with pytest.raises(error, match=message):
        EncoderBlock(**arguments)


@pytest.mark.parametrize(
    ("num_layers", "error"), [(0, ValueError), (2.0, TypeError)]
)
def test_encoder_rejects_bad_num_layers(num_layers, error):
    with pytest.raises(error, match="num_layers"):
        TransformerEncoder(small_config(num_layers=num_layers))


def test_block_rejects_bad_inputs():
    block = EncoderBlock(8, 2, 16)
    with pytest.raises(ValueError, match=r"\(B, T, D=8\)"):
        block(torch.randn(5, 8))
    with pytest.raises(
        ValueError, match="built for d_model=8 but x has width 6"
    ):
        block(torch.randn(2, 5, 6))
    with pytest.raises(TypeError, match="torch.Tensor"):
        block([[0.0] * 8])


def test_rmsnorm_rejects_bad_arguments():
    with pytest.raises(
        ValueError, match="eps must be > 0, got 0.0; 1e-5 is usual"
    ):
        RMSNorm(4, eps=0.0)
    with pytest.raises(TypeError, match="d_model"):
        RMSNorm("4")
    with pytest.raises(ValueError, match="last dimension must be d_model"):
        RMSNorm(4)(torch.randn(2, 5))


def test_rms_norm_eps_default_is_consistent():
    assert (
        RMSNorm(8).eps
        == make_norm("rms", 8).eps
        == EncoderBlock(8, 2, 16, norm="rms").norm1.eps
    )
    assert RMSNorm(8).eps == nn.LayerNorm(8).eps == 1e-5


def test_shared_validators_keep_their_messages():
    with pytest.raises(TypeError, match="num_layers must be a positive int"):
        TransformerEncoder(small_config(num_layers=2.0))
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        EncoderBlock(8, 2, 16, dropout=1.0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        FeedForward(8, 16, dropout=-0.1)


# --- misuse: dtypes and widths ------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: TransformerEncoder(small_config()),
        lambda: EncoderBlock(8, 2, 16),
        lambda: EncoderBlock(8, 2, 16, norm_first=False, norm="rms"),
    ],
    ids=["encoder", "block", "post-LN RMS block"],
)
def test_float64_input_is_refused_naming_both_dtypes(build):
    module = build()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with pytest.raises(
        TypeError, match=r"x has dtype torch\.float64 but .* are torch\.float32"
    ):
        module(x)
    assert (
        module.double()(x).dtype == torch.float64
    )  # the fix the message names


@pytest.mark.parametrize(
    "module", [FeedForward(8, 16), RMSNorm(8)], ids=["ffn", "rms"]
)
def test_width_mismatch_is_refused(module):
    name = type(module).__name__
    with pytest.raises(
        ValueError,
        match=rf"{name}\(d_model=8\) got input with last dimension 6",
    ):
        module(torch.randn(2, 5, 6))
    assert module(torch.randn(2, 5, 8)).shape == (2, 5, 8)


@pytest.mark.parametrize(
    "module", [FeedForward(8, 16), RMSNorm(8)], ids=["ffn", "rms"]
)
def test_integer_and_float64_inputs_are_refused(module):
    with pytest.raises(TypeError, match=r"floating-point tensor.*x\.float\(\)"):
        module(torch.ones(2, 5, 8, dtype=torch.long))
    with pytest.raises(TypeError, match=r"torch\.float64.*torch\.float32"):
        module(torch.ones(2, 5, 8, dtype=torch.float64))


def test_a_masked_stack_reads_its_mask_back_once_whatever_its_depth():
    """The inverted-mask check reads the mask's values once, not once per layer; the
    same mask is not read again, a mask changed in place is."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 32)
    mask = causal_mask(6)
    for layers in (1, 4):
        encoder = TransformerEncoder(
            TransformerConfig(d_model=32, num_heads=4, num_layers=layers)
        )
        fresh = causal_mask(6)
        with host_reads() as reads:
            encoder(x, fresh)
        assert reads.count == 1, (layers, reads.count)
        with host_reads() as reads:
            encoder(x, fresh)
        assert reads.count == 0
    encoder(x, mask)
    mask.copy_(
        torch.ones(6, 6, dtype=torch.bool).triu(1)
    )  # PyTorch's convention
    with pytest.raises(ValueError, match="PyTorch's causal mask"):
        encoder(x, mask)
    with pytest.raises(ValueError, match="PyTorch's causal mask"):
        encoder(x, mask)  # refused every time, not remembered as read


def test_a_mask_made_in_inference_mode_is_checked_and_works():
    """Such a tensor keeps no version counter (reading it raises): it is checked at every
    call, never remembered."""
    encoder = TransformerEncoder(
        TransformerConfig(d_model=32, num_heads=4, num_layers=2)
    )
    x = torch.randn(1, 5, 32)
    with torch.inference_mode():
        assert encoder(x, causal_mask(5)).shape == (1, 5, 32)
        inverted = torch.ones(5, 5, dtype=torch.bool).triu(1)
        for _ in range(2):
            with pytest.raises(ValueError, match="PyTorch's causal mask"):
                encoder(x, inverted)
