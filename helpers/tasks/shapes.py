"""Chapter 8's task: triangles and boxes, and the three models that compete on
it.

The data: François Fleuret's toy task for attention. Each sequence holds two
triangles and two boxes at random positions, with random heights and widths,
plus a little uniform noise. The target is the same picture, noise-free, with
each shape's height replaced by the mean height of the two shapes of its kind. A
network has to find the other shape of the same kind, wherever it is in the
sequence, which is what attention is good at and what a stack of small
convolutions is not.

The models mix information along a 1-D signal of shape ``[B, C, T]`` (``B``
batch, ``C`` channels, ``T`` positions, the ``Conv1d`` layout):

- :func:`make_shapes_cnn`: five convolutions; each output sees only 21
  neighbouring inputs;
- :func:`make_shapes_attention_model`: the same with the middle convolution
  replaced by :class:`ConvSelfAttention`, which lets every position look at
  every other one;
- :class:`ShapesLSTM`: a bidirectional LSTM that reads the signal one position
  at a time.

:class:`BatchAxisLSTM` reproduces the recurrent model of source 004, which runs
its LSTM along the *batch*; it is here only so that the chapter can show that
mistake, and its tests pin it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.masks import sliding_window_mask
from helpers.tasks import shipped_table
from helpers.training import adamw_cosine, evaluate, fit

__all__ = [
    "SHAPES_HEIGHT_RANGE",
    "SHAPES_WIDTH_RANGE",
    "ShapesData",
    "render_shapes",
    "shapes_collide",
    "make_shapes_dataset",
    "standardize",
    "partner_mean_height",
    "local_oracle",
    "local_oracle_mse",
    "ConvSelfAttention",
    "make_shapes_cnn",
    "make_shapes_attention_model",
    "ShapesLSTM",
    "BatchAxisLSTM",
    "SHAPES_MODELS",
    "train_shapes_model",
    "overfit_curve",
    "attention_enrichment",
    "SOURCE_VALID_PCT",
    "source_split",
    "full_scale_results",
    "seed_results",
    "overfit_results",
]

# ------------------------------------------------------------------------- data

SHAPES_HEIGHT_RANGE = (1.0, 25.0)
SHAPES_WIDTH_RANGE = (5.0, 11.0)


@dataclass(frozen=True)
class ShapesData:
    """A triangles-and-boxes data set and the shapes it was drawn from.

    Attributes:
        inputs: ``[N, 1, L]`` the noisy signals.
        targets: ``[N, 1, L]`` noise-free signals with each shape at its kind's mean height.
        triangles: ``[N, 2, 3]`` the two triangles as (center, height, width) in the inputs.
        boxes: ``[N, 2, 3]`` the two boxes, same layout.
        shape_ids: ``[N, L]`` which shape covers each position: 0 and 1 the triangles,
            2 and 3 the boxes, -1 the background. The kind is ``shape_ids // 2`` where >= 0.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    triangles: torch.Tensor
    boxes: torch.Tensor
    shape_ids: torch.Tensor

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def tensor_dataset(self) -> TensorDataset:
        """``TensorDataset(inputs, targets)``, ready for a ``DataLoader``."""
        return TensorDataset(self.inputs, self.targets)


def standardize(
    reference: ShapesData, *datasets: ShapesData
) -> tuple[list[TensorDataset], float]:
    """``datasets`` as ``TensorDataset(inputs, targets)``, on the scale of
    ``reference``.

    Inputs and targets are shifted and divided by the mean and the standard
    deviation of ``reference``'s inputs and targets together (the training
    set's, as chapter 8 and the blog post normalize), so that every set shares
    one scale and an MSE on it is comparable. Returns the sets and that standard
    deviation (divide a raw MSE by its square).
    """
    for data in (reference, *datasets):
        check.instance("data", data, ShapesData)
    values = torch.cat([reference.inputs, reference.targets])
    mean, std = values.mean().item(), values.std().item()
    sets = [
        TensorDataset((d.inputs - mean) / std, (d.targets - mean) / std)
        for d in datasets
    ]
    return sets, std


