"""The Vision Transformer (Dosovitskiy et al., 2021): an image read as a
sequence of patches.

Chapter 14 builds it. An image is cut into square patches; each patch is
flattened and mapped to a vector of width ``D`` by one linear map (the same for
every patch, so a strided ``Conv2d`` computes it too); positions are added; the
sequence goes through the encoder of chapter 6
(:class:`helpers.transformer.TransformerEncoder`, reused as it is); one vector,
the output at a learned *class token* or the mean over the patches, is
classified.

Shapes: ``B`` batch, ``C`` channels, ``S`` the side of a square image, ``P`` the
side of a patch, ``G = S / P`` patches per side, ``N = G * G`` patches, ``D``
model width, ``L`` blocks, ``H`` heads, ``T`` tokens (``N``, plus one with a
class token). Patches are numbered row by row; the features of a flattened patch
are ordered (channel, row, column), as the weight of a ``Conv2d`` is.

:func:`attention_rollout` (Abnar and Zuidema, 2020) follows attention through
the blocks; :func:`patch_attention` turns attention weights into maps over the
image.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from helpers import _validate as check
from helpers.positional import LearnedPositionalEmbedding, sinusoidal_encoding
from helpers.transformer import TransformerConfig, TransformerEncoder

__all__ = [
    "patchify",
    "LinearPatchEmbedding",
    "ConvPatchEmbedding",
    "copy_patch_weights",
    "sinusoidal_2d_encoding",
    "Sinusoidal2DPositionalEncoding",
    "POOLS",
    "POSITIONS",
    "PATCH_EMBEDDINGS",
    "ViTConfig",
    "VisionTransformer",
    "attention_rollout",
    "patch_attention",
]

POOLS = ("cls", "mean")
POSITIONS = ("learned", "sinusoidal", "none")
PATCH_EMBEDDINGS = ("conv", "linear")


# ---------------------------------------------------------------------- patches


def _square_grid(images: Tensor, patch_size: int, who: str) -> int:
    """Patches per side of square ``(B, C, S, S)`` images whose side ``P``
    divides."""
    height, width = images.shape[-2:]
    check.patch_grid(height, patch_size)
    check.patch_grid(width, patch_size)
    if height != width:
        raise ValueError(f"{who} expects square images, got {height} x {width}")
    return height // patch_size


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into patches row by row: ``(B, C, S, S) -> (B, N, C P P)``."""
    check.images(images, None, None, "patchify")
    batch, channels = images.shape[:2]
    grid = _square_grid(images, patch_size, "patchify")
    patches = images.reshape(
        batch, channels, grid, patch_size, grid, patch_size
    )
    patches = patches.permute(0, 2, 4, 1, 3, 5)  # (B, G_row, G_col, C, P, P)
    return patches.reshape(
        batch, grid * grid, channels * patch_size * patch_size
    )


def _check_patching(patch_size: int, channels: int) -> None:
    check.positive_int("patch_size", patch_size)
    check.positive_int("channels", channels)


def _check_patch_input(embedding: nn.Module, images: Tensor) -> None:
    name = type(embedding).__name__
    check.images(images, embedding.channels, None, name)
    # else a stride drops pixels
    _square_grid(images, embedding.patch_size, name)


class LinearPatchEmbedding(nn.Module):
    """Flatten each patch and apply one ``nn.Linear``: ``(B, C, S, S) -> (B, N,
    D)``."""

    def __init__(self, patch_size: int, channels: int, d_model: int) -> None:
        super().__init__()
        _check_patching(patch_size, channels)
        self.patch_size, self.channels = patch_size, channels
        self.proj = nn.Linear(channels * patch_size * patch_size, d_model)

    def forward(self, images: Tensor) -> Tensor:
        check.images(images, self.channels, None, type(self).__name__)
        return self.proj(patchify(images, self.patch_size))


class ConvPatchEmbedding(nn.Module):
    """The patch embedding as a ``Conv2d``, kernel = stride = ``P``.

    ``(B, C, S, S) -> (B, N, D)``.
    """

    def __init__(self, patch_size: int, channels: int, d_model: int) -> None:
        super().__init__()
        _check_patching(patch_size, channels)
        self.patch_size, self.channels = patch_size, channels
        self.proj = nn.Conv2d(
            channels, d_model, kernel_size=patch_size, stride=patch_size
        )

    def forward(self, images: Tensor) -> Tensor:
        _check_patch_input(self, images)
        # (B, D, G, G) -> (B, N, D)
        return self.proj(images).flatten(2).transpose(1, 2)


