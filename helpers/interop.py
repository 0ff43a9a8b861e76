"""Moving weights between the book's modules and PyTorch's own.

The classes of :mod:`helpers.attention` and :mod:`helpers.transformer` compute
the same functions as ``torch.nn.MultiheadAttention`` and
``torch.nn.TransformerEncoderLayer``, and :class:`helpers.gpt.GPT`, configured
as GPT-2, the same function as ``transformers``' ``GPT2LMHeadModel``. The
functions here copy weights across, after checking that the two models are built
alike, so that chapters and tests can compare them output for output. The book's
classes do not depend on this module (they carry no loading methods): it imports
them, never the other way round.

Remember the mask conventions when you compare outputs: PyTorch's boolean masks
mean True = *ignore*, the book's True = may attend, so pass ``~mask`` to
PyTorch's modules.
"""

from __future__ import annotations

import re
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import MultiHeadAttention

__all__ = [
    "load_multihead_attention",
    "fuse_heads",
    "load_encoder_block",
    "load_decoder_block",
    "load_gpt2",
]


@torch.no_grad()
def load_multihead_attention(module, torch_mha: nn.MultiheadAttention):
    """Copy a ``torch.nn.MultiheadAttention``'s weights into a
    ``MultiHeadAttention``; return it.

    Its ``in_proj_weight`` (3D, D) has the layout of ``qkv_proj.weight``; biases
    must exist in both or in neither. Only weights are copied: for the two
    modules to return the same outputs, build ``torch_mha`` with
    ``batch_first=True`` (otherwise it reads (T, B, D) inputs), compare them in
    ``eval()`` mode (or without dropout), and pass it ``~mask``.
    """
    if not isinstance(torch_mha, nn.MultiheadAttention):
        raise TypeError(
            "expected torch.nn.MultiheadAttention, got "
            f"{type(torch_mha).__name__}"
        )
    if torch_mha.in_proj_weight is None:
        raise ValueError(
            "torch_mha has separate q/k/v widths (kdim/vdim); "
            "it cannot be fused"
        )
    if (torch_mha.embed_dim, torch_mha.num_heads) != (
        module.d_model,
        module.num_heads,
    ):
        raise ValueError(
            f"size mismatch: torch_mha has embed_dim={torch_mha.embed_dim}, "
            f"num_heads={torch_mha.num_heads}; this module has "
            f"d_model={module.d_model}, num_heads={module.num_heads}"
        )
    if (torch_mha.in_proj_bias is None) != (module.qkv_proj.bias is None):
        raise ValueError(
            "bias mismatch: build both modules with the same bias setting"
        )
    module.qkv_proj.weight.copy_(torch_mha.in_proj_weight)
    module.out_proj.weight.copy_(torch_mha.out_proj.weight)
    if module.qkv_proj.bias is not None:
        module.qkv_proj.bias.copy_(torch_mha.in_proj_bias)
        module.out_proj.bias.copy_(torch_mha.out_proj.bias)
    return module


@torch.no_grad()
def fuse_heads(per_head):
    """A ``MultiHeadAttention`` with the weights of a
    ``PerHeadMultiHeadAttention``.

    Head h's query, key and value layers become rows ``h*d_head:(h+1)*d_head``
    of the three blocks of the fused ``qkv_proj``; the output projection is
    shared as it is.
    """
    bias = per_head.out_proj.bias is not None
    fused = MultiHeadAttention(per_head.d_model, per_head.num_heads, bias=bias)
    for block, name in enumerate(("query", "key", "value")):
        rows = slice(block * per_head.d_model, (block + 1) * per_head.d_model)
        layers = [getattr(head, name) for head in per_head.heads]
        fused.qkv_proj.weight[rows] = torch.cat(
            [layer.weight for layer in layers]
        )
        if bias:
            fused.qkv_proj.bias[rows] = torch.cat(
                [layer.bias for layer in layers]
            )
    fused.out_proj.load_state_dict(per_head.out_proj.state_dict())
    return fused


