"""Synthetic data sets of the book, generated in code (nothing is downloaded).

Shape conventions: ``N`` samples, ``L`` sequence length; 1-D signals are stored as
``[N, 1, L]`` (one channel), the layout ``torch.nn.Conv1d`` expects.

Triangles and boxes (chapter 8)
-------------------------------
François Fleuret's toy task for attention: each sequence holds two triangles and two boxes at
random positions, with random heights and widths, plus a little uniform noise. The target is
the same picture, noise-free, with each shape's height replaced by the mean height of the two
shapes of its kind. A network has to find the other shape of the same kind, wherever it is in
the sequence, which is what attention is good at and what a stack of small convolutions is not.

Public names: :func:`make_shapes_dataset`, :class:`ShapesData`, :func:`render_shapes`,
:func:`shapes_collide`, and the ranges ``SHAPES_HEIGHT_RANGE`` and ``SHAPES_WIDTH_RANGE``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.data import TensorDataset

__all__ = [
    "SHAPES_HEIGHT_RANGE",
    "SHAPES_WIDTH_RANGE",
    "ShapesData",
    "render_shapes",
    "shapes_collide",
    "make_shapes_dataset",
]

# --- triangles and boxes (chapter 8) -----------------------------------------------------------

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


def _check_shapes(triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int) -> None:
    for name, shapes in (("triangles", triangles), ("boxes", boxes)):
        if not isinstance(shapes, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(shapes).__name__}")
        if shapes.dim() != 3 or shapes.shape[2] != 3:
            raise ValueError(
                f"{name} must have shape [N, K, 3] holding (center, height, width), "
                f"got {tuple(shapes.shape)}"
            )
    if triangles.shape[0] != boxes.shape[0]:
        raise ValueError(
            f"triangles and boxes must describe the same N sequences, "
            f"got {triangles.shape[0]} and {boxes.shape[0]}"
        )
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")


def _shape_profiles(
    triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each shape drawn alone: ``[N, K_triangles + K_boxes, L]`` heights, triangles first."""
    positions = torch.arange(seq_len, dtype=triangles.dtype, device=triangles.device)
    center, height, width = (triangles[..., i, None] for i in range(3))
    # A triangle is flat over the sample nearest its center and falls linearly to 0 at
    # half a width on each side, so its base is (width + 1) samples wide.
    slope = 2.0 * height / width
    distance = (positions - center).abs()
    triangle = (height - slope * (distance - 0.5).clamp(min=0)).clamp(min=0)
    center, height, width = (boxes[..., i, None] for i in range(3))
    box = torch.where((positions - center).abs() < width / 2, height, torch.zeros(()))
    return triangle, box


def render_shapes(triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int = 100) -> torch.Tensor:
    """Draw triangles and boxes on a zero background, noise-free: ``[N, 1, L]``.

    ``triangles`` and ``boxes`` are ``[N, K, 3]`` tensors of (center, height, width), in
    samples. Where shapes overlap the higher one wins (valid data sets have no overlaps).
    """
    _check_shapes(triangles, boxes, seq_len)
    triangle, box = _shape_profiles(triangles, boxes, seq_len)
    return torch.cat((triangle, box), dim=1).amax(dim=1, keepdim=True)


def shapes_collide(
    triangles: torch.Tensor, boxes: torch.Tensor, seq_len: int = 100
) -> torch.Tensor:
    """``[N]`` booleans: True where two shapes overlap or touch (no empty sample between them)."""
    _check_shapes(triangles, boxes, seq_len)
    triangle, box = _shape_profiles(triangles, boxes, seq_len)
    covered = torch.cat((triangle, box), dim=1) > 0  # [N, S, L]
    # Widen every shape by one sample to the left, so touching shapes count as colliding.
    widened = covered.clone()
    widened[..., :-1] |= covered[..., 1:]
    return (widened.sum(dim=1) > 1).any(dim=-1)


