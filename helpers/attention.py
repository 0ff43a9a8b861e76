"""Attention: scaled dot-product attention, masks and multi-head attention.

Chapters 2 (masking), 3 (scaled dot-product attention) and 4 (multi-head attention) build
these pieces from scratch; this module is the canonical version the later chapters import.

Shapes: ``B`` batch, ``H`` heads, ``Tq`` query length, ``Tk`` key/value length, ``D`` model
width (``d_model``), ``d_head = D / H``.

Mask convention (the one convention of the whole package): a **boolean** tensor where
``True`` means "this query may attend to this key", as in
``torch.nn.functional.scaled_dot_product_attention``. (``torch.nn.MultiheadAttention`` uses
the opposite: its ``key_padding_mask`` and boolean ``attn_mask`` mean True = ignore; invert
with ``~mask`` when talking to it.) Against per-head scores (B, H, Tq, Tk), a 3-D mask is
always (B, Tq, Tk), one mask per sequence shared by the heads. Float masks are refused: a
0/1 float mask and an additive 0/-inf mask look alike but mean opposite things, so the
caller says which one it is.

A query row whose keys are all masked has nothing to attend to. Here its attention weights
are all zero and its output is the zero vector (no NaN, no silent uniform average), which is
also what PyTorch's fused kernel returns on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers._validate import check_positive_int, check_probability

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "additive_mask",
    "MultiHeadAttention",
    "SingleHeadAttention",
    "PerHeadMultiHeadAttention",
    "check_attention",
    "check_sliding_window_mask",
]


# --------------------------------------------------------------------------- validation


def _check_tensor(name: str, value, min_ndim: int = 1) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {value.dtype}; "
            f"convert it with {name}.float()"
        )
    if value.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {tuple(value.shape)}"
        )
    return value


def _check_same_dtype(**tensors: Tensor) -> None:
    dtypes = [tensor.dtype for tensor in tensors.values()]
    if len(set(dtypes)) > 1:
        names = ", ".join(tensors)
        got = ", ".join(str(dtype) for dtype in dtypes)
        first = next(iter(tensors))
        raise TypeError(
            f"{names} must share a dtype, got {got}; convert them with .to({first}.dtype)"
        )


_check_positive_int = check_positive_int


def _check_sizes(d_model, num_heads) -> int:
    """Validate a multi-head layer's sizes; return d_head = d_model // num_heads."""
    _check_positive_int("d_model", d_model)
    _check_positive_int("num_heads", num_heads)
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; each head gets "
            f"d_model / num_heads features, so pick num_heads among the divisors of d_model"
        )
    return d_model // num_heads


def _check_scale(scale) -> float | None:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(
            f"scale must be a positive number or None, got {type(scale).__name__} ({scale!r}); "
            "it multiplies q @ k^T, and None means 1 / sqrt(d)"
        )
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(
            f"scale must be a positive finite number, got {scale}; it multiplies q @ k^T "
            "(0 would make every weight uniform, a negative scale would favour the least "
            "similar keys), and None means 1 / sqrt(d)"
        )
    return float(scale)


def _check_dropout(dropout_p) -> float:
    return check_probability(
        "dropout probability",
        dropout_p,
        "0 turns dropout off, and 1 would drop every attention weight",
    )
    return float(dropout_p)


def _check_mask_dtype(mask) -> Tensor:
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a boolean torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean (True = may attend), got dtype {mask.dtype}. "
            "For a 0/1 indicator mask pass mask.bool(); for an additive mask of 0 and -inf "
            "pass (mask == 0)"
        )
    return mask


def _broadcast_mask(mask: Tensor, scores_shape: torch.Size) -> None:
    """Raise a ValueError unless ``mask`` broadcasts to ``scores_shape`` (..., Tq, Tk)."""
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to the attention scores of "
            f"shape {tuple(scores_shape)} (..., Tq, Tk). Use a (Tq, Tk) mask, or add size-1 "
            "dimensions where it is shared: with per-head scores (B, H, Tq, Tk) a 3-D mask is "
            "read as (B, Tq, Tk) and used as mask[:, None]; write a per-head mask shared by "
            "the batch as (1, H, Tq, Tk)"
        )


