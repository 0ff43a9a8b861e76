"""Tests of the triangles-and-boxes generator in helpers.data (chapter 8)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.data import (
    SHAPES_HEIGHT_RANGE,
    SHAPES_WIDTH_RANGE,
    ShapesData,
    make_shapes_dataset,
    render_shapes,
    shapes_collide,
)


@pytest.fixture(scope="module")
def shapes() -> ShapesData:
    return make_shapes_dataset(500, seed=3)


def test_shapes_and_dtypes(shapes):
    assert len(shapes) == 500
    assert shapes.inputs.shape == shapes.targets.shape == (500, 1, 100)
    assert shapes.triangles.shape == shapes.boxes.shape == (500, 2, 3)
    assert shapes.shape_ids.shape == (500, 100)
    assert shapes.shape_ids.dtype == torch.long
    x, y = shapes.tensor_dataset()[7]
    assert torch.equal(x, shapes.inputs[7]) and torch.equal(y, shapes.targets[7])


def test_same_seed_same_data_and_other_seed_other_data():
    first, again = make_shapes_dataset(50, seed=11), make_shapes_dataset(50, seed=11)
    other = make_shapes_dataset(50, seed=12)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert not torch.equal(first.inputs, other.inputs)


def test_parameters_stay_in_their_ranges(shapes):
    for kind in (shapes.triangles, shapes.boxes):
        centers, heights, widths = kind.unbind(dim=2)
        assert heights.min() >= SHAPES_HEIGHT_RANGE[0] and heights.max() <= SHAPES_HEIGHT_RANGE[1]
        assert widths.min() >= SHAPES_WIDTH_RANGE[0] and widths.max() <= SHAPES_WIDTH_RANGE[1]
        margin = SHAPES_WIDTH_RANGE[1] / 2
        assert centers.min() >= margin and centers.max() <= 100 - margin


def test_target_rule_each_shape_at_its_kinds_mean_height(shapes):
    """The target is the clean picture with every shape at the mean height of its kind."""
    for index in range(0, len(shapes), 25):
        target, ids = shapes.targets[index, 0], shapes.shape_ids[index]
        mean_triangle = shapes.triangles[index, :, 1].mean()
        mean_box = shapes.boxes[index, :, 1].mean()
        for shape_id, kind_mean in ((0, mean_triangle), (1, mean_triangle)):
            peak = target[ids == shape_id].max()
            torch.testing.assert_close(peak, kind_mean)
        for shape_id in (2, 3):
            values = target[ids == shape_id]  # a box is flat at its kind's mean
            torch.testing.assert_close(values, torch.full_like(values, mean_box.item()))
        assert (target[ids == -1] == 0).all()


def test_target_matches_rendering_with_averaged_heights(shapes):
    triangles, boxes = shapes.triangles.clone(), shapes.boxes.clone()
    triangles[:, :, 1] = triangles[:, :, 1].mean(dim=1, keepdim=True)
    boxes[:, :, 1] = boxes[:, :, 1].mean(dim=1, keepdim=True)
    torch.testing.assert_close(shapes.targets, render_shapes(triangles, boxes))


def test_targets_are_noise_free_and_inputs_are_not(shapes):
    """Source 004 adds noise to the targets too; ours are exact, the noise is in the inputs."""
    clean = render_shapes(shapes.triangles, shapes.boxes)
    noise = shapes.inputs - clean
    assert noise.abs().max() <= 0.15 + 1e-6
    assert noise.std() == pytest.approx(0.3 / 12**0.5, rel=0.05)
    background = shapes.shape_ids.unsqueeze(1) == -1
    assert (shapes.targets[background] == 0).all()


def test_no_collisions_and_both_kinds_have_distinct_heights(shapes):
    """Source 004 checks the triangles' height gap twice and never the boxes'; we check both."""
    assert not shapes_collide(shapes.triangles, shapes.boxes).any()
    triangle_gap = (shapes.triangles[:, 0, 1] - shapes.triangles[:, 1, 1]).abs()
    box_gap = (shapes.boxes[:, 0, 1] - shapes.boxes[:, 1, 1]).abs()
    assert triangle_gap.min() > 4.0
    assert box_gap.min() > 4.0


def test_shape_ids_cover_exactly_the_nonzero_clean_signal(shapes):
    clean = render_shapes(shapes.triangles, shapes.boxes)[:, 0]
    assert torch.equal(shapes.shape_ids >= 0, clean > 0)
    for index in range(0, len(shapes), 50):
        ids = shapes.shape_ids[index]
        for shape_id in range(4):
            positions = torch.nonzero(ids == shape_id).flatten()
            assert len(positions) > 0
            # one contiguous run per shape
            assert positions.max() - positions.min() + 1 == len(positions)


def test_render_one_triangle_and_one_box_by_hand():
    triangles = torch.tensor([[[10.0, 4.0, 4.0]]])  # center 10, height 4, width 4
    boxes = torch.tensor([[[30.0, 2.0, 5.0]]])  # center 30, height 2, width 5
    signal = render_shapes(triangles, boxes, seq_len=40)[0, 0]
    expected = torch.zeros(40)
    expected[8:13] = torch.tensor([1.0, 3.0, 4.0, 3.0, 1.0])
    expected[28:33] = 2.0
    torch.testing.assert_close(signal, expected)


def test_collisions_include_touching_shapes():
    box = torch.tensor([[[30.0, 2.0, 5.0]]])  # covers 28..32
    far = torch.tensor([[[10.0, 4.0, 4.0]]])  # covers 8..12
    touching = torch.tensor([[[35.0, 4.0, 4.0]]])  # covers 33..37, next to the box
    overlapping = torch.tensor([[[31.0, 4.0, 4.0]]])
    gap_of_one = torch.tensor([[[36.0, 4.0, 4.0]]])  # covers 34..38, sample 33 empty
    assert not shapes_collide(far, box, 40).item()
    assert shapes_collide(touching, box, 40).item()
    assert shapes_collide(overlapping, box, 40).item()
    assert not shapes_collide(gap_of_one, box, 40).item()


@settings(max_examples=15, deadline=None)
@given(
    num_samples=st.integers(min_value=1, max_value=40),
    seq_len=st.integers(min_value=60, max_value=160),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_generator_invariants_for_any_size_and_seed(num_samples, seq_len, seed):
    data = make_shapes_dataset(num_samples, seq_len=seq_len, seed=seed)
    assert data.inputs.shape == (num_samples, 1, seq_len)
    assert not shapes_collide(data.triangles, data.boxes, seq_len).any()
    assert ((data.inputs - render_shapes(data.triangles, data.boxes, seq_len)).abs() <= 0.15).all()
    kinds_equal = data.targets[:, 0].gather(
        1, data.triangles[:, :, 0].round().long()
    )  # both triangle peaks at the same height
    torch.testing.assert_close(kinds_equal[:, 0], kinds_equal[:, 1])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_samples": 0}, ValueError, "num_samples must be a positive int"),
        ({"num_samples": 2.5}, ValueError, "num_samples must be a positive int"),
        ({"num_samples": 5, "seq_len": 40}, ValueError, "seq_len=40 is too short"),
        ({"num_samples": 5, "seq_len": 100.0}, ValueError, "seq_len must be an int"),
        ({"num_samples": 5, "noise_level": -0.1}, ValueError, "noise_level must be in"),
        ({"num_samples": 5, "noise_level": 3.0}, ValueError, "noise_level must be in"),
        ({"num_samples": 5, "min_height_gap": 30.0}, ValueError, "min_height_gap must be in"),
        ({"num_samples": 5, "seed": "zero"}, TypeError, "seed must be an int"),
    ],
)
def test_make_shapes_dataset_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_shapes_dataset(**kwargs)


@pytest.mark.parametrize(
    ("triangles", "boxes", "seq_len", "error", "match"),
    [
        ([[[1.0, 2.0, 3.0]]], torch.ones(1, 1, 3), 10, TypeError, "triangles must be a tensor"),
        (torch.ones(1, 3), torch.ones(1, 1, 3), 10, ValueError, r"triangles must have shape"),
        (torch.ones(1, 1, 3), torch.ones(1, 1, 2), 10, ValueError, r"boxes must have shape"),
        (torch.ones(2, 1, 3), torch.ones(1, 1, 3), 10, ValueError, "same N sequences"),
        (torch.ones(1, 1, 3), torch.ones(1, 1, 3), 0, ValueError, "seq_len must be a positive"),
    ],
)
def test_render_and_collide_errors(triangles, boxes, seq_len, error, match):
    with pytest.raises(error, match=match):
        render_shapes(triangles, boxes, seq_len)
    with pytest.raises(error, match=match):
        shapes_collide(triangles, boxes, seq_len)
