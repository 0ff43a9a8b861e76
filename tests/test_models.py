"""Tests of helpers.models: shapes, parameter counts, the attention layer against PyTorch's
kernel, batch independence, and the batch-axis mistake of source 004's LSTM."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers.models import (
    BatchAxisLSTM,
    ConvSelfAttention,
    ShapesLSTM,
    count_parameters,
    make_shapes_attention_model,
    make_shapes_cnn,
)

FACTORIES = {
    "cnn": make_shapes_cnn,
    "attention": make_shapes_attention_model,
    "attention_unscaled": lambda: make_shapes_attention_model(scaled=False),
    "lstm": ShapesLSTM,
}


@pytest.mark.parametrize("name", FACTORIES)
@pytest.mark.parametrize("seq_len", [1, 37, 100])
def test_output_shape_equals_input_shape(name, seq_len):
    torch.manual_seed(0)
    model = FACTORIES[name]()
    x = torch.randn(3, 1, seq_len)
    assert model(x).shape == (3, 1, seq_len)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("cnn", 62_337), ("attention", 58_177), ("attention_unscaled", 58_177), ("lstm", 63_801)],
)
def test_parameter_counts(name, expected):
    assert count_parameters(FACTORIES[name]()) == expected


def test_count_parameters_skips_frozen_ones():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    model[0].requires_grad_(False)
    assert count_parameters(model) == 4
    with pytest.raises(TypeError, match="torch.nn.Module"):
        count_parameters("model")


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq_len=st.integers(1, 12),
    in_channels=st.integers(1, 6),
    key_channels=st.integers(1, 6),
    out_channels=st.integers(1, 6),
    scaled=st.booleans(),
)
def test_conv_attention_matches_pytorch_sdpa(
    batch, seq_len, in_channels, key_channels, out_channels, scaled
):
    torch.manual_seed(0)
    layer = ConvSelfAttention(in_channels, out_channels, key_channels, scaled=scaled)
    x = torch.randn(batch, in_channels, seq_len)
    queries = layer.query(x).transpose(1, 2)  # [B, T, key_channels]
    keys = layer.key(x).transpose(1, 2)
    values = layer.value(x).transpose(1, 2)
    scale = None if scaled else 1.0  # sdpa's default scale is 1/sqrt(key_channels)
    expected = F.scaled_dot_product_attention(queries, keys, values, scale=scale)
    torch.testing.assert_close(layer(x), expected.transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_attention_weights_are_a_distribution_over_keys():
    torch.manual_seed(0)
    layer = ConvSelfAttention(4, 5, 8)
    weights = layer.attention(torch.randn(2, 4, 30))
    assert weights.shape == (2, 30, 30)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 30))


def test_scaling_divides_the_scores_by_sqrt_of_key_channels():
    torch.manual_seed(0)
    scaled = ConvSelfAttention(4, 4, 16, scaled=True)
    unscaled = ConvSelfAttention(4, 4, 16, scaled=False)
    unscaled.load_state_dict(scaled.state_dict())
    x = torch.randn(1, 4, 10)
    log_scaled = scaled.attention(x).log()
    log_unscaled = unscaled.attention(x).log()
    # log-softmax differs from the scores by a per-row constant, so compare centred rows
    centred = lambda logits: logits - logits.mean(dim=-1, keepdim=True)  # noqa: E731
    torch.testing.assert_close(centred(log_unscaled), math.sqrt(16) * centred(log_scaled))


def test_attention_model_exposes_its_attention_layer():
    torch.manual_seed(0)
    model = make_shapes_attention_model()
    x = torch.randn(2, 1, 50)
    assert isinstance(model[4], ConvSelfAttention)
    weights = model[4].attention(model[:4](x))
    assert weights.shape == (2, 50, 50)
    assert "key_channels=96, scaled=True" in repr(model[4])


@pytest.mark.parametrize("name", FACTORIES)
def test_samples_do_not_influence_each_other(name):
    """A prediction must not depend on the other samples of the batch, nor on earlier calls."""
    torch.manual_seed(0)
    model = FACTORIES[name]().eval()
    x = torch.randn(6, 1, 40)
    with torch.no_grad():
        together = model(x)
        alone = torch.cat([model(x[i : i + 1]) for i in range(6)])
        shuffled = model(x.flip(0)).flip(0)
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(together, shuffled, rtol=1e-4, atol=1e-5)


def test_convolution_only_sees_21_neighbours_but_attention_sees_everything():
    torch.manual_seed(0)
    x = torch.randn(1, 1, 100, requires_grad=True)
    for model, expected in ((make_shapes_cnn(), 21), (make_shapes_attention_model(), 100)):
        x.grad = None
        model(x)[0, 0, 50].backward()
        assert (x.grad[0, 0] != 0).sum().item() == expected


def test_lstm_output_at_the_start_depends_on_the_end():
    """Bidirectional: the first output position sees the last input position."""
    torch.manual_seed(0)
    x = torch.randn(1, 1, 100, requires_grad=True)
    ShapesLSTM()(x)[0, 0, 0].backward()
    assert x.grad[0, 0, -1] != 0


def test_batch_axis_lstm_reproduces_the_source_mistake():
    """Source 004's LSTM runs along the batch and carries its state between calls."""
    torch.manual_seed(0)
    model = BatchAxisLSTM().eval()
    assert count_parameters(model) == 130_660
    x = torch.randn(6, 1, 100)
    with torch.no_grad():
        first = model(x)
        second = model(x)  # same input, but the state left by the first call differs
        model.reset()
        fresh = model(x)
        model.reset()
        alone = model(x[3:4])
        model.reset()
        first_alone = model(x[0:1])
    assert not torch.allclose(first, second)
    torch.testing.assert_close(first, fresh)
    # sample 3 depends on samples 0..2 of its batch: on its own it gives another answer
    assert not torch.allclose(first[3], alone[0])
    # after a reset, the first sample of a batch has nothing before it
    torch.testing.assert_close(first[0], first_alone[0])


