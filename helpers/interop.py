"""Moving weights between the book's modules and PyTorch's own.

The classes of :mod:`helpers.attention` and :mod:`helpers.transformer` compute the same
functions as ``torch.nn.MultiheadAttention`` and ``torch.nn.TransformerEncoderLayer``. The
functions here copy weights across, after checking that the two modules are built alike, so
that chapters and tests can compare them output for output. The classes' ``load_from_torch``
and ``fused`` methods call these.

Remember the mask conventions when you compare outputs: PyTorch's boolean masks mean
True = *ignore*, the book's True = may attend, so pass ``~mask`` to PyTorch's modules.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "load_multihead_attention",
    "fuse_heads",
    "load_encoder_block",
    "load_decoder_block",
]


@torch.no_grad()
def load_multihead_attention(module, torch_mha: nn.MultiheadAttention):
    """Copy a ``torch.nn.MultiheadAttention``'s weights into a ``MultiHeadAttention``; return it.

    Its ``in_proj_weight`` (3D, D) has the layout of ``qkv_proj.weight``; biases must exist in
    both or in neither. Only weights are copied: for the two modules to return the same
    outputs, build ``torch_mha`` with ``batch_first=True`` (otherwise it reads (T, B, D)
    inputs), compare them in ``eval()`` mode (or without dropout), and pass it ``~mask``.
    """
    if not isinstance(torch_mha, nn.MultiheadAttention):
        raise TypeError(f"expected torch.nn.MultiheadAttention, got {type(torch_mha).__name__}")
    if torch_mha.in_proj_weight is None:
        raise ValueError("torch_mha has separate q/k/v widths (kdim/vdim); it cannot be fused")
    if (torch_mha.embed_dim, torch_mha.num_heads) != (module.d_model, module.num_heads):
        raise ValueError(
            f"size mismatch: torch_mha has embed_dim={torch_mha.embed_dim}, num_heads="
            f"{torch_mha.num_heads}; this module has d_model={module.d_model}, num_heads="
            f"{module.num_heads}"
        )
    if (torch_mha.in_proj_bias is None) != (module.qkv_proj.bias is None):
        raise ValueError("bias mismatch: build both modules with the same bias setting")
    module.qkv_proj.weight.copy_(torch_mha.in_proj_weight)
    module.out_proj.weight.copy_(torch_mha.out_proj.weight)
    if module.qkv_proj.bias is not None:
        module.qkv_proj.bias.copy_(torch_mha.in_proj_bias)
        module.out_proj.bias.copy_(torch_mha.out_proj.bias)
    return module


@torch.no_grad()
def fuse_heads(per_head):
    """A ``MultiHeadAttention`` with the weights of a ``PerHeadMultiHeadAttention``.

    Head h's query, key and value layers become rows ``h*d_head:(h+1)*d_head`` of the three
    blocks of the fused ``qkv_proj``; the output projection is shared as it is.
    """
    from helpers.attention import MultiHeadAttention

    bias = per_head.out_proj.bias is not None
    fused = MultiHeadAttention(per_head.d_model, per_head.num_heads, bias=bias)
    for block, name in enumerate(("query", "key", "value")):
        rows = slice(block * per_head.d_model, (block + 1) * per_head.d_model)
        layers = [getattr(head, name) for head in per_head.heads]
        fused.qkv_proj.weight[rows] = torch.cat([layer.weight for layer in layers])
        if bias:
            fused.qkv_proj.bias[rows] = torch.cat([layer.bias for layer in layers])
    fused.out_proj.load_state_dict(per_head.out_proj.state_dict())
    return fused


def _check_same_layout(block, layer, torch_class: type) -> None:
    """Refuse a torch layer whose computation differs from ``block``'s (the conditions of
    :func:`load_encoder_block` and :func:`load_decoder_block`); warn about ``batch_first``."""
    name = torch_class.__name__
    if not isinstance(layer, torch_class):
        raise TypeError(f"expected torch.nn.{name}, got {type(layer).__name__}")
    if layer.norm_first != block.norm_first:
        raise ValueError(
            f"norm_first mismatch: the torch layer has norm_first={layer.norm_first}, "
            f"this block {block.norm_first}; build both the same way"
        )
    if not (layer.activation is F.relu or isinstance(layer.activation, nn.ReLU)):
        raise ValueError("the torch layer must use activation='relu', as this block does")
    if not isinstance(block.norm1, nn.LayerNorm) or block.norm1.eps != layer.norm1.eps:
        raise ValueError(
            f"normalization mismatch: the torch layer uses LayerNorm(eps={layer.norm1.eps}); "
            f"build this block with norm='layer', eps={layer.norm1.eps}"
        )
    if layer.linear1.weight.shape != block.ffn.linear1.weight.shape:
        raise ValueError(
            f"feed-forward shape mismatch: torch {tuple(layer.linear1.weight.shape)}, "
            f"this block {tuple(block.ffn.linear1.weight.shape)} (ffn_width, d_model)"
        )
    if not layer.self_attn.batch_first:
        # the weights are the same either way, so copying is fine; comparing outputs is not
        warnings.warn(
            f"the torch layer was built with batch_first=False, so it expects (T, B, D) "
            f"inputs while this block takes (B, T, D); to compare their outputs, build it "
            f"with nn.{name}(..., batch_first=True)",
            stacklevel=4,
        )


@torch.no_grad()
def load_encoder_block(block, layer: nn.TransformerEncoderLayer):
    """Copy a same-shape ``torch.nn.TransformerEncoderLayer`` into an ``EncoderBlock``; return it.

    The layer must use ReLU, LayerNorm with the block's ``eps``, the same ``norm_first`` and
    the same bias setting. Afterwards both compute the same function (in eval mode; in
    training mode their dropout masks differ). Its ``src_mask`` means True = may *not*
    attend: pass it ``~mask``.
    """
    _check_same_layout(block, layer, nn.TransformerEncoderLayer)
    load_multihead_attention(block.self_attn, layer.self_attn)
    for name in ("linear1", "linear2"):
        getattr(block.ffn, name).load_state_dict(getattr(layer, name).state_dict())
    block.norm1.load_state_dict(layer.norm1.state_dict())
    block.norm2.load_state_dict(layer.norm2.state_dict())
    return block


@torch.no_grad()
def load_decoder_block(block, layer: nn.TransformerDecoderLayer):
    """Copy a same-shape ``torch.nn.TransformerDecoderLayer`` into a ``DecoderBlock``; return it.

    The same conditions as :func:`load_encoder_block`. The layer's ``self_attn`` becomes the
    block's ``self_attn``, its ``multihead_attn`` (cross-attention) the block's ``cross_attn``,
    and ``norm1``, ``norm2``, ``norm3`` keep their names. Its ``tgt_mask``,
    ``memory_mask`` and key-padding masks mean True = may *not* attend: pass them ``~mask``.
    """
    _check_same_layout(block, layer, nn.TransformerDecoderLayer)
    load_multihead_attention(block.self_attn, layer.self_attn)
    load_multihead_attention(block.cross_attn, layer.multihead_attn)
    for name in ("linear1", "linear2"):
        getattr(block.ffn, name).load_state_dict(getattr(layer, name).state_dict())
    for name in ("norm1", "norm2", "norm3"):
        getattr(block, name).load_state_dict(getattr(layer, name).state_dict())
    return block
