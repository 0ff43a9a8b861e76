"""Tests of helpers.analysis: parameter counts, the parameter table and the stable rank."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers.analysis import (
    count_parameters,
    parameter_table,
    peak_cpu_bytes,
    stable_rank,
)
from helpers.transformer import (
    FeedForward,
    TransformerConfig,
    TransformerEncoder,
)

# --- count_parameters ---------------------------------------------------------------------------


def test_count_parameters_counts_every_parameter_by_default():
    block = FeedForward(4, 8)
    block.linear1.weight.requires_grad_(False)
    assert count_parameters(block) == 4 * 8 + 8 + 8 * 4 + 4
    assert count_parameters(block, trainable_only=True) == 8 + 8 * 4 + 4


def test_count_parameters_skips_frozen_ones_only_when_asked():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    model[0].requires_grad_(False)
    assert count_parameters(model, trainable_only=True) == 4
    assert count_parameters(model) == 13


def test_count_parameters_counts_shared_parameters_once():
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert count_parameters(model) == 12
    assert count_parameters(nn.ReLU()) == 0


# --- parameter_table ----------------------------------------------------------------------------


def test_parameter_table():
    encoder = TransformerEncoder(
        TransformerConfig(num_layers=2, d_model=8, num_heads=2, ffn_width=16)
    )
    table = parameter_table(encoder, max_depth=3)
    assert list(table.columns) == ["module", "type", "parameters"]
    assert table.iloc[-1]["module"] == "total"
    assert table.iloc[-1]["type"] == "TransformerEncoder"
    assert table.iloc[-1]["parameters"] == count_parameters(encoder)
    assert (table["parameters"] > 0).all()
    assert "blocks.0.dropout1" not in set(table["module"])
    blocks = table[table["type"] == "EncoderBlock"]
    assert blocks["parameters"].sum() + 16 == count_parameters(
        encoder
    )  # + final LayerNorm


def test_parameter_table_depth_one_lists_the_children():
    table = parameter_table(
        TransformerEncoder(
            TransformerConfig(
                num_layers=2, d_model=8, num_heads=2, ffn_width=16
            )
        )
    )
    assert table["module"].tolist() == ["blocks", "final_norm", "total"]
    assert table["parameters"].iloc[:2].sum() == table["parameters"].iloc[-1]


def test_parameter_table_names_a_tied_parameter():
    """A head tied to the token embedding appears in both rows; the table says
    so, and its total counts the matrix once."""
    from helpers.gpt import GPT, GPTConfig

    def table(tie):
        config = GPTConfig(vocab_size=7, context_length=8, tie_weights=tie)
        return parameter_table(GPT(config)).set_index("module")

    tied, untied = table(True), table(False)
    assert tied.loc["head", "tied to"] == "token_embedding"
    assert tied.loc["token_embedding", "tied to"] == ""
    assert "tied to" not in untied.columns
    rows = tied["parameters"].drop("total").sum()
    assert rows - tied.loc["total", "parameters"] == 7 * 64
    assert rows - untied.loc["total", "parameters"] == 0


def test_parameter_helpers_reject_non_modules():
    with pytest.raises(
        TypeError, match="model must be a torch.nn.Module, got Tensor"
    ):
        count_parameters(torch.zeros(3))
    with pytest.raises(
        TypeError, match="model must be a torch.nn.Module, got str"
    ):
        parameter_table("model")
    with pytest.raises(TypeError, match="torch.nn.Module, got type"):
        count_parameters(nn.Linear)  # the class, not an instance
    with pytest.raises(ValueError, match="max_depth must be a positive int"):
        parameter_table(nn.Linear(2, 2), max_depth=0)
    with pytest.raises(
        TypeError, match="max_depth must be a positive int, got float"
    ):
        parameter_table(nn.Linear(2, 2), max_depth=1.0)


# --- stable_rank --------------------------------------------------------------------------------


def test_stable_rank_of_simple_matrices():
    assert stable_rank(torch.eye(5)) == pytest.approx(5.0)
    assert stable_rank(torch.ones(4, 6)) == pytest.approx(1.0)
    assert stable_rank(torch.diag(torch.tensor([2.0, 1.0]))) == pytest.approx(
        1.25
    )
    assert isinstance(stable_rank(torch.eye(3)), float)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 12),
    columns=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_stable_rank_lies_between_one_and_the_rank(rows, columns, seed):
    matrix = torch.randn(
        rows, columns, generator=torch.Generator().manual_seed(seed)
    )
    value = stable_rank(matrix)
    assert 1.0 - 1e-9 <= value <= torch.linalg.matrix_rank(matrix).item() + 1e-9
    assert stable_rank(3.0 * matrix) == pytest.approx(
        value
    )  # scale does not matter


def test_stable_rank_ignores_tiny_singular_values_unlike_the_rank():
    noisy = torch.ones(6, 6, dtype=torch.float64) + 1e-9 * torch.eye(
        6, dtype=torch.float64
    )
    assert torch.linalg.matrix_rank(noisy, tol=0.0).item() == 6
    assert stable_rank(noisy) == pytest.approx(1.0)


def test_stable_rank_works_on_a_tensor_that_requires_grad():
    matrix = torch.randn(4, 3, requires_grad=True)
    assert 1.0 <= stable_rank(matrix) <= 3.0


def test_stable_rank_errors():
    with pytest.raises(ValueError, match="zero matrix"):
        stable_rank(torch.zeros(3, 3))
    with pytest.raises(
        ValueError, match=r"matrix must be 2-D, got shape \(2, 3, 4\); pick one"
    ):
        stable_rank(torch.ones(2, 3, 4))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        stable_rank(torch.ones(3))
    with pytest.raises(
        TypeError, match=r"floating-point tensor.*matrix\.float\(\)"
    ):
        stable_rank(torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(
        TypeError, match="matrix must be a torch.Tensor, got list"
    ):
        stable_rank([[1.0, 0.0], [0.0, 1.0]])


# --- peak_cpu_bytes -------------------------------------------------------------------------------


def test_peak_cpu_bytes_counts_what_is_alive_at_once():
    x = torch.ones(1000)  # allocated before the call: not counted

    def two_temporaries(x):
        a = x * 2  # 4000 bytes
        b = a * 3  # 4000 more while a is alive
        del a
        c = b + 1  # a freed: still 8000 at most
        return c

    assert (
        8000 <= peak_cpu_bytes(two_temporaries, x) < 8100
    )  # (+ a few scalar constants)
    assert peak_cpu_bytes(lambda x: x.sum(), torch.ones(1000)) < 100


def test_peak_cpu_bytes_of_attention_weights_grows_as_t_squared():
    def weights(q, k):
        return (q @ k.transpose(-2, -1)).softmax(-1)

    small, large = (
        peak_cpu_bytes(weights, *torch.randn(2, 1, 1, T, 8)) for T in (64, 128)
    )
    assert small >= 2 * 64 * 64 * 4  # scores and weights alive together
    assert large == 4 * small


def test_peak_cpu_bytes_refuses_a_non_callable_and_leaves_stderr_working():
    import os

    with pytest.raises(TypeError, match="callable"):
        peak_cpu_bytes(torch.ones(3))
    peak_cpu_bytes(lambda: torch.ones(3))
    os.write(2, b"")  # file descriptor 2 was restored
