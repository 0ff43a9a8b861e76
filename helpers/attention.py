"""Attention: scaled dot-product attention, heads and multi-head attention.

Chapters 2 (masking), 3 (scaled dot-product attention) and 4 (multi-head
attention) build these pieces from scratch; this module is the canonical version
the later chapters import.

Shapes: ``B`` batch, ``H`` heads, ``Tq`` query length, ``Tk`` key/value length,
``D`` model width (``d_model``), ``d_head = D / H``.

Masks follow the one convention of the package, documented in
:mod:`helpers.masks` (their home): boolean, ``True`` = this query may attend to
this key, as in ``torch.nn.functional.scaled_dot_product_attention``; against
per-head scores (B, H, Tq, Tk), a 3-D mask is (B, Tq, Tk).

A query row whose keys are all masked has nothing to attend to. Here its
attention weights are all zero and its output is the zero vector (no NaN, no
silent uniform average), which is also what PyTorch's fused kernel returns on
the CPU.

:func:`attend_heads` is the one attention kernel of every multi-head module
(:class:`MultiHeadAttention` here, :class:`helpers.gpt.CausalSelfAttention`):
PyTorch's fused kernel when the weights are not asked for,
:func:`scaled_dot_product_attention` written out when they are, a boolean mask
or an additive bias, grouped key/value heads read without copying them.
(:func:`helpers.efficient.tiled_attention` is another algorithm, chapter 13's.)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers import _validate as check
from helpers._validate import mask_for_scores

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "SingleHeadAttention",
    "PerHeadMultiHeadAttention",
    "split_heads",
    "merge_heads",
    "attend_heads",
]


# -------------------------------------------------------------------- attention


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    *,
    bias: Tensor | None = None,
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
    by the batch as (1, H, Tq, Tk). ``bias``: a float tensor added to the
    scores, broadcast from the right as PyTorch does (ALiBi's distance penalty
    (H, Tq, Tk), where -inf blocks a key). A row with no key allowed gets
    all-zero weights and a zero output.

    ``dropout_p`` zeroes attention weights with that probability and rescales
    the survivors by 1 / (1 - dropout_p) (no renormalization), only when
    ``training`` is True; the returned weights are the ones that multiplied
    ``v``. ``generator`` makes the dropout pattern reproducible. ``scale``, a
    positive number, replaces 1 / sqrt(d). ``validate=False`` skips the input
    checks, for callers that have checked their inputs already.
    """
    if validate:
        check.attention_arguments(
            q, k, v, mask, dropout_p, training, scale, bias=bias
        )
    # a 3-D mask (B, Tq, Tk) against 4-D q: (B, 1, Tq, Tk), shared by heads
    mask = mask_for_scores(mask, q.ndim)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    if bias is not None:  # e.g. ALiBi's distance penalty
        scores = scores + bias
    if mask is not None:
        # -inf (not -1e9): exactly zero weight in every dtype, float16 included.
        scores = scores.masked_fill(~mask, float("-inf"))
    has_key = None
    if mask is not None or bias is not None:
        # A row with no allowed key would be softmax(-inf, ..., -inf) = NaN:
        # give it finite scores here and zero its weights after the softmax.
        has_key = (scores != float("-inf")).any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~has_key, 0.0)
    weights = scores.softmax(dim=-1)
    if has_key is not None:
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
    check.head_width(d_model, num_heads)
    d_head = d_model // num_heads
    return x.view(batch, length, num_heads, d_head).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, d_head) -> (B, T, H * d_head): the inverse of
    :func:`split_heads`."""
    batch, num_heads, length, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * d_head)


def attend_heads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The attention of every multi-head module: the heads' outputs (B, H, Tq,
    dv) and, if ``need_weights``, their weights (B, H, Tq, Tk), else None.

    q (B, H, Tq, d); k and v (B, H_kv, Tk, d) with ``H_kv`` dividing ``H``:
    query head ``h`` reads key/value head ``h // (H / H_kv)`` as it is, never
    copied (grouped-query attention; ``H_kv = H`` is plain multi-head
    attention). ``mask`` and ``bias`` as in :func:`scaled_dot_product_attention`
    (a boolean mask, a 3-D one shared by the heads; an additive float bias). A
    query with no key allowed gets a zero output. Without ``need_weights``,
    PyTorch's fused kernel (``F.scaled_dot_product_attention``) computes it;
    with it, :func:`scaled_dot_product_attention`, written out. ``dropout_p``
    drops weights (pass 0 in eval mode). The arguments are not checked: the
    module that calls it has checked its own.
    """
    batch, num_heads, length, _ = q.shape
    mask = mask_for_scores(mask, 4)  # a 3-D mask (B, Tq, Tk): shared by heads
    group = num_heads // k.shape[1]  # query heads per key/value head
    if group > 1:  # each group of query heads folded onto its key/value head
        q = _fold_groups(q, group, length)
        mask = _fold_groups(mask, group, length)
        bias = _fold_groups(bias, group, length)
    if need_weights:  # written out, to return the weights
        heads, weights = scaled_dot_product_attention(
            q, k, v, mask, dropout_p, bias=bias, validate=False
        )
        weights = weights.reshape(batch, num_heads, length, -1)
    else:  # PyTorch's fused kernel
        if mask is not None and bias is not None:  # one additive mask
            bias, mask = bias.masked_fill(~mask, float("-inf")), None
        attn_mask = mask if bias is None else bias
        heads = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p
        )
        # a row with no key allowed: a zero output, as the package's rule says
        if mask is not None:
            heads = heads.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        elif bias is not None:
            blocked = (bias == float("-inf")).all(dim=-1, keepdim=True)
            heads = heads.masked_fill(blocked, 0.0)
        weights = None
    return heads.reshape(batch, num_heads, length, -1), weights


