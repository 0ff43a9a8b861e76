"""Tests for what chapter 4 (multi-head attention) shows beyond tests/test_attention.py.

Conv1d(kernel_size=1) equals Linear, the parameter-count formula, cross-attention through the
per-head view, permutation symmetries (with and without a mask), the fix for source 002's
attention width, and the exercise checkers in helpers.checks (right answers pass, the usual
wrong answers fail with the hint the chapter promises).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers import checks
from helpers.attention import (
    MultiHeadAttention,
    PerHeadMultiHeadAttention,
    causal_mask,
    scaled_dot_product_attention,
)

ATOL = 1e-5


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- Conv1d == Linear


@settings(max_examples=25, deadline=None)
@given(
    in_channels=st.integers(1, 9),
    out_channels=st.integers(1, 9),
    seq_len=st.integers(1, 12),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv1d_kernel_1_equals_linear(in_channels, out_channels, seq_len, bias, seed):
    torch.manual_seed(seed)
    conv = nn.Conv1d(in_channels, out_channels, kernel_size=1, bias=bias)
    linear = nn.Linear(in_channels, out_channels, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.squeeze(-1))
        if bias:
            linear.bias.copy_(conv.bias)
    x = _randn(3, in_channels, seq_len, seed=seed)  # (B, C, T)
    expected = linear(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(conv(x), expected, atol=ATOL, rtol=1e-5)


def test_conv_attention_of_source_004_is_unscaled_single_head():
    torch.manual_seed(0)
    conv_q, conv_k, conv_v = (nn.Conv1d(8, n, 1, bias=False) for n in (6, 6, 10))
    x = _randn(2, 8, 11)  # (B, C, T)
    queries, keys, values = conv_q(x), conv_k(x), conv_v(x)
    weights = queries.transpose(1, 2).matmul(keys).softmax(dim=2)
    by_conv = weights.matmul(values.transpose(1, 2)).transpose(1, 2)
    tokens = x.transpose(1, 2)
    projected = (tokens @ layer.weight.squeeze(-1).T for layer in (conv_q, conv_k, conv_v))
    by_head, _ = scaled_dot_product_attention(*projected, scale=1.0)
    torch.testing.assert_close(by_conv, by_head.transpose(1, 2), atol=ATOL, rtol=1e-5)


# --------------------------------------------------------------------------- parameter count


@pytest.mark.parametrize("d_model, num_heads", [(8, 1), (8, 8), (12, 3), (64, 4), (96, 12)])
@pytest.mark.parametrize("bias", [False, True])
def test_parameter_count_formula(d_model, num_heads, bias):
    formula = 4 * d_model**2 + (4 * d_model if bias else 0)
    assert checks.mha_parameter_count(d_model, num_heads, bias) == formula
    for module in (
        MultiHeadAttention(d_model, num_heads, bias=bias),
        PerHeadMultiHeadAttention(d_model, num_heads, bias=bias),
        nn.MultiheadAttention(d_model, num_heads, bias=bias),
    ):
        assert sum(p.numel() for p in module.parameters()) == formula, type(module).__name__


def test_parameter_count_refuses_indivisible_width():
    with pytest.raises(ValueError, match="not divisible"):
        checks.mha_parameter_count(10, 3)


# --------------------------------------------------------------------------- cross-attention


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
    query, memory = _randn(2, q_len, d_model, seed=seed), _randn(2, k_len, d_model, seed=seed + 1)
    output, weights = per_head(query, memory, memory, return_attention=True)
    assert output.shape == (2, q_len, d_model)
    assert weights.shape == (2, num_heads, q_len, k_len)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, num_heads, q_len))
    fused_output = per_head.fused()(query, memory, memory)
    torch.testing.assert_close(output, fused_output, atol=ATOL, rtol=1e-5)


# --------------------------------------------------------------------------- permutations


@settings(max_examples=20, deadline=None)
@given(q_len=st.integers(1, 6), k_len=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_permutation_symmetries(q_len, k_len, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(12, 3)
    query, memory = _randn(2, q_len, 12, seed=seed), _randn(2, k_len, 12, seed=seed + 1)
    q_order, k_order = torch.randperm(q_len), torch.randperm(k_len)
    reference = mha(query, memory, memory)
    torch.testing.assert_close(
        mha(query[:, q_order], memory, memory), reference[:, q_order], atol=ATOL, rtol=1e-5
    )
    torch.testing.assert_close(
        mha(query, memory[:, k_order], memory[:, k_order]), reference, atol=ATOL, rtol=1e-5
    )


def test_permutation_symmetries_with_mask():
    """A mask encodes positions: it must be permuted with the inputs (source 000 omits it)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    x = _randn(2, 6, 12)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    mask = causal_mask(6)
    reference = mha(x, x, x, mask=mask)
    moved = mha(x[:, order], x[:, order], x[:, order], mask=mask[order][:, order])
    torch.testing.assert_close(moved, reference[:, order], atol=ATOL, rtol=1e-5)
    kept = mha(x[:, order], x[:, order], x[:, order], mask=mask)
    assert (kept - reference[:, order]).abs().max() > 1e-2


# --------------------------------------------------------------------------- source 002


def test_attention_width_is_the_embedding_width():
    """Source 002 sizes attention by the vocabulary; the fix sizes it by the embeddings."""
    torch.manual_seed(0)
    n_vocab, n_embd = 65, 32
    tokens = torch.randint(0, n_vocab, (2, 8))
    embedded = nn.Embedding(n_vocab, n_embd)(tokens)
    output = MultiHeadAttention(n_embd, 4)(embedded, embedded, embedded)
    assert output.shape == (2, 8, n_embd)
    with pytest.raises(ValueError, match=r"d_model=65\), got \(2, 8, 32\)"):
        MultiHeadAttention(n_vocab, 5)(embedded, embedded, embedded)


