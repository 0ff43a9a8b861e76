"""Chapter 9's first task (source 001): the corners of a square, clockwise or
not.

Each sequence visits the four corners of the square ``[-1, 1]^2`` one after
another, starting from a random corner and turning clockwise or
counter-clockwise, with Gaussian noise on every point. Given the first two
points (the *source*), a model predicts the last two (the *target*). Shapes:
``B`` batch, ``D`` model width; points are ``(B, T, 2)`` floats.

:class:`CornerTransformer` is an encoder-decoder on points: a linear layer lifts
each point to ``D`` features, the sinusoidal encoding marks positions, and a
linear layer maps the decoder's output back to the plane. ``residual=False``
builds source 001's layers instead, which have no residual connections and no
normalization (the chapter measures what that costs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.attention import MultiHeadAttention
from helpers.masks import causal_mask
from helpers.positional import SinusoidalPositionalEncoding
from helpers.training import fit, shuffled_loader
from helpers.transformer import (
    FeedForward,
    TransformerConfig,
    TransformerDecoder,
    TransformerEncoder,
)

__all__ = [
    "CORNERS",
    "make_corner_sequences",
    "teacher_forcing_split",
    "CORNER_MODEL",
    "CornerTransformer",
    "CornerConfig",
    "train_corners",
    "free_running_mse",
    "reflection_rule",
    "follows_the_rule",
    "follows_the_rule_by_case",
    "cross_attention_focus",
]

CORNERS = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
"""The square's corners in clockwise order: bottom-left, top-left, top-right,
bottom-right."""


def make_corner_sequences(
    num_sequences: int, generator: torch.Generator, noise: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """``points (N, 4, 2)`` and ``clockwise (N,)`` (bool): noisy walks around
    the square.

    Sequence ``n`` starts at a uniformly random corner and visits the other
    three clockwise (``clockwise[n]``) or counter-clockwise; every coordinate
    gets ``N(0, noise^2)`` noise. Draw each split from its own ``generator``
    (different seeds) for a held-out test set.
    """
    check.positive_int("num_sequences", num_sequences)
    check.generator(generator)
    check.non_negative_number("noise", noise, "source 001 uses 0.1")
    start = torch.randint(4, (num_sequences,), generator=generator)
    clockwise = torch.randint(2, (num_sequences,), generator=generator).bool()
    step = torch.where(clockwise, 1, -1)
    # (N, 4) corner indices
    order = (start[:, None] + step[:, None] * torch.arange(4)) % 4
    points = CORNERS[order] + noise * torch.randn(
        num_sequences, 4, 2, generator=generator
    )
    return points, clockwise


def teacher_forcing_split(points: torch.Tensor) -> TensorDataset:
    """``TensorDataset(source, decoder_input, target)`` for teacher forcing.

    ``source`` is points 1-2, ``target`` points 3-4, and ``decoder_input`` is
    the target shifted right by one: the last source point, then the first
    target point. At step ``t`` the decoder reads the true point ``t - 1`` and
    predicts point ``t``.
    """
    check.tensor("points", points, floating=True, min_ndim=3)
    if points.shape[1:] != (4, 2):
        raise ValueError(f"points must be (N, 4, 2), got {tuple(points.shape)}")
    return TensorDataset(points[:, :2], points[:, 1:3], points[:, 2:])


CORNER_MODEL = TransformerConfig(
    d_model=16, num_heads=2, num_layers=1, ffn_width=32
)
"""The corner model's stacks: source 001's sizes, the book's pre-LN blocks."""


class _PlainEncoderLayer(nn.Module):
    """Source 001's encoder layer: ``ffn(attention(x))``, no residual, no
    normalization."""

    def __init__(self, d_model: int, num_heads: int, ffn_width: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=True)
        self.ffn = FeedForward(d_model, ffn_width)

    def forward(self, x, mask=None):
        return self.ffn(self.self_attn(x, x, x, mask))


class _PlainDecoderLayer(nn.Module):
    """Source 001's decoder layer: ``ffn(cross(self(x), memory))``, no residual,
    no norm."""

    def __init__(self, d_model: int, num_heads: int, ffn_width: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=True)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, bias=True)
        self.ffn = FeedForward(d_model, ffn_width)

    def forward(self, target, memory, target_mask=None, memory_mask=None):
        x = self.self_attn(target, target, target, target_mask)
        return self.ffn(self.cross_attn(x, memory, memory, memory_mask))


