"""Long sequences: what attention costs, and three ways to make it cheaper
(chapter 13).

- :func:`online_softmax_update` and :func:`tiled_attention`: the streaming
  softmax and the forward pass of tiled ("flash") attention, a block of queries
  and a block of keys at a time, so that no (Tq, Tk) tensor ever exists;
- :func:`receptive_field`: how far a token can see through a stack of windowed
  layers of local attention (its masks, :func:`position_mask` and
  :func:`sliding_window_mask`, live in :mod:`helpers.masks` with every mask
  rule, and are importable from here too);
- :func:`attention_cost` and :func:`kv_cache_bytes`: the arithmetic of
  attention's FLOPs and memory, and of a key/value cache, computed from shapes
  alone;
- :func:`median_seconds`: a small, honest timer for the chapter's measurements,
  and what the chapter measures with it: :func:`kernel_costs` (the time and
  memory of attention kernels such as :func:`naive_attention`) and
  :func:`tokens_per_second` (generation, with and without a cache).

Shapes: ``B`` batch, ``H`` heads, ``Tq`` queries, ``Tk`` keys, ``d`` query/key
width, ``dv`` value width. Masks follow the package's convention: boolean, True
= may attend.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import pandas as pd
import torch
from torch import Tensor

from helpers import _validate as check
from helpers.analysis import peak_cpu_bytes
from helpers.attention import scaled_dot_product_attention
from helpers.masks import position_mask

__all__ = [
    "online_softmax_update",
    "tiled_attention",
    "receptive_field",
    "attention_cost",
    "kv_cache_bytes",
    "median_seconds",
    "naive_attention",
    "kernel_costs",
    "tokens_per_second",
]


# --------------------------------------------------------------- online softmax


def online_softmax_update(
    running_max: Tensor,
    running_sum: Tensor,
    accumulator: Tensor,
    scores: Tensor,
    values: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Fold one block of keys into a streaming softmax-weighted sum.

    State, per query: ``running_max`` m (..., Tq, 1), the largest score seen so
    far; ``running_sum`` l (..., Tq, 1), the sum of exp(score - m) so far;
    ``accumulator`` (..., Tq, dv), the sum of exp(score - m) * value so far. The
    new block brings ``scores`` (..., Tq, Bk), with -inf where a key is masked,
    and its ``values`` (..., Bk, dv). When the maximum grows, everything summed
    so far is rescaled by exp(m_old - m_new). After the last block,
    ``accumulator / running_sum`` is softmax(scores) @ values over all the keys.
    Start from m = -inf, l = 0, accumulator = 0.
    """
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    # A row that has seen only masked keys keeps m = -inf; subtract 0 there, not
    # -inf (exp(-inf - (-inf)) would be NaN): its sum and accumulator stay zero.
    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
    rescale = torch.exp(running_max - shift)  # exp(m_old - m_new) <= 1
    weights = torch.exp(scores - shift)  # (..., Tq, Bk), unnormalized
    running_sum = running_sum * rescale + weights.sum(dim=-1, keepdim=True)
    accumulator = accumulator * rescale + weights @ values
    return new_max, running_sum, accumulator


def _allowed(
    queries: Tensor, keys: Tensor, causal: bool, window: int | None
) -> Tensor | None:
    """The (Bq, Bk) mask of a tile from its query and key positions; None if all
    allowed."""
    allowed = position_mask(queries, keys, causal=causal, window=window)
    return None if bool(allowed.all()) else allowed