def _draw_shapes(count: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """``[count, 2, 3]`` random (center, height, width) for two shapes of one kind."""
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
    """Generate ``num_samples`` triangles-and-boxes sequences of length ``seq_len``.

    Candidates are drawn in batches and rejected when two shapes collide or when the two
    triangles, or the two boxes, differ in height by ``min_height_gap`` or less (their mean
    would then be almost the input, an easy sample). Inputs get uniform noise in
    ``[-noise_level / 2, noise_level / 2]``; targets are noise-free. The same ``seed``
    always gives the same data.
    """
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    if not isinstance(seq_len, int) or isinstance(seq_len, bool):
        raise ValueError(f"seq_len must be an int, got {seq_len!r}")
    if seq_len < 4 * (SHAPES_WIDTH_RANGE[1] + 2):
        raise ValueError(
            f"seq_len={seq_len} is too short for four shapes up to {SHAPES_WIDTH_RANGE[1]:g} "
            f"samples wide; use seq_len >= {math.ceil(4 * (SHAPES_WIDTH_RANGE[1] + 2))}"
        )
    if not 0 <= noise_level < 2 * SHAPES_HEIGHT_RANGE[0]:
        raise ValueError(
            f"noise_level must be in [0, {2 * SHAPES_HEIGHT_RANGE[0]:g}) so that noise stays "
            f"below the lowest shape, got {noise_level!r}"
        )
    max_gap = SHAPES_HEIGHT_RANGE[1] - SHAPES_HEIGHT_RANGE[0]
    if not 0 <= min_height_gap < max_gap:
        raise ValueError(f"min_height_gap must be in [0, {max_gap:g}), got {min_height_gap!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")

    generator = torch.Generator().manual_seed(seed)
    kept_triangles, kept_boxes, num_kept = [], [], 0
    while num_kept < num_samples:
        # About one candidate in six survives the checks on 100-sample sequences.
        count = max(1024, 8 * (num_samples - num_kept))
        triangles = _draw_shapes(count, seq_len, generator)
        boxes = _draw_shapes(count, seq_len, generator)
        # Check BOTH kinds: source 004 tests the triangles twice and never the boxes.
        gap_ok = (triangles[:, 0, 1] - triangles[:, 1, 1]).abs() > min_height_gap
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
    covered = torch.cat((triangle, box), dim=1) > 0  # [N, 4, L], shapes never overlap
    shape_ids = torch.where(covered.any(dim=1), covered.int().argmax(dim=1), -1)
    return ShapesData(clean + noise, targets, triangles, boxes, shape_ids.long())


# --- reverse sequences (chapter 7) -------------------------------------------------------------
# Everything below this line belongs to chapter 7; tests in tests/test_reverse_data.py.

__all__ += ["make_reverse_dataset"]


def make_reverse_dataset(
    num_sequences: int, seq_len: int, num_classes: int, generator: torch.Generator
) -> TensorDataset:
    """Random token sequences and their reversals: ``TensorDataset(inputs, targets)``.

    ``inputs`` is ``[N, L]`` (int64) with tokens drawn uniformly from ``0 .. num_classes - 1``;
    ``targets`` is ``inputs.flip(-1)``: the token at position ``t`` must be predicted from the
    token at position ``L - 1 - t``. Draw from an explicit ``generator`` (one per split, with
    different seeds) so the training and test sets are reproducible and independent.
    """
    for name, value in (
        ("num_sequences", num_sequences),
        ("seq_len", seq_len),
        ("num_classes", num_classes),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
        if value < 1:
            raise ValueError(f"{name} must be a positive int, got {value}")
    if num_classes < 2:
        raise ValueError(
            f"num_classes must be at least 2 (with one token every sequence is its own "
            f"reversal), got {num_classes}"
        )
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator, got {type(generator).__name__}; "
            "pass torch.Generator().manual_seed(0)"
        )
    inputs = torch.randint(num_classes, (num_sequences, seq_len), generator=generator)
    return TensorDataset(inputs, inputs.flip(-1))