def _check_same_layout(block, layer, torch_class: type) -> None:
    """Refuse a torch layer whose computation differs from ``block``'s (the
    conditions of :func:`load_encoder_block` and :func:`load_decoder_block`);
    warn about ``batch_first``."""
    name = torch_class.__name__
    if not isinstance(layer, torch_class):
        raise TypeError(f"expected torch.nn.{name}, got {type(layer).__name__}")
    if layer.norm_first != block.norm_first:
        raise ValueError(
            "norm_first mismatch: the torch layer has "
            f"norm_first={layer.norm_first}, "
            f"this block {block.norm_first}; build both the same way"
        )
    if not (
        layer.activation is F.relu or isinstance(layer.activation, nn.ReLU)
    ):
        raise ValueError(
            "the torch layer must use activation='relu', as this block does"
        )
    if (
        not isinstance(block.norm1, nn.LayerNorm)
        or block.norm1.eps != layer.norm1.eps
    ):
        raise ValueError(
            "normalization mismatch: the torch layer uses "
            f"LayerNorm(eps={layer.norm1.eps}); "
            f"build this block with norm='layer', eps={layer.norm1.eps}"
        )
    if layer.linear1.weight.shape != block.ffn.linear1.weight.shape:
        raise ValueError(
            "feed-forward shape mismatch: torch "
            f"{tuple(layer.linear1.weight.shape)}, this block "
            f"{tuple(block.ffn.linear1.weight.shape)} (ffn_width, d_model)"
        )
    if not layer.self_attn.batch_first:
        # the weights are the same either way, so copying is fine; comparing
        # outputs is not
        warnings.warn(
            "the torch layer was built with batch_first=False, so it expects "
            "(T, B, D) inputs while this block takes (B, T, D); to compare "
            f"their outputs, build it with nn.{name}(..., batch_first=True)",
            stacklevel=4,
        )


@torch.no_grad()
def load_encoder_block(block, layer: nn.TransformerEncoderLayer):
    """Copy a same-shape ``torch.nn.TransformerEncoderLayer`` into an
    ``EncoderBlock``; return it.

    The layer must use ReLU, LayerNorm with the block's ``eps``, the same
    ``norm_first`` and the same bias setting. Afterwards both compute the same
    function (in eval mode; in training mode their dropout masks differ). Its
    ``src_mask`` means True = may *not* attend: pass it ``~mask``.
    """
    _check_same_layout(block, layer, nn.TransformerEncoderLayer)
    load_multihead_attention(block.self_attn, layer.self_attn)
    for name in ("linear1", "linear2"):
        getattr(block.ffn, name).load_state_dict(
            getattr(layer, name).state_dict()
        )
    block.norm1.load_state_dict(layer.norm1.state_dict())
    block.norm2.load_state_dict(layer.norm2.state_dict())
    return block


@torch.no_grad()
def load_decoder_block(block, layer: nn.TransformerDecoderLayer):
    """Copy a same-shape ``torch.nn.TransformerDecoderLayer`` into a
    ``DecoderBlock``; return it.

    The same conditions as :func:`load_encoder_block`. The layer's ``self_attn``
    becomes the block's ``self_attn``, its ``multihead_attn`` (cross-attention)
    the block's ``cross_attn``, and ``norm1``, ``norm2``, ``norm3`` keep their
    names. Its ``tgt_mask``, ``memory_mask`` and key-padding masks mean True =
    may *not* attend: pass them ``~mask``.
    """
    _check_same_layout(block, layer, nn.TransformerDecoderLayer)
    load_multihead_attention(block.self_attn, layer.self_attn)
    load_multihead_attention(block.cross_attn, layer.multihead_attn)
    for name in ("linear1", "linear2"):
        getattr(block.ffn, name).load_state_dict(
            getattr(layer, name).state_dict()
        )
    for name in ("norm1", "norm2", "norm3"):
        getattr(block, name).load_state_dict(getattr(layer, name).state_dict())
    return block