def _check_tiled(q, k, v, causal, window, block_size, scale) -> None:
    check.attention_arguments(q, k, v, None, 0.0, False, scale)
    check.boolean("causal", causal)
    check.positive_int("block_size", block_size)
    if window is not None:
        check.positive_int("window", window)


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    block_size: int = 128,
    scale: float | None = None,
) -> Tensor:
    """softmax(q k^T / sqrt(d)) v, tile by tile: FlashAttention's forward pass.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (..., Tq, dv). Queries
    and keys go in blocks of ``block_size``; each (query block, key block) tile
    of scores is folded into the running state with
    :func:`online_softmax_update`, so memory holds one tile of
    (block_size, block_size) scores, never the (Tq, Tk) matrix. ``causal``:
    query i sees keys j <= i (queries and keys share positions 0, 1, ...);
    ``window``: it sees only keys less than ``window`` positions away
    (j > i - window when causal, |i - j| < window otherwise). Tiles with no
    allowed key are skipped, which is where the causal and the windowed
    versions save time. A query with no allowed key gets a zero output, as in
    :func:`helpers.attention.scaled_dot_product_attention`.

    With fewer queries than keys (``Tq < Tk``), the queries are the *last*
    ``Tq`` positions: query i sits at position ``i + Tk - Tq``, the mask aligned
    to the bottom right of the (Tq, Tk) matrix, as a decoding step with a cache
    needs (its one query reads every key) and as FlashAttention 2 does.
    ``F.scaled_dot_product_attention(is_causal=True)`` aligns it to the top left
    instead (its one query would read key 0 only);
    ``torch.nn.attention.bias.causal_lower_right`` is its bottom-right mask.
    With more queries than keys the first ``Tq - Tk`` queries see no key.
    """
    _check_tiled(q, k, v, causal, window, block_size, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # keys at 0 .. Tk - 1, queries at the last Tq positions (bottom right)
    k_positions = torch.arange(k.shape[-2], device=q.device)
    q_positions = (
        k.shape[-2] - q.shape[-2] + torch.arange(q.shape[-2], device=q.device)
    )
    outputs = []
    for q_start in range(0, q.shape[-2], block_size):
        q_block = q[..., q_start : q_start + block_size, :] * scale
        q_pos = q_positions[q_start : q_start + q_block.shape[-2]]
        running_max = q_block.new_full((*q_block.shape[:-1], 1), float("-inf"))
        running_sum = q_block.new_zeros((*q_block.shape[:-1], 1))
        accumulator = q_block.new_zeros((*q_block.shape[:-1], v.shape[-1]))
        for k_start in range(0, k.shape[-2], block_size):
            k_pos = k_positions[k_start : k_start + block_size]
            allowed = _allowed(q_pos, k_pos, causal, window)
            if allowed is not None and not allowed.any():
                continue  # the whole tile is masked: skip its work entirely
            scores = q_block @ k[
                ..., k_start : k_start + block_size, :
            ].transpose(-2, -1)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            running_max, running_sum, accumulator = online_softmax_update(
                running_max, running_sum, accumulator, scores,
                v[..., k_start : k_start + block_size, :],
            )  # fmt: skip
        # A query that saw no key has sum 0, accumulator 0: output 0, not NaN.
        outputs.append(
            accumulator / running_sum.clamp(min=torch.finfo(q.dtype).tiny)
        )
    return torch.cat(outputs, dim=-2)


# -------------------------------------------------------------- local attention


def receptive_field(window: int, num_layers: int) -> int:
    """How many positions one token can draw on after ``num_layers`` causal
    windowed layers.

    Each layer lets a token read ``window - 1`` positions back, and a token it
    reads has already read ``window - 1`` further back in the layer below:
    ``num_layers * (window - 1) + 1`` positions, counting the token itself.
    """
    check.positive_int("window", window)
    check.positive_int("num_layers", num_layers)
    return num_layers * (window - 1) + 1


# ------------------------------------------------------------------- arithmetic


def _positive_ints(**sizes) -> None:
    for name, value in sizes.items():
        check.positive_int(name, value)


def attention_cost(
    seq_len: int,
    num_heads: int,
    d_head: int,
    *,
    batch_size: int = 1,
    bytes_per_element: int = 2,
    causal: bool = False,
) -> dict[str, float]:
    """FLOPs and bytes of one attention call, from its shapes (nothing is run).

    ``flops``: the two matrix products, q k^T and weights @ v, at 2 FLOPs per
    multiply-add: ``4 B H T^2 d_head`` (half of it with ``causal``: the ideal,
    which a kernel that skips masked tiles approaches, computing ``(n + 1) /
    2n`` of ``n x n`` tiles). ``weights_bytes``: the (B, H, T, T) matrix a naive
    implementation materializes. ``qkvo_bytes``: queries, keys, values and
    output, ``4 B H T d_head`` elements, all that a tiled kernel must hold.
    Softmax and scaling (O(T^2) too, but cheap) are left out.
    """
    _positive_ints(seq_len=seq_len, num_heads=num_heads, d_head=d_head, batch_size=batch_size,
                   bytes_per_element=bytes_per_element)  # fmt: skip
    check.boolean("causal", causal)
    pairs = batch_size * num_heads * seq_len * seq_len
    return {
        "flops": 4 * pairs * d_head / (2 if causal else 1),
        "weights_bytes": pairs * bytes_per_element,
        "qkvo_bytes": 4
        * batch_size
        * num_heads
        * seq_len
        * d_head
        * bytes_per_element,
    }


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    d_head: int,
    seq_len: int,
    *,
    batch_size: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes of a key/value cache: ``2 * layers * kv_heads * d_head * T * B *
    bytes``.

    The 2 is one key and one value per cached head; only the key/value heads
    count, so grouped-query attention (fewer key/value heads than query heads)
    shrinks the cache by ``num_heads / num_kv_heads``. ``bytes_per_element``: 2
    for float16/bfloat16, 4 for float32.
    """
    _positive_ints(
        num_layers=num_layers,
        num_kv_heads=num_kv_heads,
        d_head=d_head,
        seq_len=seq_len,
        batch_size=batch_size,
        bytes_per_element=bytes_per_element,
    )
    return (
        2
        * num_layers
        * num_kv_heads
        * d_head
        * seq_len
        * batch_size
        * bytes_per_element
    )


# ----------------------------------------------------------------------- timing


def median_seconds(
    fn: Callable, *args, repeats: int = 5, warmup_calls: int = 1, **kwargs
) -> float:
    """The median wall time of ``fn(*args, **kwargs)`` over ``repeats`` calls,
    in seconds.

    ``warmup_calls`` calls run first and are not timed (first calls pay for allocation
    and dispatch). The median, not the mean: one call slowed by another process
    on a shared machine does not move it.
    """
    check.function("fn", fn)
    check.positive_int("repeats", repeats)
    check.non_negative_int("warmup_calls", warmup_calls)
    for _ in range(warmup_calls):
        fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def naive_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Chapter 3's attention as a kernel to measure: the output of
    :func:`helpers.attention.scaled_dot_product_attention`, which stores the
    ``(Tq, Tk)`` scores and weights, without its argument checks."""
    return scaled_dot_product_attention(q, k, v, validate=False)[0]


def kernel_costs(
    kernels: dict[str, Callable],
    lengths,
    num_heads: int,
    d_head: int,
    repeats: int = 3,
) -> pd.DataFrame:
    """Median milliseconds and peak MiB of each kernel at each length.

    ``kernels`` maps a name to a function ``(q, k, v) -> output``; at each
    length ``T`` of ``lengths`` every kernel gets the same random ``q``, ``k``,
    ``v`` of shape ``(1, num_heads, T, d_head)``, under inference mode. Time:
    :func:`median_seconds` over ``repeats`` calls; memory:
    :func:`helpers.analysis.peak_cpu_bytes`, the most the call held allocated
    at once. One row per length and kernel: ``T``, ``kernel``, ``ms``, ``peak
    MiB``. Chapter 13 and ``scripts/margins.py long`` measure with it.
    """
    rows = []
    with torch.inference_mode():
        for T in lengths:
            q, k, v = (torch.randn(1, num_heads, T, d_head) for _ in range(3))
            for name, kernel in kernels.items():
                seconds = median_seconds(kernel, q, k, v, repeats=repeats)
                peak = peak_cpu_bytes(kernel, q, k, v) / 2**20
                rows.append({"T": T, "kernel": name, "ms": 1e3 * seconds,
                             "peak MiB": peak})  # fmt: skip
    return pd.DataFrame(rows)


def tokens_per_second(
    model,
    prompt: Tensor,
    new_tokens: int,
    use_cache: bool = True,
    repeats: int = 3,
    warmup_calls: int = 1,
) -> float:
    """How fast ``model.generate`` continues ``prompt`` greedily by
    ``new_tokens`` tokens, with its key/value cache or without it (every step
    recomputing the whole prefix): tokens per second, from the median of
    ``repeats`` timed calls after ``warmup_calls`` untimed ones
    (:func:`median_seconds`). Chapter 13 and ``scripts/margins.py long``
    measure the cache's speed-up with it.
    """
    seconds = median_seconds(model.generate, prompt, new_tokens, greedy=True,
                             use_cache=use_cache, repeats=repeats,
                             warmup_calls=warmup_calls)  # fmt: skip
    return new_tokens / seconds