@torch.no_grad()
def copy_patch_weights(source: nn.Module, target: nn.Module) -> nn.Module:
    """Copy one patch embedding's weights into the other (linear <-> conv);
    return ``target``.

    A ``Conv2d`` weight ``(D, C, P, P)`` flattened row by row is the ``Linear``
    weight ``(D, C * P * P)``; the biases are the same vector.
    """
    kinds = (LinearPatchEmbedding, ConvPatchEmbedding)
    if not (isinstance(source, kinds) and isinstance(target, kinds)):
        raise TypeError(
            "copy_patch_weights copies between LinearPatchEmbedding and "
            "ConvPatchEmbedding, "
            f"got {type(source).__name__} and {type(target).__name__}"
        )
    shapes = [(m.patch_size, m.channels, m.proj.out_channels if isinstance(m, ConvPatchEmbedding)
               else m.proj.out_features) for m in (source, target)]  # fmt: skip
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"(patch_size, channels, d_model) differ: {shapes[0]} and "
            f"{shapes[1]}; build both "
            "patch embeddings with the same sizes"
        )
    target.proj.weight.copy_(
        source.proj.weight.reshape(target.proj.weight.shape)
    )
    target.proj.bias.copy_(source.proj.bias)
    return target


# -------------------------------------------------------------------- positions


