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

import torch
from torch import nn

from helpers import _validate as check
from helpers.attention import MultiHeadAttention

__all__ = [
    "RMSNorm",
    "FeedForward",
    "EncoderBlock",
    "TransformerEncoder",
    "make_norm",
]

NORMS = ("layer", "rms")


class RMSNorm(nn.Module):
    """Root-mean-square normalization (Zhang and Sennrich, 2019): no centring, no bias.

    ``y = x / sqrt(mean(x**2) + eps) * weight`` over the last dimension. It equals LayerNorm
    without bias exactly when every feature vector already has zero mean and both use the same
    gain and the same ``eps``. ``eps`` defaults to 1e-5, as LayerNorm's and :func:`make_norm`'s.
    Shapes: ``(..., D) -> (..., D)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = check.positive_number("eps", eps, "1e-5 is usual")
        self.weight = nn.Parameter(torch.ones(check.positive_int("d_model", d_model)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check.last_dim(self, x, self.weight.shape[0])
        inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * inverse_rms * self.weight

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def make_norm(kind: str, d_model: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """A normalization layer over the last dimension: ``"layer"`` (LayerNorm) or ``"rms"``.

    ``bias`` only concerns LayerNorm (RMSNorm has none).
    """
    check.positive_int("d_model", d_model)
    eps = check.positive_number("eps", eps, "1e-5 is usual")
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
        check.positive_int("d_model", d_model)
        check.positive_int("ffn_width", ffn_width)
        self.d_model = d_model
        self.linear1 = nn.Linear(d_model, ffn_width, bias=bias)
        self.activation = nn.ReLU()
        self.dropout = nn.Dropout(check.probability("dropout", dropout))
        self.linear2 = nn.Linear(ffn_width, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check.last_dim(self, x, self.d_model)
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
        self.d_model, self.norm_first = d_model, check.boolean("norm_first", norm_first)
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

    def forward(self, x, mask=None, return_attention=False):
        check.sequence("x", x, self.d_model, "EncoderBlock")
        check.module_dtype("x", x, self)
        if self.norm_first:
            attended, weights = self._attend(self.norm1(x), mask, return_attention)
            x = x + self.dropout1(attended)
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            attended, weights = self._attend(x, mask, return_attention)
            x = self.norm1(x + self.dropout1(attended))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return (x, weights) if return_attention else x

    def load_from_torch(self, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """Copy a ``torch.nn.TransformerEncoderLayer``'s weights; see :mod:`helpers.interop`."""
        from helpers.interop import load_encoder_block

        return load_encoder_block(self, layer)


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
        check.positive_int("num_blocks", num_blocks)
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
