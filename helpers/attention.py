"""Attention: scaled dot-product attention, heads and multi-head attention.

Chapters 2 (masking), 3 (scaled dot-product attention) and 4 (multi-head
attention) build these pieces from scratch; this module is the canonical version
the later chapters import.

Shapes: ``B`` batch, ``H`` heads, ``Tq`` query length, ``Tk`` key/value length,
``D`` model width (``d_model``), ``d_head = D / H``.

Masks follow the one convention of the package, documented in
:mod:`helpers.masks` (their home): boolean, ``True`` = this query may attend to
this key, as in ``torch.nn.functional.scaled_dot_product_attention``; against
per-head scores (B, H, Tq, Tk), a 3-D mask is (B, Tq, Tk). ``causal_mask``,
``padding_mask`` and ``additive_mask`` are importable from here too, where
chapters 2 to 4 introduce them.

A query row whose keys are all masked has nothing to attend to. Here its
attention weights are all zero and its output is the zero vector (no NaN, no
silent uniform average), which is also what PyTorch's fused kernel returns on
the CPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers import _validate as check
from helpers.masks import additive_mask, causal_mask, padding_mask

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "additive_mask",
    "MultiHeadAttention",
    "SingleHeadAttention",
    "PerHeadMultiHeadAttention",
    "split_heads",
    "merge_heads",
]


# -------------------------------------------------------------------- attention


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    *,
    training: bool = True,
    generator: torch.Generator | None = None,
    scale: float | None = None,
    validate: bool = True,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d) masked) v, returning the output and the attention
    weights.

    Shapes: q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); the leading
    dimensions broadcast. Returns output (..., Tq, dv) and weights (..., Tq,
    Tk).

    ``mask``: boolean, True = may attend, broadcastable to (..., Tq, Tk). One
    exception to plain broadcasting: with 4-D q, k, v (B, H, T, d), a **3-D mask
    is read as (B, Tq, Tk)**, one mask per sequence shared by the heads, and
    used as ``mask[:, None]`` (B, 1, Tq, Tk), as :class:`MultiHeadAttention`
    does. (``F.scaled_dot_product_attention`` aligns shapes from the right
    instead, so there a (B, Tq, Tk) mask is lined up with the heads: an error
    when B != H, and silently wrong when B == H.) Write a per-head mask shared
    by the batch as (1, H, Tq, Tk). A row with no key allowed gets all-zero
    weights and a zero output.

    ``dropout_p`` zeroes attention weights with that probability and rescales
    the survivors by 1 / (1 - dropout_p) (no renormalization), only when
    ``training`` is True; the returned weights are the ones that multiplied
    ``v``. ``generator`` makes the dropout pattern reproducible. ``scale``, a
    positive number, replaces 1 / sqrt(d). ``validate=False`` skips the input
    checks, for callers that have checked their inputs already.
    """
    if validate:
        mask, scale = check.attention_arguments(
            q, k, v, mask, dropout_p, training, scale
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if mask is not None:
        # -inf (not -1e9): exactly zero weight in every dtype, float16 included.
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row with no allowed key would be softmax(-inf, ..., -inf) = NaN:
        # give it finite scores here and zero its weights after the softmax.
        has_key = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~has_key, 0.0)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~has_key, 0.0)
    if training and dropout_p > 0.0:
        keep = torch.rand(
            weights.shape,
            generator=generator,
            device=weights.device,
            dtype=weights.dtype,
        )
        weights = weights * (keep >= dropout_p) / (1.0 - dropout_p)
    return weights @ v, weights


# ------------------------------------------------------------------------ heads


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, T, D) -> (B, H, T, d_head): head ``h`` gets features
    ``h*d_head:(h+1)*d_head``."""
    batch, length, d_model = x.shape
    d_head = check.head_width(d_model, num_heads)
    return x.view(batch, length, num_heads, d_head).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, d_head) -> (B, T, H * d_head): the inverse of
    :func:`split_heads`."""
    batch, num_heads, length, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * d_head)


# ------------------------------------------------------------------- multi-head