def _shape_profiles(
    triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each shape drawn alone: ``[N, K_triangles + K_boxes, L]`` heights,
    triangles first."""
    positions = torch.arange(
        seq_len, dtype=triangles.dtype, device=triangles.device
    )
    center, height, width = (triangles[..., i, None] for i in range(3))
    # A triangle is flat over the sample nearest its center and falls linearly
    # to 0 at half a width on each side, so its base is (width + 1) samples
    # wide.
    slope = 2.0 * height / width
    distance = (positions - center).abs()
    triangle = (height - slope * (distance - 0.5).clamp(min=0)).clamp(min=0)
    center, height, width = (boxes[..., i, None] for i in range(3))
    box = torch.where(
        (positions - center).abs() < width / 2, height, torch.zeros(())
    )
    return triangle, box


def _check_shapes(
    triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int
) -> None:
    """``[N, K, 3]`` tensors of (center, height, width), and a length."""
    for name, shapes in (("triangles", triangles), ("boxes", boxes)):
        if not isinstance(shapes, torch.Tensor):
            raise TypeError(
                f"{name} must be a tensor of shape [N, K, 3] (center, height, "
                f"width), got {type(shapes).__name__}"
            )
        if shapes.dim() != 3 or shapes.shape[2] != 3:
            raise ValueError(
                f"{name} must have shape [N, K, 3] holding (center, height, "
                f"width), got {tuple(shapes.shape)}"
            )
    if triangles.shape[0] != boxes.shape[0]:
        raise ValueError(
            f"triangles and boxes must describe the same N sequences, "
            f"got {triangles.shape[0]} and {boxes.shape[0]}"
        )
    check.positive_int("seq_len", seq_len)


def render_shapes(
    triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int = 100
) -> torch.Tensor:
    """Draw triangles and boxes on a zero background, noise-free: ``[N, 1, L]``.

    ``triangles`` and ``boxes`` are ``[N, K, 3]`` tensors of (center, height,
    width), in samples. Where shapes overlap the higher one wins (valid data
    sets have no overlaps).
    """
    _check_shapes(triangles, boxes, seq_len)
    triangle, box = _shape_profiles(triangles, boxes, seq_len)
    return torch.cat((triangle, box), dim=1).amax(dim=1, keepdim=True)


def shapes_collide(
    triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int = 100
) -> torch.Tensor:
    """``[N]`` booleans: True where two shapes overlap or touch (no empty sample
    between them)."""
    _check_shapes(triangles, boxes, seq_len)
    triangle, box = _shape_profiles(triangles, boxes, seq_len)
    covered = torch.cat((triangle, box), dim=1) > 0  # [N, S, L]
    # Widen every shape by one sample to the left, so touching shapes count as
    # colliding.
    widened = covered.clone()
    widened[..., :-1] |= covered[..., 1:]
    return (widened.sum(dim=1) > 1).any(dim=-1)


def _draw_shapes(
    count: int, seq_len: int, generator: torch.Generator
) -> torch.Tensor:
    """``[count, 2, 3]`` random (center, height, width) for two shapes of one
    kind."""
    low_h, high_h = SHAPES_HEIGHT_RANGE
    low_w, high_w = SHAPES_WIDTH_RANGE
    unit = torch.rand(count, 2, 3, generator=generator)
    margin = high_w / 2  # every shape lies inside the sequence
    low = torch.tensor([margin, low_h, low_w])
    high = torch.tensor([seq_len - margin, high_h, high_w])
    return low + unit * (high - low)


def make_shapes_dataset(
    num_samples: int,
    *,
    seq_len: int = 100,
    noise_level: float = 0.3,
    min_height_gap: float = 4.0,
    seed: int = 0,
) -> ShapesData:
    """Generate ``num_samples`` triangles-and-boxes sequences of length
    ``seq_len``.

    Candidates are drawn in batches and rejected when two shapes collide or when
    the two triangles, or the two boxes, differ in height by ``min_height_gap``
    or less (their mean would then be almost the input, an easy sample). Inputs
    get uniform noise in ``[-noise_level / 2, noise_level / 2]``; targets are
    noise-free. The same ``seed`` always gives the same data.
    """
    check.positive_int("num_samples", num_samples)
    check.positive_int("seq_len", seq_len)
    check.real("noise_level", noise_level)
    check.real("min_height_gap", min_height_gap)
    if seq_len < 4 * (SHAPES_WIDTH_RANGE[1] + 2):
        raise ValueError(
            f"seq_len={seq_len} is too short for four shapes up to "
            f"{SHAPES_WIDTH_RANGE[1]:g} "
            "samples wide; use seq_len >= "
            f"{math.ceil(4 * (SHAPES_WIDTH_RANGE[1] + 2))}"
        )
    if not 0 <= noise_level < 2 * SHAPES_HEIGHT_RANGE[0]:
        raise ValueError(
            f"noise_level must be in [0, {2 * SHAPES_HEIGHT_RANGE[0]:g}) so "
            "that noise stays "
            f"below the lowest shape, got {noise_level!r}"
        )
    max_gap = SHAPES_HEIGHT_RANGE[1] - SHAPES_HEIGHT_RANGE[0]
    if not 0 <= min_height_gap < max_gap:
        raise ValueError(
            f"min_height_gap must be in [0, {max_gap:g}), got "
            f"{min_height_gap!r}"
        )
    check.non_negative_int("seed", seed)

    generator = torch.Generator().manual_seed(seed)
    kept_triangles, kept_boxes, num_kept = [], [], 0
    while num_kept < num_samples:
        # About one candidate in six survives the checks on 100-sample
        # sequences.
        count = max(1024, 8 * (num_samples - num_kept))
        triangles = _draw_shapes(count, seq_len, generator)
        boxes = _draw_shapes(count, seq_len, generator)
        # Check BOTH kinds: source 004 tests the triangles twice and never the
        # boxes.
        gap_ok = (
            triangles[:, 0, 1] - triangles[:, 1, 1]
        ).abs() > min_height_gap
        gap_ok &= (boxes[:, 0, 1] - boxes[:, 1, 1]).abs() > min_height_gap
        valid = gap_ok & ~shapes_collide(triangles, boxes, seq_len)
        kept_triangles.append(triangles[valid])
        kept_boxes.append(boxes[valid])
        num_kept += int(valid.sum())
    triangles = torch.cat(kept_triangles)[:num_samples]
    boxes = torch.cat(kept_boxes)[:num_samples]

    clean = render_shapes(triangles, boxes, seq_len)
    noise = (torch.rand(clean.shape, generator=generator) - 0.5) * noise_level
    averaged_triangles, averaged_boxes = triangles.clone(), boxes.clone()
    averaged_triangles[:, :, 1] = triangles[:, :, 1].mean(dim=1, keepdim=True)
    averaged_boxes[:, :, 1] = boxes[:, :, 1].mean(dim=1, keepdim=True)
    targets = render_shapes(averaged_triangles, averaged_boxes, seq_len)

    triangle, box = _shape_profiles(triangles, boxes, seq_len)
    # [N, 4, L], shapes never overlap
    covered = torch.cat((triangle, box), dim=1) > 0
    shape_ids = torch.where(covered.any(dim=1), covered.int().argmax(dim=1), -1)
    return ShapesData(
        clean + noise, targets, triangles, boxes, shape_ids.long()
    )


def partner_mean_height(
    height: torch.Tensor, min_height_gap: float = 4.0
) -> torch.Tensor:
    """The expected height of a shape's partner, given the shape's own
    ``height``.

    Heights are drawn uniformly in :data:`SHAPES_HEIGHT_RANGE` and a pair is
    kept only when the two differ by more than ``min_height_gap``, so given one
    height ``h`` the partner's is uniform on ``[low, h - gap] U [h + gap,
    high]``; this is the mean of that set.
    """
    check.tensor("height", height, floating=True)
    check.real("min_height_gap", min_height_gap)
    low, high = SHAPES_HEIGHT_RANGE
    if not 0 <= min_height_gap < high - low:
        raise ValueError(
            f"min_height_gap must be in [0, {high - low:g}), got "
            f"{min_height_gap!r}"
        )
    height = height.double()
    below_end = (height - min_height_gap).clamp(low, high)  # [low, below_end]
    # [above_start, high]
    above_start = (height + min_height_gap).clamp(low, high)
    below, above = below_end - low, high - above_start
    return (
        below * (low + below_end) / 2 + above * (above_start + high) / 2
    ) / (below + above)


def local_oracle(data: ShapesData, min_height_gap: float = 4.0) -> torch.Tensor:
    """The best prediction of a model that sees each shape but never its
    partner: ``[N, 1, L]``.

    It knows every shape's position, width and height exactly, but not the
    height of the other shape of the same kind, so it draws each shape at the
    mean of its own height and its partner's *expected* height
    (:func:`partner_mean_height`). A target sample is linear in the mean height,
    so this conditional mean is the prediction with the lowest expected squared
    error: a floor for any model that cannot look as far as the partner.
    """
    check.instance("data", data, ShapesData)
    guessed = []
    for shapes in (data.triangles, data.boxes):
        shapes = shapes.double().clone()
        own = shapes[:, :, 1]
        shapes[:, :, 1] = (own + partner_mean_height(own, min_height_gap)) / 2
        guessed.append(shapes)
    return render_shapes(*guessed, data.inputs.shape[-1]).to(data.targets.dtype)


def local_oracle_mse(data: ShapesData, std: float) -> float:
    """The :func:`local_oracle`'s mean squared error on ``data``, on the scale
    of a standardized set.

    ``std`` is the standard deviation that :func:`standardize` divides by (the
    training set's), so the result compares with the MSE of a model trained on
    the standardized sets: the floor of chapters 8 and 13 for a model that
    cannot look as far as the partner.
    """
    error = (local_oracle(data) - data.targets) / std
    return (error**2).mean().item()


# ----------------------------------------------------------------------- models


def _check_signal(x: torch.Tensor, channels: int, who: str) -> None:
    """A batch of signals in Conv1d's layout ``[B, channels, T]``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who} expects a tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[1] != channels:
        raise ValueError(
            f"{who} expects input of shape [B, {channels}, T] (Conv1d layout), "
            f"got {tuple(x.shape)}; add the channel axis with "
            "x.unsqueeze(1) if it is missing"
        )


def _check_sizes(**sizes: int) -> None:
    """Positive sizes, and an odd ``kernel_size`` (padding keeps the length)."""
    for name, value in sizes.items():
        check.positive_int(name, value)
    kernel_size = sizes.get("kernel_size", 1)
    if kernel_size % 2 == 0:
        raise ValueError(
            "kernel_size must be odd so that padding keeps the length, "
            f"got {kernel_size}"
        )


def _check_attention_layer(
    in_channels, out_channels, key_channels, scaled, window
):
    """The arguments of :class:`ConvSelfAttention`."""
    _check_sizes(
        in_channels=in_channels,
        out_channels=out_channels,
        key_channels=key_channels,
    )
    check.boolean("scaled", scaled)
    if window is not None:
        check.positive_int("window", window)


class ConvSelfAttention(nn.Module):
    """Single-head self-attention on a ``[B, C, T]`` signal, 1x1 convs as Q/K/V.

    A ``Conv1d`` with ``kernel_size=1`` is a linear map applied at every
    position, so queries and keys are ``[B, key_channels, T]`` and values
    ``[B, out_channels, T]``. The weights
    ``softmax(Q^T K / sqrt(key_channels))`` are ``[B, T, T]``, one row per query
    position, summing to 1 over key positions; ``scaled=False`` drops the
    ``1/sqrt(key_channels)``, as source 004 does. No mask by default: every
    position may attend to every position; ``window=w`` lets position i attend
    only to positions less than w away, |i - j| < w (chapter 13's local
    attention, :func:`helpers.masks.sliding_window_mask`).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        key_channels: int,
        scaled: bool = True,
        window: int | None = None,
    ):
        super().__init__()
        _check_attention_layer(
            in_channels, out_channels, key_channels, scaled, window
        )
        self.query = nn.Conv1d(
            in_channels, key_channels, kernel_size=1, bias=False
        )
        self.key = nn.Conv1d(
            in_channels, key_channels, kernel_size=1, bias=False
        )
        self.value = nn.Conv1d(
            in_channels, out_channels, kernel_size=1, bias=False
        )
        self.scaled = scaled
        self.window = window

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The attention weights ``[B, T_query, T_key]`` of ``[B, C_in, T]``."""
        _check_signal(x, self.query.in_channels, type(self).__name__)
        queries, keys = self.query(x), self.key(x)  # [B, key_channels, T]
        # [B, T, T]: scores[b, i, j] = q_i . k_j
        scores = queries.transpose(1, 2) @ keys
        if self.scaled:
            scores = scores / math.sqrt(self.query.out_channels)
        if self.window is not None:
            local = sliding_window_mask(
                x.shape[-1], self.window, causal=False, device=x.device
            )
            scores = scores.masked_fill(~local, float("-inf"))
        return scores.softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self.attention(x)  # [B, T, T]
        values = self.value(x)  # [B, out_channels, T]
        # Output position i is the weighted mean of the values:
        # sum_j weights[b, i, j] v_j.
        return values @ weights.transpose(1, 2)  # [B, out_channels, T]

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.query.in_channels}, "
            f"out_channels={self.value.out_channels}, "
            f"key_channels={self.query.out_channels}, scaled={self.scaled}"
            + ("" if self.window is None else f", window={self.window}")
        )