# transformers' names for the activations the book's GPT has (gelu_new and
# gelu_pytorch_tanh are two codings of GELU's tanh approximation)
_GPT2_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}


def _gpt2_prefix(state_dict) -> str:
    """``"transformer."`` for ``GPT2LMHeadModel``'s keys, ``""`` for
    ``GPT2Model``'s (and the released ``gpt2`` weights file's); refuse anything
    else."""
    if not hasattr(state_dict, "keys"):
        raise TypeError(
            "state_dict must be a mapping of names to tensors "
            "(GPT2LMHeadModel(...)."
            f"state_dict()), got {type(state_dict).__name__}"
        )
    for prefix in ("transformer.", ""):
        if f"{prefix}wte.weight" in state_dict:
            return prefix
    raise ValueError(
        "the state dict has no 'transformer.wte.weight' (nor 'wte.weight'): "
        "load_gpt2 reads the layout of transformers' GPT2LMHeadModel "
        "('transformer.h.0.attn.c_attn.weight', ...) or GPT2Model "
        "('h.0.attn.c_attn.weight', ...)"
    )


def _gpt2_heads(config, num_heads) -> int:
    """The checkpoint's head count, from ``config`` or ``num_heads`` (one is
    required)."""
    if config is None and num_heads is None:
        raise TypeError(
            "load_gpt2 needs the checkpoint's configuration, which a state "
            "dict does not record: pass config=GPT2Config (e.g. "
            "GPT2LMHeadModel.config) to have all of it checked, or at least "
            "num_heads=<its n_head> (GPT-2 small: 12)"
        )
    if config is None:
        return num_heads
    if not hasattr(config, "n_head"):
        raise TypeError(
            "config must be a transformers GPT2Config, got "
            f"{type(config).__name__}"
        )
    if num_heads is not None and num_heads != config.n_head:
        raise ValueError(
            f"num_heads={num_heads} contradicts "
            f"config.n_head={config.n_head}; pass one"
        )
    return config.n_head


def _check_gpt2_config(model, config) -> None:
    """Refuse a model that lacks a choice the checkpoint's ``GPT2Config``
    records."""
    activation = _GPT2_ACTIVATIONS.get(config.activation_function)
    if activation is None:
        raise ValueError(
            "activation mismatch: the checkpoint uses "
            f"{config.activation_function!r}, "
            "which the book's GPT does not have "
            f"({', '.join(_GPT2_ACTIVATIONS)})"
        )
    eps = getattr(model.final_norm, "eps", None)
    ffn_width = config.n_inner or 4 * config.n_embd
    build = "build it with"
    recorded = [  # (name, the checkpoint's, the model's, what to do)
        ("activation", activation, model.config.activation,
         f"{build} activation={activation!r}"),
        ("scale_attn_weights", config.scale_attn_weights, True,
         "the book's attention always scales by 1/sqrt(d_head)"),
        ("scale_attn_by_inverse_layer_idx", config.scale_attn_by_inverse_layer_idx,
         False, "the book's attention never scales by the layer index"),
        ("layer_norm_epsilon", config.layer_norm_epsilon, eps,
         "the book's LayerNorm has eps=1e-5"),
        ("tie_word_embeddings", config.tie_word_embeddings, True,
         "the book's GPT-2 configuration ties its head"),
        ("add_cross_attention", config.add_cross_attention, False,
         "the book's GPT has no cross-attention"),
        ("n_layer", config.n_layer, len(model.blocks),
         f"{build} num_layers={config.n_layer}"),
        ("n_embd", config.n_embd, model.config.d_model,
         f"{build} d_model={config.n_embd}"),
        ("n_inner", ffn_width, model.blocks[0].ffn.linear1.out_features,
         f"{build} ffn_width={ffn_width}"),
        ("vocab_size", config.vocab_size, model.vocab_size,
         f"{build} vocab_size={config.vocab_size}"),
        ("n_positions", config.n_positions, model.context_length,
         f"{build} context_length={config.n_positions}"),
    ]  # fmt: skip
    for name, theirs, mine, fix in recorded:
        if theirs != mine:
            raise ValueError(
                f"{name} mismatch: the checkpoint's config has {theirs!r}, the "
                f"model {mine!r}; {fix}"
            )