class MultiHeadAttention(nn.Module):
    """Multi-head attention with one fused projection for queries, keys and
    values.

    ``qkv_proj.weight`` (3D, D) stacks W_q, W_k and W_v (the layout of
    ``torch.nn.MultiheadAttention.in_proj_weight``); head h uses rows
    h*d_head:(h+1)*d_head of each block. forward(query (B, Tq, D), key (B, Tk,
    D), value (B, Tk, D), mask=None, return_attention=False) -> output (B, Tq,
    D), or (output, weights (B, H, Tq, Tk)). ``mask``: boolean, True = may
    attend, (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
    ):
        super().__init__()
        self.d_head = check.head_width(d_model, num_heads)
        self.d_model, self.num_heads = d_model, num_heads
        self.dropout = check.probability("dropout", dropout, check.DROPOUT_HINT)
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None, return_attention=False):
        mask = check.multi_head_inputs(self, query, key, value, mask)
        if query is key and key is value:  # self-attention: one matmul
            q, k, v = self.qkv_proj(query).split(self.d_model, dim=-1)
        # cross-attention: each input through its own block of the fused weight
        else:
            q, k, v = (
                self._project(x, i) for i, x in enumerate((query, key, value))
            )
        # (B, H, T, d_head)
        q, k, v = (split_heads(x, self.num_heads) for x in (q, k, v))
        dropout_p = self.dropout if self.training else 0.0
        if return_attention:  # the book's own kernel, which returns the weights
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_p, validate=False
            )
        # PyTorch's fused kernel; rows with no key give zeros, as the package's
        # rule says
        else:
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p
            )
            if mask is not None:
                heads = heads.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        output = self.out_proj(merge_heads(heads))  # (B, Tq, D)
        return (output, weights) if return_attention else output

    # block 0: W_q, 1: W_k, 2: W_v
    def _project(self, x: Tensor, block: int) -> Tensor:
        rows = slice(block * self.d_model, (block + 1) * self.d_model)
        bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[rows]
        return F.linear(x, self.qkv_proj.weight[rows], bias)


class SingleHeadAttention(nn.Module):
    """One attention head with its own projections: (B, T, D) inputs -> (B, Tq,
    d_head).

    forward(query, key, value, mask=None) -> (output (B, Tq, d_head), weights
    (B, Tq, Tk)); ``mask`` boolean, True = may attend, broadcastable to (B, Tq,
    Tk).
    """

    def __init__(self, d_model: int, d_head: int, bias: bool = False):
        super().__init__()
        check.positive_int("d_model", d_model)
        check.positive_int("d_head", d_head)
        self.query = nn.Linear(d_model, d_head, bias=bias)
        self.key = nn.Linear(d_model, d_head, bias=bias)
        self.value = nn.Linear(d_model, d_head, bias=bias)

    def forward(self, query, key, value, mask=None):
        # Queries from `query`, keys from `key`: the order source 003 swaps.
        return scaled_dot_product_attention(
            self.query(query), self.key(key), self.value(value), mask
        )


class PerHeadMultiHeadAttention(nn.Module):
    """Multi-head attention as a list of single-head modules, concatenated and
    projected.

    Computes the same function as :class:`MultiHeadAttention`
    (:func:`helpers.interop.fuse_heads` returns one with the same weights);
    slower, but each head is a module you can hold. Same forward signature,
    shapes and mask convention as :class:`MultiHeadAttention`; no dropout.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = False):
        super().__init__()
        d_head = check.head_width(d_model, num_heads)
        self.d_model, self.num_heads = d_model, num_heads
        self.heads = nn.ModuleList(
            SingleHeadAttention(d_model, d_head, bias) for _ in range(num_heads)
        )
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None, return_attention=False):
        mask = check.multi_head_inputs(self, query, key, value, mask)
        outputs, weights = [], []
        for h, head in enumerate(self.heads):
            head_mask = (
                None if mask is None else mask[:, min(h, mask.shape[1] - 1)]
            )
            output, weight = head(query, key, value, head_mask)
            outputs.append(output)
            weights.append(weight)
        output = self.out_proj(torch.cat(outputs, dim=-1))
        return (
            (output, torch.stack(weights, dim=1))
            if return_attention
            else output
        )
