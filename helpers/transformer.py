"""The Transformer encoder: normalization, the feed-forward network, blocks and the stack.

Chapter 6 builds these pieces from scratch; this module is the canonical version later
chapters import. Shapes: ``B`` batch, ``T`` sequence length, ``D`` model width (``d_model``),
``H`` heads, ``F`` feed-forward width (``ffn_width``). Masks follow the package convention of
:mod:`helpers.attention`: boolean, ``True`` = may attend, broadcastable to ``(B, H, T, T)``.

A block has two sublayers, self-attention and a position-wise feed-forward network, each
wrapped in a residual connection and a normalization. Where the normalization sits is the one
design choice that matters most for training:

* post-LN (the 2017 paper): ``x = norm(x + dropout(sublayer(x)))``
* pre-LN (``norm_first=True``, the default): ``x = x + dropout(sublayer(norm(x)))``

Dropout only ever touches a sublayer's output, never the residual stream itself.
"""

from __future__ import annotations

import warnings

import pandas as pd
import torch
from torch import nn

from helpers._validate import check_positive_int, check_probability
from helpers.attention import MultiHeadAttention

__all__ = [
    "RMSNorm",
    "FeedForward",
    "EncoderBlock",
    "TransformerEncoder",
    "make_norm",
    "count_parameters",
    "parameter_table",
    "check_rms_norm",
    "check_block_parameter_count",
]

NORMS = ("layer", "rms")


_check_positive_int = check_positive_int
_check_probability = check_probability


def _check_sequence(x, d_model: int, where: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{where} expects a torch.Tensor of shape (B, T, D), got {type(x).__name__}"
        )
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(
            f"{where} expects input of shape (B, T, D={d_model}), got {tuple(x.shape)}; "
            "embed tokens first (nn.Embedding) and add a batch dimension with x.unsqueeze(0)"
        )