class CornerTransformer(nn.Module):
    """An encoder-decoder Transformer on 2-D points (source 001's model, the
    book's blocks).

    ``forward(source (B, Ts, 2), decoder_input (B, Tt, 2))`` returns the
    predicted points ``(B, Tt, 2)`` under teacher forcing; :meth:`generate`
    predicts without it, one point at a time. The encoder and decoder are the
    stacks ``config`` describes (a
    :class:`helpers.transformer.TransformerConfig`, :data:`CORNER_MODEL` unless
    given), or, with ``residual=False``, one layer each of source 001's kind,
    of the config's widths.
    """

    def __init__(
        self, config: TransformerConfig | None = None, residual: bool = True
    ) -> None:
        super().__init__()
        config = CORNER_MODEL if config is None else config
        check.instance("config", config, TransformerConfig)
        check.boolean("residual", residual)
        self.residual = residual
        d_model, num_heads = config.d_model, config.num_heads
        ffn_width = config.ffn_width or 4 * d_model
        self.input_proj = nn.Linear(2, d_model)
        self.positional = SinusoidalPositionalEncoding(d_model, max_len=16)
        if residual:
            self.encoder = TransformerEncoder(config)
            self.decoder = TransformerDecoder(config)
        else:
            self.encoder = _PlainEncoderLayer(d_model, num_heads, ffn_width)
            self.decoder = _PlainDecoderLayer(d_model, num_heads, ffn_width)
        self.output_proj = nn.Linear(d_model, 2)

    def _lift(self, points: torch.Tensor) -> torch.Tensor:
        check.tensor("points", points, floating=True, min_ndim=3)
        if points.ndim != 3 or points.shape[-1] != 2:
            raise ValueError(
                f"points must be (B, T, 2), got {tuple(points.shape)}"
            )
        return self.positional(self.input_proj(points))

    def encode(self, source: torch.Tensor) -> torch.Tensor:
        return self.encoder(self._lift(source))

    def decode(
        self, decoder_input: torch.Tensor, memory: torch.Tensor
    ) -> torch.Tensor:
        target_mask = causal_mask(decoder_input.shape[1], decoder_input.device)
        return self.output_proj(
            self.decoder(self._lift(decoder_input), memory, target_mask)
        )

    def forward(
        self, source: torch.Tensor, decoder_input: torch.Tensor
    ) -> torch.Tensor:
        return self.decode(decoder_input, self.encode(source))

    @torch.no_grad()
    def generate(
        self, source: torch.Tensor, num_points: int = 2
    ) -> torch.Tensor:
        """Free-running prediction ``(B, num_points, 2)``: each step reads its
        own outputs."""
        memory = self.encode(source)
        # the decoder starts from the last source point
        written = source[:, -1:]
        check.positive_int("num_points", num_points)
        for _ in range(num_points):
            next_point = self.decode(written, memory)[:, -1:]
            written = torch.cat([written, next_point], dim=1)
        return written[:, 1:]

    @torch.no_grad()
    def get_attention_maps(
        self, source: torch.Tensor, decoder_input: torch.Tensor
    ) -> dict:
        """``"encoder"``, ``"decoder"`` and ``"cross"`` weights per block
        (residual model)."""
        if not self.residual:
            raise ValueError(
                "attention maps are only recorded for the residual model"
            )
        encoder_maps = self.encoder.get_attention_maps(self._lift(source))
        target_mask = causal_mask(decoder_input.shape[1], decoder_input.device)
        decoder_maps = self.decoder.get_attention_maps(
            self._lift(decoder_input), self.encode(source), target_mask
        )
        return {
            "encoder": encoder_maps,
            "decoder": [weights for weights, _ in decoder_maps],
            "cross": [weights for _, weights in decoder_maps],
        }


@dataclass(frozen=True, kw_only=True)
class CornerConfig:
    """Every choice of one square-corner training run: the model's ``model``
    and ``residual``, then the training's."""

    model: TransformerConfig = CORNER_MODEL
    residual: bool = True
    batch_size: int = 32
    lr: float = 1e-2
    epochs: int = 60
    seed: int = 0


def train_corners(
    config: CornerConfig, train_points: torch.Tensor, val_points=None
):
    """Train a :class:`CornerTransformer` with teacher forcing; return ``(model,
    history)``.

    Adam, mean squared error on the two target points, a shuffled loader seeded
    by ``config.seed`` (as is the initialization), one history row per epoch.
    """
    check.instance("config", config, CornerConfig)
    torch.manual_seed(config.seed)
    model = CornerTransformer(config.model, config.residual)
    train_set = teacher_forcing_split(train_points)
    loader = shuffled_loader(
        train_set, config.batch_size, config.seed, drop_last=False
    )
    val_loader = None
    if val_points is not None:
        val_loader = DataLoader(
            teacher_forcing_split(val_points), batch_size=len(val_points)
        )
    history = fit(
        model,
        loader,
        loss_fn=F.mse_loss,
        optimizer=torch.optim.Adam(model.parameters(), lr=config.lr),
        epochs=config.epochs,
        val_loader=val_loader,
        progress=False,
        log_every=len(loader),
    )
    return model.eval(), history