def _gpt2_plan(
    model, state_dict, num_heads, config=None
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Pair each of ``model``'s tensors with its GPT-2 tensor, as ``(name, ours,
    theirs)`` with ``theirs`` already in our layout; refuse what differs (shapes
    checked too)."""
    if type(model).__name__ != "GPT" or not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a helpers.gpt.GPT, got {type(model).__name__}"
        )
    prefix = _gpt2_prefix(state_dict)
    num_heads = _gpt2_heads(config, num_heads)
    layers = {
        int(m.group(1))
        for k in state_dict
        if (m := re.match(rf"{re.escape(prefix)}h\.(\d+)\.", k))
    }
    vocab, width = state_dict[f"{prefix}wte.weight"].shape
    context = state_dict[f"{prefix}wpe.weight"].shape[0]
    block = model.blocks[0]
    if num_heads != block.self_attn.num_heads:
        raise ValueError(
            f"num_heads mismatch: the checkpoint has {num_heads} heads, the "
            f"model {block.self_attn.num_heads}; build it with "
            f"num_heads={num_heads}"
        )
    ours = {
        "layers": (len(model.blocks), len(layers)),
        "d_model (width)": (block.self_attn.d_model, width),
        "vocab_size": (model.vocab_size, vocab),
        "context_length (positions)": (model.context_length, context),
    }
    for name, (mine, theirs) in ours.items():
        if mine != theirs:
            raise ValueError(
                f"{name} mismatch: the state dict has {theirs}, the model "
                f"{mine}; build the GPT with the checkpoint's configuration "
                "(GPT-2 small: GPT(GPTConfig(vocab_size=50_257, "
                "context_length=1024, d_model=768, num_layers=12, "
                "num_heads=12, ...)))"
            )
    gpt2_like = "build it as GPT(GPTConfig(..., bias=True, norm='layer', activation='gelu_tanh'))"
    if model.config.positions != "learned":
        raise ValueError(
            f"positions mismatch: GPT-2 learns its positions, the model uses "
            f"positions={model.config.positions!r}; build it with "
            "positions='learned'"
        )
    if (
        block.self_attn.num_kv_heads != block.self_attn.num_heads
        or block.self_attn.window
    ):
        raise ValueError(
            "attention mismatch: GPT-2 has as many key/value heads as query "
            "heads and no window; build the model with "
            "num_kv_heads=None, window=None"
        )
    if block.self_attn.qkv_proj.bias is None:
        raise ValueError(
            f"bias mismatch: GPT-2's linear layers and LayerNorms have biases, "
            f"the model was built with bias=False; {gpt2_like}"
        )
    if (
        not isinstance(model.final_norm, nn.LayerNorm)
        or model.final_norm.eps != 1e-5
    ):
        raise ValueError(
            f"norm mismatch: GPT-2 uses LayerNorm(eps=1e-5), the model "
            f"{model.final_norm}; {gpt2_like}"
        )
    if config is None and model.config.activation != "gelu_tanh":
        raise ValueError(
            "activation mismatch: GPT-2's feed-forward network applies GELU's "
            "tanh approximation, the model "
            f"{model.config.activation!r}; {gpt2_like}"
        )
    if config is not None:
        _check_gpt2_config(model, config)
    if model.head.weight is not model.token_embedding.weight:
        raise ValueError(
            "head mismatch: GPT-2's output head is tied to its token "
            "embedding, the model's is not; build it with tie_weights=True"
        )
    head = state_dict.get("lm_head.weight")
    if head is not None and not torch.equal(
        head, state_dict[f"{prefix}wte.weight"]
    ):
        raise ValueError(
            "the state dict's lm_head.weight differs from "
            "transformer.wte.weight: "
            "an untied head, which the book's GPT-2 configuration cannot hold"
        )
    plan = [("token_embedding.weight", model.token_embedding.weight, "wte.weight"),
            ("position_embedding.weight", model.position_embedding.weight, "wpe.weight"),
            ("final_norm.weight", model.final_norm.weight, "ln_f.weight"),
            ("final_norm.bias", model.final_norm.bias, "ln_f.bias")]  # fmt: skip
    names = {"norm1": "ln_1", "norm2": "ln_2", "self_attn.qkv_proj": "attn.c_attn",
             "self_attn.out_proj": "attn.c_proj", "ffn.linear1": "mlp.c_fc",
             "ffn.linear2": "mlp.c_proj"}  # fmt: skip
    for index, layer in enumerate(model.blocks):
        for mine, theirs in names.items():
            for kind in ("weight", "bias"):
                param = layer.get_parameter(f"{mine}.{kind}")
                plan.append(
                    (
                        f"blocks.{index}.{mine}.{kind}",
                        param,
                        f"h.{index}.{theirs}.{kind}",
                    )
                )
    pairs = []
    for name, param, key in plan:
        key = f"{prefix}{key}"
        if key not in state_dict:
            raise ValueError(
                f"the state dict has no {key!r} (for the model's {name})"
            )
        tensor = state_dict[key]
        if (
            name.endswith("weight")
            and key.startswith(f"{prefix}h.")
            and "ln_" not in key
        ):
            # GPT-2's Conv1D stores (in, out); nn.Linear holds (out, in)
            tensor = tensor.t()
        if tensor.shape != param.shape:
            raise ValueError(
                f"shape mismatch at {key}: {tuple(state_dict[key].shape)} (as "
                f"Conv1D's (in, out)) does not fit the model's {name} "
                f"{tuple(param.shape)}: check ffn_width and num_heads"
            )
        pairs.append((name, param, tensor))
    return pairs


@torch.no_grad()
def load_gpt2(model, state_dict, *, config=None, num_heads: int | None = None):
    """Copy a ``transformers`` GPT-2 state dict into a :class:`GPT`; return it.

    ``state_dict``: ``GPT2LMHeadModel``'s (keys ``transformer.h.0...``) or
    ``GPT2Model``'s and the released weights file's (keys ``h.0...``). A state
    dict records the shapes, not the choices that shaped them, so pass the
    checkpoint's ``config`` (a ``GPT2Config``, e.g. ``GPT2LMHeadModel.config``),
    or at least ``num_heads``; one of them is required.

    Checked from the state dict against the model: layers, width, vocabulary,
    context length, every tensor's shape (so the feed-forward width), biases, a
    tied head. Checked against the model always: learned positions, LayerNorm,
    as many key/value heads as query heads, no window, the head count. With
    ``config``, also: ``activation_function`` (``gelu_new`` is
    ``activation="gelu_tanh"``), ``scale_attn_weights=True``,
    ``scale_attn_by_inverse_layer_idx=False``, ``layer_norm_epsilon`` equal to
    the model's, ``n_inner``, ``tie_word_embeddings=True``,
    ``add_cross_attention=False``. With ``num_heads`` alone, those are taken to
    be GPT-2's own: GELU's tanh approximation, scores scaled by 1/sqrt(d_head),
    eps 1e-5. GPT-2's ``Conv1D`` layers store ``(in, out)`` matrices, the
    transpose of ``nn.Linear``'s, so those are transposed; ``c_attn`` stacks the
    query, key and value projections as ``qkv_proj`` does. Every check runs
    before any weight is copied, so a refused model is left as it was.
    """
    for _, param, tensor in _gpt2_plan(model, state_dict, num_heads, config):
        param.copy_(tensor)
    return model