# --------------------------------------------------------------------------- attention


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
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d) masked) v, returning the output and the attention weights.

    Shapes: q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); the leading dimensions broadcast.
    Returns output (..., Tq, dv) and weights (..., Tq, Tk).

    ``mask``: boolean, True = may attend, broadcastable to (..., Tq, Tk). One exception to
    plain broadcasting: with 4-D q, k, v (B, H, T, d), a **3-D mask is read as (B, Tq, Tk)**,
    one mask per sequence shared by the heads, and used as ``mask[:, None]`` (B, 1, Tq, Tk),
    as :class:`MultiHeadAttention` does. (``F.scaled_dot_product_attention`` aligns shapes
    from the right instead, so there a (B, Tq, Tk) mask is lined up with the heads: an error
    when B != H, and silently wrong when B == H.) Write a per-head mask shared by the batch
    as (1, H, Tq, Tk). A row with no key allowed gets all-zero weights and a zero output.

    ``dropout_p`` zeroes attention weights with that probability and rescales the survivors
    by 1 / (1 - dropout_p) (no renormalization), only when ``training`` is True; the returned
    weights are the ones that multiplied ``v``. ``generator`` makes the dropout pattern
    reproducible. ``scale``, a positive number, replaces 1 / sqrt(d).
    """
    q = _check_tensor("q", q, min_ndim=2)
    k = _check_tensor("k", k, min_ndim=2)
    v = _check_tensor("v", v, min_ndim=2)
    _check_same_dtype(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same width d, got q {tuple(q.shape)} and "
            f"k {tuple(k.shape)}; project them to a common width first"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"keys and values must have the same length Tk, got k {tuple(k.shape)} and "
            f"v {tuple(v.shape)}; each key needs exactly one value"
        )
    try:
        batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and "
            f"v {tuple(v.shape)} do not broadcast together"
        ) from None
    dropout_p = _check_dropout(dropout_p)
    if not isinstance(training, bool):
        raise TypeError(f"training must be a bool, got {training!r}")
    scale = _check_scale(scale)

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Tq, Tk)
    scores_shape = torch.Size((*batch_shape, q.shape[-2], k.shape[-2]))
    if mask is not None:
        mask = _check_mask_dtype(mask)
        if mask.ndim == 3 and len(scores_shape) == 4:
            # (B, Tq, Tk) against (B, H, Tq, Tk): one mask per sequence, shared by the heads
            # (as in MultiHeadAttention), not lined up with H by right-aligned broadcasting.
            mask = mask[:, None]
        _broadcast_mask(mask, scores_shape)
        # -inf (not -1e9): exactly zero weight in every dtype, float16 included.
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row with no allowed key would be softmax(-inf, ..., -inf) = NaN: give it finite
        # scores here and zero its weights after the softmax.
        has_key = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~has_key, 0.0)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~has_key, 0.0)
    if training and dropout_p > 0.0:
        keep = torch.rand(
            weights.shape, generator=generator, device=weights.device, dtype=weights.dtype
        )
        weights = weights * (keep >= dropout_p) / (1.0 - dropout_p)
    return weights @ v, weights


# --------------------------------------------------------------------------- masks


def causal_mask(T: int, device: torch.device | str | None = None) -> Tensor:
    """The (T, T) boolean mask of causal attention: query t may attend to keys 0..t.

    True on and below the diagonal (the package's convention: True = may attend).
    """
    if isinstance(T, bool) or not isinstance(T, int):
        raise TypeError(f"T must be an int (the sequence length), got {T!r}")
    if T < 1:
        raise ValueError(f"T must be a positive sequence length, got {T}")
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    """A key-padding mask from sequence lengths, shape (B, 1, 1, Tk) with Tk = max_len.

    Entry [b, 0, 0, j] is True when key j is a real token of sequence b (j < lengths[b]).
    The two size-1 dimensions broadcast over heads and queries, so the same mask serves
    self-attention (Tq = Tk) and cross-attention (any Tq); ``mask[:, 0]`` is the
    (B, 1, Tk) form for 3-D scores. ``max_len`` defaults to the longest length.
    """
    if not isinstance(lengths, Tensor):
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
            raise TypeError(
                f"lengths must be a 1-D integer tensor or a list of ints, got {lengths!r}"
            )
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
            raise TypeError(f"lengths must contain ints, got {list(lengths)!r}")
        lengths = torch.tensor(list(lengths), dtype=torch.long)
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.is_complex():
        raise TypeError(
            f"lengths must be an integer tensor, got dtype {lengths.dtype}; use lengths.long()"
        )
    if lengths.ndim != 1 or lengths.numel() == 0:
        raise ValueError(
            f"lengths must be a non-empty 1-D tensor (one length per sequence), got shape "
            f"{tuple(lengths.shape)}"
        )
    if (lengths < 0).any():
        raise ValueError(f"lengths must be non-negative, got {lengths.tolist()}")
    longest = int(lengths.max())
    if max_len is None:
        max_len = longest
    elif isinstance(max_len, bool) or not isinstance(max_len, int):
        raise TypeError(f"max_len must be an int or None, got {max_len!r}")
    if max_len < 1 or max_len < longest:
        raise ValueError(
            f"max_len={max_len} must be positive and at least the longest length {longest}; "
            "leave it as None to use the longest length"
        )
    positions = torch.arange(max_len, device=lengths.device)
    return (positions < lengths[:, None])[:, None, None, :]


def additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The additive form of a boolean mask: 0 where True (may attend), -inf where False.

    Adding it to the scores before the softmax is the same as masking them; this is the
    float ``attn_mask`` that ``F.scaled_dot_product_attention`` accepts.
    """
    mask = _check_mask_dtype(mask)
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def _expand_mask(mask: Tensor | None) -> Tensor | None:
    """A 2-D (Tq, Tk), 3-D (B, Tq, Tk) or 4-D (B, H, Tq, Tk) mask as a 4-D one."""
    if mask is None:
        return None
    mask = _check_mask_dtype(mask)
    if mask.ndim == 2:
        return mask
    if mask.ndim == 3:
        return mask[:, None]  # shared by every head
    if mask.ndim == 4:
        return mask
    raise ValueError(
        f"mask must be 2-D (Tq, Tk), 3-D (B, Tq, Tk) or 4-D (B, H, Tq, Tk), got shape "
        f"{tuple(mask.shape)}"
    )


# --------------------------------------------------------------------------- multi-head


def _check_qkv(query, key, value, d_model: int) -> None:
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        _check_tensor(name, tensor)
        if tensor.ndim == 2 and tensor.shape[-1] == d_model:
            raise ValueError(
                f"{name} must have shape (B, T, d_model={d_model}), got {tuple(tensor.shape)}; "
                "add a batch dimension with x[None] if you have a single sequence"
            )
        if tensor.ndim != 3 or tensor.shape[-1] != d_model:
            raise ValueError(
                f"{name} must have shape (B, T, d_model={d_model}), got {tuple(tensor.shape)}; "
                f"its last dimension is the model width, so project it to {d_model} features "
                "first (or build the module with the width of your inputs)"
            )
    _check_same_dtype(query=query, key=key, value=value)
    if key.shape[1] != value.shape[1]:
        raise ValueError(
            f"key and value must have the same length Tk, got key {tuple(key.shape)} and "
            f"value {tuple(value.shape)}"
        )
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(
            f"query, key and value must have the same batch size, got {query.shape[0]}, "
            f"{key.shape[0]} and {value.shape[0]}"
        )


class MultiHeadAttention(nn.Module):
    """Multi-head attention with one fused projection for queries, keys and values.

    ``qkv_proj.weight`` (3D, D) stacks W_q, W_k and W_v (the layout of
    ``torch.nn.MultiheadAttention.in_proj_weight``); head h uses rows h*d_head:(h+1)*d_head
    of each block. Self-attention (query is key is value) projects with one matmul;
    cross-attention (Tq != Tk allowed) slices the fused weight.

    forward(query (B, Tq, D), key (B, Tk, D), value (B, Tk, D), mask=None,
    return_attention=False) -> output (B, Tq, D), or (output, weights (B, H, Tq, Tk)).
    ``mask``: boolean, True = may attend; (Tq, Tk), (B, Tq, Tk) or (B, H, Tq, Tk), size-1
    dimensions broadcast. Attention dropout acts in training mode only.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        self.d_head = _check_sizes(d_model, num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dropout = _check_dropout(dropout)
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        if query is key and key is value:  # self-attention: one matmul
            return self.qkv_proj(query).split(self.d_model, dim=-1)
        weights = self.qkv_proj.weight.split(self.d_model, dim=0)
        biases = (
            (None,) * 3 if self.qkv_proj.bias is None else self.qkv_proj.bias.split(self.d_model)
        )
        inputs = (query, key, value)
        return tuple(F.linear(x, w, b) for x, w, b in zip(inputs, weights, biases, strict=True))

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape  # (B, T, D) -> (B, H, T, d_head)
        return x.view(batch, length, self.num_heads, self.d_head).transpose(1, 2)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        _check_qkv(query, key, value, self.d_model)
        batch, q_len, k_len = query.shape[0], query.shape[1], key.shape[1]
        mask = _expand_mask(mask)
        if mask is not None:
            _broadcast_mask(mask, torch.Size((batch, self.num_heads, q_len, k_len)))
        q, k, v = (self._split_heads(x) for x in self._project(query, key, value))
        dropout_p = self.dropout if self.training else 0.0
        if return_attention:
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_p, training=self.training
            )
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            if mask is not None:  # the package's rule for rows with no key, on every torch
                heads = heads.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        # (B, H, Tq, d_head) -> (B, Tq, H * d_head)
        output = self.out_proj(heads.transpose(1, 2).reshape(batch, q_len, self.d_model))
        return (output, weights) if return_attention else output

    @torch.no_grad()
    def load_from_torch(self, torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention`` of the same size; return self.

        Its ``in_proj_weight`` (3D, D) has the layout of ``qkv_proj.weight``; biases must
        exist in both or in neither. Only weights are copied: for the two modules to return
        the same outputs, build ``torch_mha`` with ``batch_first=True`` (otherwise it reads
        (T, B, D) inputs), give both the same dropout (or compare them in ``eval()`` mode,
        where dropout is off), and pass it the inverted mask ``~mask`` (True = ignore there).
        """
        if not isinstance(torch_mha, nn.MultiheadAttention):
            raise TypeError(f"expected torch.nn.MultiheadAttention, got {type(torch_mha).__name__}")
        if torch_mha.in_proj_weight is None:
            raise ValueError("torch_mha has separate q/k/v widths (kdim/vdim); it cannot be fused")
        if (torch_mha.embed_dim, torch_mha.num_heads) != (self.d_model, self.num_heads):
            raise ValueError(
                f"size mismatch: torch_mha has embed_dim={torch_mha.embed_dim}, num_heads="
                f"{torch_mha.num_heads}; this module has d_model={self.d_model}, num_heads="
                f"{self.num_heads}"
            )
        if (torch_mha.in_proj_bias is None) != (self.qkv_proj.bias is None):
            raise ValueError("bias mismatch: build both modules with the same bias setting")
        self.qkv_proj.weight.copy_(torch_mha.in_proj_weight)
        self.out_proj.weight.copy_(torch_mha.out_proj.weight)
        if self.qkv_proj.bias is not None:
            self.qkv_proj.bias.copy_(torch_mha.in_proj_bias)
            self.out_proj.bias.copy_(torch_mha.out_proj.bias)
        return self


class SingleHeadAttention(nn.Module):
    """One attention head with its own projections: (B, T, D) inputs -> (B, Tq, d_head).

    forward(query, key, value, mask=None) -> (output (B, Tq, d_head), weights (B, Tq, Tk));
    ``mask`` boolean, True = may attend, broadcastable to (B, Tq, Tk).
    """

    def __init__(self, d_model: int, d_head: int, bias: bool = False):
        super().__init__()
        _check_positive_int("d_model", d_model)
        _check_positive_int("d_head", d_head)
        self.query = nn.Linear(d_model, d_head, bias=bias)
        self.key = nn.Linear(d_model, d_head, bias=bias)
        self.value = nn.Linear(d_model, d_head, bias=bias)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        # Queries from `query`, keys from `key`: the order source 003 swaps.
        return scaled_dot_product_attention(
            self.query(query), self.key(key), self.value(value), mask
        )


class PerHeadMultiHeadAttention(nn.Module):
    """Multi-head attention as a list of single-head modules, concatenated and projected.

    Computes the same function as :class:`MultiHeadAttention` (``fused()`` returns one with
    the same weights); slower, but each head is a module you can hold. Same forward
    signature, shapes and mask convention as :class:`MultiHeadAttention`; no dropout.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = False):
        super().__init__()
        d_head = _check_sizes(d_model, num_heads)
        self.d_model, self.num_heads = d_model, num_heads
        self.heads = nn.ModuleList(
            SingleHeadAttention(d_model, d_head, bias) for _ in range(num_heads)
        )
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        _check_qkv(query, key, value, self.d_model)
        mask = _expand_mask(mask)
        if mask is not None:
            shape = (query.shape[0], self.num_heads, query.shape[1], key.shape[1])
            _broadcast_mask(mask, torch.Size(shape))
        outputs, weights = [], []
        for h, head in enumerate(self.heads):
            head_mask = None
            if mask is not None:
                head_mask = mask if mask.ndim == 2 else mask[:, h if mask.shape[1] > 1 else 0]
            output, weight = head(query, key, value, head_mask)
            outputs.append(output)
            weights.append(weight)
        output = self.out_proj(torch.cat(outputs, dim=-1))
        return (output, torch.stack(weights, dim=1)) if return_attention else output

    @torch.no_grad()
    def fused(self) -> MultiHeadAttention:
        """A :class:`MultiHeadAttention` computing the same function (weights copied)."""
        bias = self.out_proj.bias is not None
        fused = MultiHeadAttention(self.d_model, self.num_heads, bias=bias)
        for block, name in enumerate(("query", "key", "value")):
            rows = slice(block * self.d_model, (block + 1) * self.d_model)
            layers = [getattr(head, name) for head in self.heads]
            fused.qkv_proj.weight[rows] = torch.cat([layer.weight for layer in layers])
            if bias:
                fused.qkv_proj.bias[rows] = torch.cat([layer.bias for layer in layers])
        fused.out_proj.load_state_dict(self.out_proj.state_dict())
        return fused


# --------------------------------------------------------------------------- exercise checkers


def _reference_attention(q: Tensor, k: Tensor, v: Tensor, dim: int = -1, scaled: bool = True):
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scaled else 1.0)
    return scores.softmax(dim=dim) @ v


def check_attention(fn) -> str:
    """Check a reader's ``fn(q, k, v)`` (returning the output, or (output, weights)).

    Runs it on seeded inputs: Tq == Tk (where swapped queries and keys still run), Tq != Tk,
    then with batch dimensions; returns a line starting with "Correct:" or raises
    AssertionError naming the likely mistake.
    """
    if not callable(fn):
        raise TypeError(f"pass your attention function itself, got {type(fn).__name__}")
    gen = torch.Generator().manual_seed(0)
    cases = (((4, 4), (4, 4), 3), ((3, 4), (5, 4), 2), ((2, 3, 4, 8), (2, 3, 6, 8), 5))
    for shape_q, shape_k, dv in cases:
        q, k = torch.randn(*shape_q, generator=gen), torch.randn(*shape_k, generator=gen)
        v = torch.randn(*shape_k[:-1], dv, generator=gen)
        batched = q.ndim > 2
        try:
            result = fn(q, k, v)
        except Exception as error:
            hint = (
                "it works without batch dimensions, so use k.transpose(-2, -1), not k.T, "
                "so that batch dimensions pass through"
                if batched
                else "check the shapes: scores q @ k^T are (Tq, Tk), and weights @ v is (Tq, dv)"
            )
            raise AssertionError(
                f"your function raised {type(error).__name__}: {error} on q {tuple(q.shape)}, "
                f"k {tuple(k.shape)}, v {tuple(v.shape)}; {hint}"
            ) from None
        output = result[0] if isinstance(result, tuple) else result
        expected = _reference_attention(q, k, v)
        if not isinstance(output, Tensor) or output.shape != expected.shape:
            raise AssertionError(
                f"expected an output of shape {tuple(expected.shape)} (..., Tq, dv), got "
                f"{_describe(output)}"
            )
        if torch.allclose(output, expected, atol=1e-5):
            continue
        if torch.allclose(output, _reference_attention(q, k, v, scaled=False), atol=1e-5):
            raise AssertionError("the scores are not scaled: divide q @ k^T by sqrt(d)")
        if torch.allclose(output, _reference_attention(q, k, v, dim=-2), atol=1e-5):
            raise AssertionError("the softmax runs over queries: take it over the keys, dim=-1")
        if q.shape == k.shape and torch.allclose(output, _reference_attention(k, q, v), atol=1e-5):
            raise AssertionError(
                "queries and keys are swapped: the scores are q @ k^T (one row per query), "
                "not k @ q^T"
            )
        raise AssertionError(
            "the output differs from softmax(q k^T / sqrt(d)) v; check that queries come first "
            "(q @ k^T, not k @ q^T) and that the weights multiply v"
        )
    return "Correct: your attention matches softmax(q k^T / sqrt(d)) v, batched and unbatched."


def _describe(value) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__


def check_sliding_window_mask(fn) -> str:
    """Check a reader's ``fn(T, window) -> (T, T) bool``: query t sees keys t-window+1..t.

    Returns a line starting with "Correct:" or raises AssertionError with a hint.
    """
    if not callable(fn):
        raise TypeError(f"pass your mask function itself, got {type(fn).__name__}")
    for T, window in ((5, 2), (6, 1), (4, 4), (7, 3)):
        rows, cols = torch.arange(T)[:, None], torch.arange(T)[None, :]
        expected = (cols <= rows) & (cols > rows - window)
        mask = fn(T, window)
        if not isinstance(mask, Tensor) or mask.shape != (T, T):
            raise AssertionError(f"expected a ({T}, {T}) tensor, got {_describe(mask)}")
        if mask.dtype != torch.bool:
            raise AssertionError(f"the mask must be boolean, got dtype {mask.dtype}")
        if torch.equal(mask, ~expected):
            raise AssertionError("the mask is inverted: True must mean 'may attend'")
        if not torch.equal(mask, expected):
            wrong = (mask != expected).nonzero()[0].tolist()
            raise AssertionError(
                f"for T={T}, window={window} entry (query, key)={tuple(wrong)} is "
                f"{bool(mask[tuple(wrong)])}; query t may attend to keys t-window+1, ..., t"
            )
    return "Correct: each query sees itself and the window - 1 keys before it."