def test_indivisible_width_is_refused():
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        MultiHeadAttention(65, 4)
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        PerHeadMultiHeadAttention(10, 3)


# --------------------------------------------------------------------------- exercise 3


def permute_heads(mha: MultiHeadAttention, order: list[int]) -> MultiHeadAttention:
    """The solution of exercise 3, verbatim."""
    rows = torch.cat([torch.arange(h * mha.d_head, (h + 1) * mha.d_head) for h in order])
    permuted = MultiHeadAttention(mha.d_model, mha.num_heads)
    with torch.no_grad():
        for block in range(3):
            offset = block * mha.d_model
            permuted.qkv_proj.weight[offset : offset + mha.d_model] = mha.qkv_proj.weight[
                offset + rows
            ]
        permuted.out_proj.weight.copy_(mha.out_proj.weight[:, rows])
    return permuted


def test_exercise_3_heads_are_interchangeable():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    x = _randn(2, 5, 12)
    order = [2, 0, 1]
    output, weights = mha(x, x, x, return_attention=True)
    permuted_output, permuted_weights = permute_heads(mha, order)(x, x, x, return_attention=True)
    torch.testing.assert_close(permuted_output, output, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(permuted_weights, weights[:, order], atol=ATOL, rtol=1e-5)


# --------------------------------------------------------------------------- checkers


def _solution_split(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)


def _solution_merge(x):
    batch, num_heads, seq_len, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_head)


def test_reference_split_and_merge_round_trip():
    x = _randn(2, 5, 12)
    heads = checks.split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])
    torch.testing.assert_close(checks.merge_heads(heads), x)
    with pytest.raises(ValueError, match="not divisible"):
        checks.split_heads(x, 5)


def test_check_split_heads_accepts_the_solution():
    assert checks.check_split_heads(_solution_split).startswith("Correct")
    assert checks.check_split_heads(checks.split_heads).startswith("Correct")


def test_check_split_heads_explains_the_direct_reshape():
    def direct(x, num_heads):
        batch, seq_len, d_model = x.shape
        return x.reshape(batch, num_heads, seq_len, d_model // num_heads)

    with pytest.raises(AssertionError, match="right shape, wrong content.*transpose"):
        checks.check_split_heads(direct)


def test_check_split_heads_rejects_a_wrong_shape():
    with pytest.raises(AssertionError, match=r"\(B, H, T, d_head\)"):
        checks.check_split_heads(lambda x, num_heads: x)


def test_check_merge_heads():
    assert checks.check_merge_heads(_solution_merge).startswith("Correct")

    def direct(x):
        batch, num_heads, seq_len, d_head = x.shape
        return x.reshape(batch, seq_len, num_heads * d_head)

    with pytest.raises(AssertionError, match="transpose"):
        checks.check_merge_heads(direct)
    with pytest.raises(AssertionError, match=r"\(B, T, D\)"):
        checks.check_merge_heads(lambda x: x)


def test_check_parameter_count():
    def solution(d_model, num_heads, bias):
        return 4 * d_model**2 + (4 * d_model if bias else 0)

    assert checks.check_parameter_count(solution).startswith("Correct")
    with pytest.raises(AssertionError, match="changes with num_heads"):
        checks.check_parameter_count(lambda d, h, bias: solution(d, h, bias) * h)
    with pytest.raises(AssertionError, match="d_model biases"):
        checks.check_parameter_count(lambda d, h, bias: 4 * d * d)


# --------------------------------------------------------------------------- source 001


class _Source001Head(nn.Module):
    """Source 001's head as ported in chapter 4 (no mask)."""

    def __init__(self, hidden_dim, input_dim=None, proj_values=False):
        super().__init__()
        self.d_k, self.proj_values = hidden_dim, proj_values
        input_dim = hidden_dim if input_dim is None else input_dim
        self.linear_query = nn.Linear(input_dim, hidden_dim)
        self.linear_key = nn.Linear(input_dim, hidden_dim)
        self.linear_value = nn.Linear(input_dim, hidden_dim)

    def forward(self, x):
        keys = self.linear_key(x)
        values = self.linear_value(x) if self.proj_values else x
        scores = self.linear_query(x) @ keys.transpose(1, 2) / self.d_k**0.5
        return scores.softmax(dim=-1) @ values


def _source_001_mha(n_heads, d_model, input_dim, proj_values, x):
    heads = [_Source001Head(d_model, input_dim, proj_values) for _ in range(n_heads)]
    linear_out = nn.Linear(n_heads * d_model, d_model)
    return linear_out(torch.cat([head(x) for head in heads], dim=-1))


def test_source_001_value_width():
    """Unprojected values break the output layer unless input_dim == d_model; ours always work."""
    torch.manual_seed(0)
    narrow, same = _randn(2, 5, 3), _randn(2, 5, 4)
    assert _source_001_mha(2, 4, 3, True, narrow).shape == (2, 5, 4)
    assert _source_001_mha(2, 4, None, False, same).shape == (2, 5, 4)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        _source_001_mha(2, 4, 3, False, narrow)
    for num_heads in (1, 2, 4):
        per_head = PerHeadMultiHeadAttention(4, num_heads)
        assert all(head.value.out_features == 4 // num_heads for head in per_head.heads)
        assert per_head(same, same, same).shape == (2, 5, 4)


# --------------------------------------------------------------------------- exercise 4


def test_exercise_4_fixed_causal_mask_allows_only_the_identity():
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