def _conv(in_channels: int, out_channels: int, kernel_size: int) -> nn.Conv1d:
    return nn.Conv1d(
        in_channels, out_channels, kernel_size, padding=kernel_size // 2
    )


def make_shapes_cnn(channels: int = 64, kernel_size: int = 5) -> nn.Sequential:
    """Five ``Conv1d`` layers with ReLUs: ``[B, 1, T] -> [B, 1, T]``.

    62,337 parameters with the defaults. Each output position depends on
    ``5 * (kernel_size - 1) + 1`` input positions (21).
    """
    _check_sizes(channels=channels, kernel_size=kernel_size)
    return nn.Sequential(
        _conv(1, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, 1, kernel_size),
    )


def make_shapes_attention_model(
    channels: int = 64,
    kernel_size: int = 5,
    key_channels: int = 96,
    scaled: bool = True,
    window: int | None = None,
) -> nn.Sequential:
    """:func:`make_shapes_cnn` with its middle convolution made self-attention.

    ``[B, 1, T] -> [B, 1, T]``, 58,177 parameters with the defaults. Index 4 of
    the returned ``nn.Sequential`` is the :class:`ConvSelfAttention` layer and
    ``model[:4]`` computes its input, so ``model[4].attention(model[:4](x))``
    gives the attention weights. ``window`` makes the attention local (see
    :class:`ConvSelfAttention`); the parameters are the same.
    """
    _check_sizes(
        channels=channels, kernel_size=kernel_size, key_channels=key_channels
    )
    return nn.Sequential(
        _conv(1, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        ConvSelfAttention(
            channels, channels, key_channels, scaled=scaled, window=window
        ),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, 1, kernel_size),
    )