def _fold_groups(x: Tensor | None, group: int, length: int) -> Tensor | None:
    """Queries (B, H, T, d), or a mask or bias that broadcasts to the scores
    (B, H, T, Tk), as (B, H_kv, group * T, .): each key/value head's group of
    query heads folded into its rows.

    Query head ``h = j * group + g`` reads key/value head ``j``; folded, its
    row ``t`` is row ``g * T + t`` of head ``j``, so every query of a group
    reads its one key/value head as it is: copying the heads ``group`` times
    (``repeat_interleave``) would copy the whole cache at every decoding step.
    A mask or bias shared by the heads has its rows repeated ``group`` times
    (or kept, if shared by the rows too).
    """
    if x is None:
        return None
    x = x.reshape((1,) * (4 - x.ndim) + tuple(x.shape))  # 4-D
    first, heads, rows, width = x.shape
    if heads == 1:  # the same for every head
        return x if rows == 1 else x.repeat(1, 1, group, 1)
    x = x.expand(first, heads, length, width)
    return x.reshape(first, heads // group, group * length, width)


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
        check.head_width(d_model, num_heads)
        check.probability("dropout", dropout, check.DROPOUT_HINT)
        self.d_model, self.num_heads = d_model, num_heads
        self.d_head, self.dropout = d_model // num_heads, dropout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None, return_attention=False):
        check.multi_head_inputs(self, query, key, value, mask)
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
        # a 3-D mask (B, Tq, Tk) is read as mask[:, None], shared by the heads
        heads, weights = attend_heads(
            q, k, v, mask, dropout_p=dropout_p, need_weights=return_attention
        )
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
        check.head_width(d_model, num_heads)
        d_head = d_model // num_heads
        self.d_model, self.num_heads = d_model, num_heads
        self.heads = nn.ModuleList(
            SingleHeadAttention(d_model, d_head, bias) for _ in range(num_heads)
        )
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None, return_attention=False):
        check.multi_head_inputs(self, query, key, value, mask)
        outputs, weights = [], []
        for h, head in enumerate(self.heads):
            # a 2-D or 3-D mask serves every head; a 4-D one has a head axis
            head_mask = mask
            if mask is not None and mask.ndim == 4:
                head_mask = mask[:, min(h, mask.shape[1] - 1)]
            output, weight = head(query, key, value, head_mask)
            outputs.append(output)
            weights.append(weight)
        output = self.out_proj(torch.cat(outputs, dim=-1))
        return (
            (output, torch.stack(weights, dim=1))
            if return_attention
            else output
        )