@torch.no_grad()
def free_running_mse(
    model: CornerTransformer, points: torch.Tensor
) -> tuple[float, float]:
    """Mean squared error on points 3-4: ``(teacher_forced, free_running)``.

    Teacher forced: the decoder reads the *true* point 3 to predict point 4.
    Free running: it reads its own prediction of point 3, as it must when no
    answer is given.
    """
    source, decoder_input, target = teacher_forcing_split(points).tensors
    teacher_forced = F.mse_loss(model(source, decoder_input), target).item()
    free_running = F.mse_loss(model.generate(source, 2), target).item()
    return teacher_forced, free_running


def reflection_rule(source: torch.Tensor) -> torch.Tensor:
    """The fixed rule with no parameters: point ``t + 2`` is the corner opposite
    point ``t``.

    ``source (B, 2, 2)`` holds points 1-2; the result ``(B, 2, 2)`` is
    ``-sign(source)``, points 3-4 without noise: its mean squared error is the
    noise's variance, the floor.
    """
    check.tensor("source", source, floating=True, min_ndim=3)
    return -source.sign()


@torch.no_grad()
def follows_the_rule(
    model: CornerTransformer, points: torch.Tensor, generator: torch.Generator
) -> float:
    """How often the model still predicts the corner opposite point 1 when point
    2 is a random corner (so that the two given points no longer fix a
    direction).

    A model that reads point 1 for point 3, as :func:`reflection_rule` does,
    scores 1; one that guesses scores about 1/4.
    """
    hits, _ = _rule_hits(model, points, generator)
    return hits.float().mean().item()


@torch.no_grad()
def follows_the_rule_by_case(
    model: CornerTransformer, points: torch.Tensor, generator: torch.Generator
) -> dict[str, float]:
    """:func:`follows_the_rule` (the same draws) split by where point 2 fell.

    ``"adjacent"``: a corner next to point 1's, so the two points show a
    direction; ``"same"``: point 1's own corner; ``"opposite"``: the corner
    opposite it. In the last two the rule's answer is the corner opposite point
    2 and point 2 itself: a model whose point 3 depends on point 2 alone scores
    at most 1 on ``same + opposite``, the rule 2.
    """
    hits, offset = _rule_hits(model, points, generator)
    cases = {
        "adjacent": offset % 2 == 1,
        "same": offset == 0,
        "opposite": offset == 2,
    }
    return {
        name: hits[case].float().mean().item() for name, case in cases.items()
    }


@torch.no_grad()
def cross_attention_focus(
    model: CornerTransformer, points: torch.Tensor
) -> float:
    """How much cross-attention reads the given point two steps back.

    Under teacher forcing on ``points (B, 4, 2)``, query ``t`` of the decoder
    (which predicts point ``t + 3``) can read source point ``t``, the corner
    opposite the one it predicts: the point :func:`reflection_rule` reads.
    Averaged over the sequences, each query's weight there in its best head;
    the smaller of the two queries' (uniform attention: 0.5). The weights are
    the last decoder block's (the chapter's model has one). Chapter 9 and
    ``scripts/margins.py encoder-decoder`` measure it with this function.
    """
    source, decoder_input, _ = teacher_forcing_split(points).tensors
    cross = model.get_attention_maps(source, decoder_input)["cross"][-1]
    mean = cross.mean(dim=0)  # (H, 2, 2): over the sequences
    on_point_t = mean.diagonal(dim1=-2, dim2=-1)  # (H, 2): query t, key t
    return on_point_t.max(dim=0).values.min().item()


def _rule_hits(model, points, generator):
    """Per sequence: does point 3 land nearest the corner opposite point 1, and
    how many corners (0-3, clockwise) point 2 sits from point 1's, with point 2
    a random corner."""
    check.generator(generator)
    source = teacher_forcing_split(points).tensors[0].clone()
    second = torch.randint(4, (len(source),), generator=generator)
    source[:, 1] = CORNERS[second]
    predicted = model.generate(source, 1)[:, 0]  # (B, 2): point 3
    nearest = torch.cdist(predicted, CORNERS).argmin(dim=-1)
    opposite = torch.cdist(-source[:, 0], CORNERS).argmin(dim=-1)
    first = torch.cdist(source[:, 0], CORNERS).argmin(dim=-1)
    return nearest == opposite, (second - first) % 4