class ShapesLSTM(nn.Module):
    """A bidirectional LSTM over the ``T`` positions of a ``[B, 1, T]`` signal.

    Every position is one time step with one input feature; a linear layer maps
    the two directions' hidden states to the output value.
    ``[B, 1, T] -> [B, 1, T]``; with the defaults (hidden_size=44,
    num_layers=2) it has 63,801 parameters, close to the CNN's. Samples are
    independent: no state is carried from one batch or sample to the next.
    """

    def __init__(self, hidden_size: int = 44, num_layers: int = 2):
        super().__init__()
        _check_sizes(hidden_size=hidden_size, num_layers=num_layers)
        self.lstm = nn.LSTM(
            input_size=1,
            hidden_size=hidden_size,
            num_layers=num_layers,
            batch_first=True,  # [B, T, features]; default: [T, B, features]
            bidirectional=True,
        )
        self.head = nn.Linear(2 * hidden_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_signal(x, 1, type(self).__name__)
        # [B, T, 1] -> [B, T, 2 * hidden_size]
        hidden, _ = self.lstm(x.transpose(1, 2))
        return self.head(hidden).transpose(1, 2)  # [B, T, 1] -> [B, 1, T]


class BatchAxisLSTM(nn.Module):
    """Source 004's LSTM, kept to show its mistake. Do not use it as a baseline.

    It feeds ``[B, 1, T]`` to ``nn.LSTM(T, hidden_size)`` without
    ``batch_first``, and ``nn.LSTM`` reads that as ``[seq_len=B, batch=1,
    features=T]``: the recurrence runs along the *batch*, each sample is a
    single step of ``T`` features, and the state flows from one sample into the
    next. It also keeps the final state (detached) for the next call, as the
    source does, so a prediction depends on every sample seen before it.
    ``reset()`` clears it.
    """

    def __init__(self, seq_len: int = 100, hidden_size: int = 128):
        super().__init__()
        check.positive_int("seq_len", seq_len)
        check.positive_int("hidden_size", hidden_size)
        self.lstm = nn.LSTM(seq_len, hidden_size)
        self.head = nn.Linear(hidden_size, seq_len)
        self.state: tuple[torch.Tensor, torch.Tensor] | None = None

    def reset(self) -> None:
        self.state = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_signal(x, 1, type(self).__name__)
        # x read as [seq_len=B, batch=1, T]
        hidden, state = self.lstm(x, self.state)
        self.state = tuple(s.detach() for s in state)
        return self.head(hidden)  # [B, 1, T]


# ------------------------------------------------------------ reading attention


def _check_weights_and_ids(
    weights: torch.Tensor, shape_ids: torch.Tensor
) -> None:
    """The arguments of :func:`attention_enrichment`: ``[N, T, T]`` and ``[N, T]``."""
    check.tensor("weights", weights, floating=True)
    if (
        weights.dim() != 3
        or shape_ids.shape != weights.shape[:2]
        or weights.shape[1] != weights.shape[2]
    ):
        raise ValueError(
            "weights must be [N, T, T] and shape_ids [N, T], got "
            f"{tuple(weights.shape)} and {tuple(shape_ids.shape)}"
        )


def attention_enrichment(
    weights: torch.Tensor, shape_ids: torch.Tensor
) -> pd.DataFrame:
    """Where the query positions inside shapes attend, over uniform's share.

    ``weights`` ``[N, T, T]`` (rows: queries, summing to 1), ``shape_ids``
    ``[N, T]`` as in :class:`ShapesData`. For queries in a triangle (row
    "triangle") or a box (row "box"), each column is the mean weight on a region
    (the query's own shape, the other shape of its kind, the two shapes of the
    other kind, the background) divided by the mean share of positions that
    region covers, which is what uniform attention would give: 1 is no
    preference.
    """
    _check_weights_and_ids(weights, shape_ids)
    # -1 background, 0 triangle, 1 box
    kinds = torch.div(shape_ids, 2, rounding_mode="floor")
    query_ids, key_ids = shape_ids[:, :, None], shape_ids[:, None, :]
    query_kinds, key_kinds = kinds[:, :, None], kinds[:, None, :]
    regions = {  # [N, T_query, T_key] booleans
        "own shape": key_ids == query_ids,
        "partner": key_ids == (query_ids ^ 1),
        "other kind": key_kinds == 1 - query_kinds,
        "background": (key_kinds == -1).expand_as(weights),
    }
    rows = {}
    for kind, kind_name in ((0, "triangle"), (1, "box")):
        queries = kinds == kind
        rows[kind_name] = {
            region: (weights * mask).sum(-1)[queries].mean().item()
            / mask.float().mean(-1)[queries].mean().item()
            for region, mask in regions.items()
        }
    return pd.DataFrame(rows).T.rename_axis("query in a")


# --------------------------------------------------------------------- training

SHAPES_MODELS = {
    "CNN": make_shapes_cnn,
    "CNN + attention": make_shapes_attention_model,
    "bidirectional LSTM": ShapesLSTM,
    "batch-axis LSTM": BatchAxisLSTM,
}


def _check_run(name: str, seed: int, window: int | None) -> None:
    """The model, seed and window of :func:`train_shapes_model`."""
    check.one_of("name", name, sorted(SHAPES_MODELS))
    check.non_negative_int("seed", seed)
    if window is not None and name != "CNN + attention":
        raise ValueError(
            f"window={window} applies to the attention layer of "
            f"'CNN + attention' only, got name={name!r}; leave window=None "
            "for the other models"
        )


def train_shapes_model(
    name: str,
    seed: int,
    train_set: TensorDataset,
    val_set: TensorDataset,
    test_set: TensorDataset,
    *,
    epochs: int = 2,
    batch_size: int = 32,
    lr: float = 3e-3,
    warmup_fraction: float = 0.05,
    clip_grad_norm: float = 1.0,
    log_every: int = 25,
    device=None,
    window: int | None = None,
):
    """Chapter 8's recipe for one run: return ``(model, history, test_mse)``.

    The model ``SHAPES_MODELS[name]`` is initialized from ``seed``, which also
    orders the batches; then Adam at ``lr`` with a linear warm-up over a
    ``warmup_fraction`` of the steps and a cosine decay
    (:func:`helpers.training.cosine_warmup_schedule`), gradients clipped to
    ``clip_grad_norm``, mean squared error, :func:`helpers.training.fit` for
    ``epochs`` passes (validation MSE at the end of each). The model comes back
    on the CPU in eval mode. A module-level function, so that
    :func:`helpers.parallel.run_in_processes` can run several side by side.
    ``window`` (only for "CNN + attention") makes its attention local, as in
    chapter 13; None, the default, is chapter 8's model.
    """
    _check_run(name, seed, window)
    torch.manual_seed(seed)
    model = (
        SHAPES_MODELS[name]()
        if window is None
        else make_shapes_attention_model(window=window)
    )
    order = torch.Generator().manual_seed(seed)
    loader = DataLoader(train_set, batch_size, shuffle=True, generator=order)
    total_steps = epochs * len(loader)
    optimizer, schedule = adamw_cosine(  # weight decay 0: Adam
        model, lr, round(warmup_fraction * total_steps), total_steps, 0.0
    )
    history = fit(
        model,
        loader,
        loss_fn=nn.MSELoss(),
        optimizer=optimizer,
        epochs=epochs,
        scheduler=schedule,
        val_loader=DataLoader(val_set, batch_size=500),
        clip_grad_norm=clip_grad_norm,
        device=device,
        progress=False,
        log_every=log_every,
    )
    test_mse = evaluate(
        model, DataLoader(test_set, batch_size=500), nn.MSELoss()
    )["loss"]
    return model.cpu().eval(), history.assign(model=name, seed=seed), test_mse


def overfit_curve(
    name: str,
    seed: int,
    train_set: TensorDataset,
    steps: int = 200,
    lr: float = 3e-3,
    log_every: int = 1,
    device=None,
) -> dict[int, float]:
    """The check before a long run: does the loss fall on 20 sequences?

    The model ``SHAPES_MODELS[name]``, initialized from ``seed``, trained with
    Adam at ``lr`` for ``steps`` steps on the first 20 sequences of
    ``train_set`` (one batch), on ``device`` (default: the CPU). Returns
    ``{step: loss}``, the mean squared error before the update of steps 0,
    ``log_every``, ``2 * log_every``, ... and of the last step. Chapter 8's
    check is the default (200 steps at 3e-3, every loss); source 004's is 5,001
    steps at 1e-3 logged every 1,000 (its loop ``for epoch in range(5001)``
    prints before each step). Chapter 8 and ``scripts/margins.py shapes``
    measure both with it.
    """
    check.one_of("name", name, sorted(SHAPES_MODELS))
    check.positive_int("steps", steps)
    check.positive_int("log_every", log_every)
    device = torch.device("cpu") if device is None else device
    torch.manual_seed(seed)
    model = SHAPES_MODELS[name]().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    inputs, targets = (t[:20].to(device) for t in train_set.tensors)
    logged = {}
    for step in range(steps):
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % log_every == 0 or step == steps - 1:
            logged[step] = loss.item()
    return logged


# ------------------------------------------------------------------- full scale

SOURCE_VALID_PCT = 0.2
"""Source 004's validation share: fastai's ``RandomSplitter(valid_pct=0.2)``."""


def source_split(
    count: int, valid_pct: float = SOURCE_VALID_PCT, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random split of ``range(count)``, as fastai's ``RandomSplitter``
    makes one.

    Returns (training indices, validation indices), the validation part
    ``int(valid_pct * count)`` long. ``scripts/margins.py shapes --part full``
    splits the blog post's 25,000 sequences with it, and chapter 8 takes the
    same validation sequences to compute their oracle's floor.
    """
    if not 0 < valid_pct < 1:
        raise ValueError(
            f"valid_pct must be a fraction between 0 and 1, got {valid_pct}"
        )
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    num_valid = int(valid_pct * count)
    return order[num_valid:], order[:num_valid]


FULL_SCALE_FILE = "shapes_full.csv"
SEEDS_FILE = "shapes_seeds.csv"


def full_scale_results() -> pd.DataFrame:
    """Fifty epochs at the blog post's scale, as measured by
    ``scripts/margins.py shapes --part full``.

    One row per model, seed and epoch: the validation MSE (the source's protocol
    only) and the test MSE (normalized) after that epoch, the seconds of
    training so far, and the machine and command that produced it (its
    ``--protocol`` says which recipe, the source's where it names none). The
    file ships with the package
    (``helpers/tasks/shapes_full.csv``), so that chapter 8 draws its figure of
    hours of training anywhere, Colab included, without training anything.
    """
    return shipped_table(
        FULL_SCALE_FILE,
        "python scripts/margins.py shapes --part full --out "
        f"helpers/tasks/{FULL_SCALE_FILE}",
    )


def seed_results() -> pd.DataFrame:
    """Chapter 8's recipe on five seeds of every model, as measured by
    ``scripts/margins.py shapes``: one row per seed with each model's test MSE,
    the ratios and attention enrichments the chapter asserts, the machine and
    the command.
    """
    return shipped_table(
        SEEDS_FILE,
        f"python scripts/margins.py shapes --out helpers/tasks/{SEEDS_FILE}",
    )


OVERFIT_FILE = "shapes_overfit.csv"


def overfit_results() -> pd.DataFrame:
    """Source 004's single-batch check (Adam at 1e-3 for 5,000 steps on 20
    sequences) on the chapter's three proper models, as measured by
    ``scripts/margins.py shapes --part overfit``: one row per model, seed and
    logged step (every 1,000) with the training loss.
    """
    return shipped_table(
        OVERFIT_FILE,
        "python scripts/margins.py shapes --part overfit --seeds 3 "
        f"--out helpers/tasks/{OVERFIT_FILE}",
    )