def sinusoidal_2d_encoding(
    grid: int, d_model: int, base: float = 10000.0
) -> Tensor:
    """The ``(G * G, D)`` table of 2-D sinusoidal positions, patches numbered
    row by row.

    The first ``D / 2`` features are chapter 5's 1-D encoding of the patch's
    row, the last ``D / 2`` that of its column, so the dot product of two
    positions depends only on their row offset and their column offset. ``D``
    must be a multiple of 4.
    """
    check.positive_int("grid", grid)
    check.positive_int("d_model", d_model)
    if d_model % 4:
        raise ValueError(
            "d_model must be a multiple of 4 for 2-D sinusoidal positions "
            "(half for the row, "
            f"half for the column, each in sin/cos pairs), got {d_model}"
        )
    axis = sinusoidal_encoding(grid, d_model // 2, base)  # (G, D/2)
    rows = axis[:, None, :].expand(grid, grid, d_model // 2)
    columns = axis[None, :, :].expand(grid, grid, d_model // 2)
    return torch.cat([rows, columns], dim=-1).reshape(grid * grid, d_model)


class Sinusoidal2DPositionalEncoding(nn.Module):
    """Add :func:`sinusoidal_2d_encoding` (a buffer, never trained) to ``(B, N,
    D)`` patches."""

    pe: Tensor

    def __init__(self, grid: int, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.register_buffer("pe", sinusoidal_2d_encoding(grid, d_model))

    def forward(self, x: Tensor) -> Tensor:
        check.sequence(
            "x", x, self.d_model, type(self).__name__, self.pe.shape[0]
        )
        return x + self.pe.to(x.dtype)


# -------------------------------------------------------------------- the model


@dataclass(frozen=True, kw_only=True)
class ViTConfig:
    """Every size of a :class:`VisionTransformer` (the defaults: chapter 14's,
    for 8 x 8 digits).

    ``pool``: one of :data:`POOLS`, classify the output at a class token or the
    mean over the patches. ``positions``: one of :data:`POSITIONS`.
    ``patch_embedding``: one of :data:`PATCH_EMBEDDINGS` (the same map; the
    convolution is faster).
    """

    image_size: int = 8
    patch_size: int = 2
    channels: int = 1
    num_classes: int = 10
    d_model: int = 32
    num_layers: int = 2
    num_heads: int = 4
    ffn_width: int = 64
    dropout: float = 0.0
    pool: str = "cls"
    positions: str = "learned"
    patch_embedding: str = "conv"

    def __post_init__(self) -> None:
        check.patch_grid(self.image_size, self.patch_size)
        check.one_of("pool", self.pool, POOLS)
        check.one_of("positions", self.positions, POSITIONS)
        check.one_of("patch_embedding", self.patch_embedding, PATCH_EMBEDDINGS)

    def replace(self, **changes) -> ViTConfig:
        """A copy with some fields changed, e.g.
        ``config.replace(pool="mean")``."""
        return dataclasses.replace(self, **changes)

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    @property
    def num_tokens(self) -> int:
        return self.grid**2 + (self.pool == "cls")


def _check_vit_input(model: nn.Module, images: Tensor) -> None:
    config = model.config
    check.images(
        images, config.channels, config.image_size, type(model).__name__
    )
    check.module_dtype("images", images, model)  # float64 into float32


class VisionTransformer(nn.Module):
    """Patches, positions, chapter 6's encoder and a head: images to logits.

    ``(B, C, S, S) -> (B, K)``, ``K = num_classes`` logits. ``tokens(images)``
    is what enters the encoder, ``(B, T, D)``; ``attention_maps(images)`` the
    weights of every block, a list of ``(B, H, T, T)``.
    """

    def __init__(self, config: ViTConfig = ViTConfig()) -> None:
        super().__init__()
        check.instance("config", config, ViTConfig)
        self.config, num_patches, width = config, config.grid**2, config.d_model
        embed = (
            ConvPatchEmbedding
            if config.patch_embedding == "conv"
            else LinearPatchEmbedding
        )
        self.patch_embedding = embed(config.patch_size, config.channels, width)
        self.positions = {
            "learned": lambda: LearnedPositionalEmbedding(width, num_patches),
            "sinusoidal": lambda: Sinusoidal2DPositionalEncoding(
                config.grid, width
            ),
            "none": nn.Identity,
        }[config.positions]()
        self.cls_token = (
            nn.Parameter(torch.zeros(1, 1, width))
            if config.pool == "cls"
            else None
        )
        self.encoder = TransformerEncoder(
            TransformerConfig(
                d_model=width,
                num_heads=config.num_heads,
                num_layers=config.num_layers,
                ffn_width=config.ffn_width,
                dropout=config.dropout,
            )
        )
        self.head = nn.Linear(width, config.num_classes)

    def tokens(self, images: Tensor) -> Tensor:
        """The encoder's input: patches plus positions (after a class token)."""
        _check_vit_input(self, images)
        x = self.positions(self.patch_embedding(images))  # (B, N, D)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x

    def forward(self, images: Tensor) -> Tensor:
        x = self.encoder(self.tokens(images))  # (B, T, D)
        pooled = x[:, 0] if self.cls_token is not None else x.mean(dim=1)
        return self.head(pooled)

    @torch.no_grad()
    def attention_maps(self, images: Tensor) -> list[Tensor]:
        """Every block's weights on ``images``: a list of ``(B, H, T, T)``."""
        return self.encoder.get_attention_maps(self.tokens(images))


# ------------------------------------------------------------ reading attention


def _check_rollout(maps, residual) -> None:
    if not isinstance(maps, (list, tuple)) or not maps:
        raise TypeError(
            "maps must be a non-empty list of (B, H, T, T) weights, "
            "one tensor for each block"
        )
    check.real("residual", residual)
    if not 0.0 <= residual <= 1.0:
        raise ValueError(
            f"residual must be in [0, 1], got {residual}; 0.5 is the paper's"
        )
    shape = maps[0].shape
    for weights in maps:
        check.tensor("weights", weights, floating=True)
        if (
            weights.ndim != 4
            or weights.shape != shape
            or shape[-1] != shape[-2]
        ):
            raise ValueError(
                "every block's weights must have the same shape (B, H, T, T), "
                f"got {tuple(weights.shape)} after {tuple(shape)}"
            )


def attention_rollout(
    maps: list[Tensor] | tuple[Tensor, ...], residual: float = 0.5
) -> Tensor:
    """Attention rollout (Abnar and Zuidema, 2020): ``(B, T, T)``, how much each
    output token draws on each input token through all the blocks.

    Each block's weights ``(B, H, T, T)`` are averaged over the heads and mixed
    with the identity for the residual connection,
    ``A = (1 - residual) * mean_h(W) + residual * I``; the rollout is the
    product ``A_L ... A_2 A_1``. Every ``A`` is row-stochastic, so every row of
    the rollout sums to 1.
    """
    _check_rollout(maps, residual)
    shape = maps[0].shape
    identity = torch.eye(shape[-1], dtype=maps[0].dtype, device=maps[0].device)
    rollout = identity.expand(shape[0], -1, -1)
    for weights in maps:
        mixed = (1 - residual) * weights.mean(dim=1) + residual * identity
        # the later block acts on what the earlier ones mixed
        rollout = mixed @ rollout
    return rollout


def patch_attention(
    model: VisionTransformer, images: Tensor
) -> dict[str, Tensor]:
    """Attention over the image: ``{"heads": (B, L, H, G, G), "rollout": (B, G,
    G)}``.

    With a class token, the weights (and the rollout) of the class token's query
    over the patches: where the classified vector reads from. With mean pooling
    the classified vector is the mean of the patches' outputs, so the map is the
    mean of the patches' rows: how much that mean draws on each patch. The model
    must be in eval mode (``model.eval()``): in training mode, attention dropout
    would drop weights and the rollout would not be a row-stochastic product.
    """
    check.instance("model", model, VisionTransformer)
    if model.training:
        raise ValueError(
            "patch_attention reads a model in eval mode (no dropout in the "
            "weights it maps): "
            "call model.eval() first"
        )
    maps = model.attention_maps(images)
    # index of the first patch token
    first = 1 if model.cls_token is not None else 0
    grid = model.config.grid

    def over_patches(weights: Tensor) -> Tensor:  # (..., T, T) -> (..., G, G)
        rows = weights[..., 0, first:] if first else weights.mean(dim=-2)
        return rows.reshape(*rows.shape[:-1], grid, grid)

    heads = torch.stack([over_patches(weights) for weights in maps], dim=1)
    return {"heads": heads, "rollout": over_patches(attention_rollout(maps))}