class RMSNorm(nn.Module):
    """Root-mean-square normalization (Zhang and Sennrich, 2019): no centring, no bias.

    ``y = x / sqrt(mean(x**2) + eps) * weight`` over the last dimension. It equals LayerNorm
    without bias exactly when every feature vector already has zero mean and both use the same
    gain and the same ``eps``. ``eps`` defaults to 1e-5, as LayerNorm's and :func:`make_norm`'s.
    Shapes: ``(..., D) -> (..., D)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        _check_positive_int("d_model", d_model)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps <= 0:
            raise ValueError(f"eps must be a positive float, got {eps!r}")
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(
                f"RMSNorm(d_model={self.weight.shape[0]}) got input with last dimension "
                f"{x.shape[-1]} (shape {tuple(x.shape)}); the last dimension must be d_model"
            )
        inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * inverse_rms * self.weight

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def make_norm(kind: str, d_model: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """A normalization layer over the last dimension: ``"layer"`` (LayerNorm) or ``"rms"``.

    ``bias`` only concerns LayerNorm (RMSNorm has none).
    """
    if kind == "layer":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    if kind == "rms":
        return RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")


class FeedForward(nn.Module):
    """The position-wise feed-forward network ``linear2(dropout(relu(linear1(x))))``.

    Applied to every position independently: ``(B, T, D) -> (B, T, F) -> (B, T, D)``.
    ``F = ffn_width`` is usually 2 to 4 times ``D``: the wide hidden layer is where most of a
    block's parameters and per-token computation live.
    """

    def __init__(self, d_model: int, ffn_width: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        _check_positive_int("d_model", d_model)
        _check_positive_int("ffn_width", ffn_width)
        _check_probability("dropout", dropout)
        self.linear1 = nn.Linear(d_model, ffn_width, bias=bias)
        self.activation = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ffn_width, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class EncoderBlock(nn.Module):
    """One encoder block: self-attention and a feed-forward network, each with a residual.

    ``norm_first=True`` is the pre-LN block, ``False`` the post-LN block of the 2017 paper;
    both match ``torch.nn.TransformerEncoderLayer`` with the same settings (activation ReLU,
    ``batch_first=True``). ``bias`` switches the biases of every linear layer and LayerNorm,
    as torch's ``bias`` does. ``dropout`` is used for the attention weights, inside the
    feed-forward network and on each sublayer's output before it joins the residual stream.
    ``norm="rms"`` swaps LayerNorm for :class:`RMSNorm`.

    ``forward(x, mask=None, return_attention=False)``: ``x`` is ``(B, T, D)``; ``mask`` is
    boolean, True = may attend, broadcastable to ``(B, H, T, T)``. Returns ``(B, T, D)``, or
    ``(output, weights)`` with ``weights`` of shape ``(B, H, T, T)`` if ``return_attention``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_width: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        *,
        bias: bool = True,
        norm: str = "layer",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        _check_positive_int("d_model", d_model)
        _check_positive_int("num_heads", num_heads)
        # named after this block's argument; MultiHeadAttention and FeedForward, public
        # classes of their own, check it again (cheaply) with their own messages
        _check_probability("dropout", dropout)
        if d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                "pick num_heads among the divisors of d_model"
            )
        if not isinstance(norm_first, bool):
            raise TypeError(f"norm_first must be True or False, got {norm_first!r}")
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, bias=bias)
        self.ffn = FeedForward(d_model, ffn_width, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps, bias)
        self.norm2 = make_norm(norm, d_model, eps, bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _attend(self, h: torch.Tensor, mask, return_attention: bool):
        if return_attention:
            return self.self_attn(h, h, h, mask=mask, return_attention=True)
        return self.self_attn(h, h, h, mask=mask), None

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False
    ):
        _check_sequence(x, self.d_model, "EncoderBlock")
        if self.norm_first:
            attended, weights = self._attend(self.norm1(x), mask, return_attention)
            x = x + self.dropout1(attended)
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            attended, weights = self._attend(x, mask, return_attention)
            x = self.norm1(x + self.dropout1(attended))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return (x, weights) if return_attention else x

    @torch.no_grad()
    def load_from_torch(self, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """Copy the weights of a same-shape ``torch.nn.TransformerEncoderLayer``; return self.

        The layer must use ReLU, LayerNorm with this block's ``eps``, the same ``norm_first``
        and the same bias setting. Afterwards both compute the same function (in eval mode;
        in training mode their dropout masks differ). Remember that its ``src_mask`` means
        True = may *not* attend: pass it ``~mask``.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(
                f"expected torch.nn.TransformerEncoderLayer, got {type(layer).__name__}"
            )
        if layer.norm_first != self.norm_first:
            raise ValueError(
                f"norm_first mismatch: the torch layer has norm_first={layer.norm_first}, "
                f"this block {self.norm_first}; build both the same way"
            )
        if layer.activation_relu_or_gelu != 1:
            raise ValueError("the torch layer must use activation='relu', as this block does")
        if not isinstance(self.norm1, nn.LayerNorm) or self.norm1.eps != layer.norm1.eps:
            raise ValueError(
                f"normalization mismatch: the torch layer uses LayerNorm(eps={layer.norm1.eps}); "
                f"build this block with norm='layer', eps={layer.norm1.eps}"
            )
        if layer.linear1.weight.shape != self.ffn.linear1.weight.shape:
            raise ValueError(
                f"feed-forward shape mismatch: torch {tuple(layer.linear1.weight.shape)}, "
                f"this block {tuple(self.ffn.linear1.weight.shape)} (ffn_width, d_model)"
            )
        if not layer.self_attn.batch_first:
            # the weights are the same either way, so copying is fine; comparing outputs is not
            warnings.warn(
                "the torch layer was built with batch_first=False, so it expects (T, B, D) "
                "inputs while this block takes (B, T, D); to compare their outputs, build it "
                "with nn.TransformerEncoderLayer(..., batch_first=True)",
                stacklevel=2,
            )
        self.self_attn.load_from_torch(layer.self_attn)
        for name in ("linear1", "linear2"):
            getattr(self.ffn, name).load_state_dict(getattr(layer, name).state_dict())
        self.norm1.load_state_dict(layer.norm1.state_dict())
        self.norm2.load_state_dict(layer.norm2.state_dict())
        return self


class TransformerEncoder(nn.Module):
    """A stack of ``num_blocks`` :class:`EncoderBlock`\\ s, ``(B, T, D) -> (B, T, D)``.

    The remaining arguments are those of :class:`EncoderBlock`. A pre-LN stack adds the
    residual outputs of every block without normalizing them, so it ends with one more
    normalization (``final_norm``, on by default exactly when ``norm_first``), as
    ``torch.nn.TransformerEncoder(..., norm=LayerNorm)`` and GPT-2 do.
    """

    def __init__(
        self,
        num_blocks: int,
        d_model: int,
        num_heads: int,
        ffn_width: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        *,
        bias: bool = True,
        norm: str = "layer",
        eps: float = 1e-5,
        final_norm: bool | None = None,
    ) -> None:
        super().__init__()
        _check_positive_int("num_blocks", num_blocks)
        self.blocks = nn.ModuleList(
            EncoderBlock(
                d_model, num_heads, ffn_width, dropout, norm_first, bias=bias, norm=norm, eps=eps
            )
            for _ in range(num_blocks)
        )
        final_norm = norm_first if final_norm is None else final_norm
        self.final_norm = make_norm(norm, d_model, eps, bias) if final_norm else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.final_norm(x)

    @torch.no_grad()
    def get_attention_maps(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The attention weights each block uses on input ``x``: a list of ``(B, H, T, T)``.

        The weights come from the blocks' own forward pass, so a pre-LN block reports the
        attention of its *normalized* input, the one it really computes. Call ``.eval()``
        first to see the weights without dropout's randomness in the residual stream.
        """
        maps = []
        for block in self.blocks:
            x, weights = block(x, mask=mask, return_attention=True)
            maps.append(weights)
        return maps


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """The number of scalar parameters of ``module`` (shared parameters counted once)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"count_parameters expects an nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def parameter_table(module: nn.Module, max_depth: int = 1) -> pd.DataFrame:
    """A table of the parameter count of every submodule down to ``max_depth`` levels.

    Submodules without parameters (dropout, activations) are left out.
    Columns: ``module`` (dotted name), ``type`` and ``parameters``; a last row ``total``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"parameter_table expects an nn.Module, got {type(module).__name__}")
    _check_positive_int("max_depth", max_depth)
    rows = []
    for name, child in module.named_modules():
        depth = name.count(".") + 1
        count = count_parameters(child)
        if name and depth <= max_depth and count > 0:  # skip dropout, activations
            rows.append((name, type(child).__name__, count))
    rows.append(("total", type(module).__name__, count_parameters(module)))
    return pd.DataFrame(rows, columns=["module", "type", "parameters"])