def test_batch_axis_lstm_treats_the_batch_as_time():
    """Gradients show it: output 3 depends on inputs 0..3 and not on inputs 4 and 5."""
    torch.manual_seed(0)
    model = BatchAxisLSTM()
    x = torch.randn(6, 1, 100, requires_grad=True)
    model(x)[3].sum().backward()
    depends = x.grad.abs().sum(dim=(1, 2)) > 0
    assert depends.tolist() == [True, True, True, True, False, False]


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: make_shapes_cnn(channels=0), ValueError, "channels must be a positive int"),
        (lambda: make_shapes_cnn(kernel_size=4), ValueError, "kernel_size must be odd"),
        (lambda: make_shapes_attention_model(key_channels=0), ValueError, "key_channels"),
        (lambda: make_shapes_attention_model(kernel_size=2), ValueError, "kernel_size must be odd"),
        (lambda: ConvSelfAttention(4, 4, 4, scaled="yes"), TypeError, "scaled must be a bool"),
        (lambda: ConvSelfAttention(4, 4.0, 4), ValueError, "out_channels must be a positive"),
        (lambda: ShapesLSTM(hidden_size=0), ValueError, "hidden_size must be a positive int"),
        (lambda: BatchAxisLSTM(seq_len=-1), ValueError, "seq_len must be a positive int"),
    ],
)
def test_constructor_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


@pytest.mark.parametrize(
    ("model", "bad_input", "error", "match"),
    [
        (ShapesLSTM(), torch.randn(2, 100), ValueError, r"expects input of shape \[B, 1, T\]"),
        (ShapesLSTM(), torch.randn(2, 3, 100), ValueError, r"got \(2, 3, 100\)"),
        (BatchAxisLSTM(), torch.randn(2, 100), ValueError, r"\[B, 1, T\]"),
        (ConvSelfAttention(4, 4, 4), torch.randn(2, 3, 10), ValueError, r"\[B, 4, T\]"),
        (ConvSelfAttention(4, 4, 4), [[1.0]], TypeError, "expects a tensor"),
    ],
)
def test_forward_errors(model, bad_input, error, match):
    with pytest.raises(error, match=match):
        model(bad_input)