# --- exercise checkers (chapter 6) -------------------------------------------------------------


def check_rms_norm(fn) -> str:
    """Check a reader's ``fn(x, weight, eps)`` computing RMSNorm over the last dimension.

    Returns a line starting with "Correct:", or raises AssertionError with a hint.
    """
    generator = torch.Generator().manual_seed(6)
    for shape, eps in (((3, 8), 1e-6), ((2, 4, 6), 1e-2), ((5, 1), 0.5)):
        x = 2 * torch.randn(shape, generator=generator) + 1  # off-centre on purpose
        weight = torch.randn(shape[-1], generator=generator)
        reference = RMSNorm(shape[-1], eps=eps)
        with torch.no_grad():
            reference.weight.copy_(weight)
            expected = reference(x)
        got = fn(x, weight, eps)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            received = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise AssertionError(f"expected a tensor of shape {tuple(x.shape)}, got {received}")
        if torch.allclose(got, expected, atol=1e-5):
            continue
        centred = x - x.mean(-1, keepdim=True)
        hints = (
            (
                centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight,
                "you subtract the mean: that is LayerNorm; RMSNorm does not centre",
            ),
            (
                x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight,
                "eps goes inside the square root: x / sqrt(mean(x**2) + eps)",
            ),
            (
                x * x.pow(2).mean(-1, keepdim=True).add(eps).sqrt() * weight,
                "divide by the root mean square, do not multiply by it",
            ),
        )
        hint = next(
            (text for wrong, text in hints if torch.allclose(got, wrong, atol=1e-5)),
            "average x**2 over the last dimension only (dim=-1, keepdim=True)",
        )
        raise AssertionError(f"wrong output for input shape {shape}, eps={eps}: {hint}")
    return "Correct: your RMSNorm matches helpers.transformer.RMSNorm."


def check_block_parameter_count(fn) -> str:
    """Check a reader's formula ``fn(d_model, ffn_width)`` for the parameters of one block.

    The block is ``EncoderBlock(d_model, num_heads, ffn_width)`` with biases and LayerNorm.
    Returns a line starting with "Correct:", or raises AssertionError with a hint.
    """
    for d_model, num_heads, ffn_width in ((8, 2, 32), (12, 3, 20), (512, 8, 2048)):
        expected = count_parameters(EncoderBlock(d_model, num_heads, ffn_width))
        got = fn(d_model, ffn_width)
        if got == expected:
            continue
        without_norms = expected - 4 * d_model
        without_biases = expected - (4 * d_model + ffn_width + d_model)
        hint = {
            without_norms: "add the two LayerNorms: a gain and a bias of size D each",
            without_biases: "add the biases: 4D in attention, F + D in the feed-forward network",
        }.get(got, "attention has 4 D x D matrices, the feed-forward network D x F and F x D")
        raise AssertionError(
            f"for d_model={d_model}, ffn_width={ffn_width} the block has {expected:,} "
            f"parameters, your formula gives {got!r}: {hint}"
        )
    return "Correct: your formula matches count_parameters(EncoderBlock(...))."
