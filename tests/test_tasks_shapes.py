"""Tests of helpers.tasks.shapes (chapter 8): the triangles-and-boxes generator and the three
models that compete on it (shapes, parameter counts, the attention layer against attention
computed by helpers.attention and by PyTorch, batch independence, and the batch-axis mistake of
source 004's LSTM)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.analysis import count_parameters
from helpers.attention import scaled_dot_product_attention
from helpers.tasks.shapes import (
    SHAPES_HEIGHT_RANGE,
    SHAPES_MODELS,
    SHAPES_WIDTH_RANGE,
    BatchAxisLSTM,
    ConvSelfAttention,
    ShapesData,
    ShapesLSTM,
    attention_enrichment,
    local_oracle,
    make_shapes_attention_model,
    make_shapes_cnn,
    make_shapes_dataset,
    overfit_curve,
    partner_mean_height,
    render_shapes,
    shapes_collide,
    standardize,
)

# ----------------------------------------------------------------------------- the data


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
    assert torch.equal(x, shapes.inputs[7]) and torch.equal(
        y, shapes.targets[7]
    )


def test_same_seed_same_data_and_other_seed_other_data():
    first, again = (
        make_shapes_dataset(50, seed=11),
        make_shapes_dataset(50, seed=11),
    )
    other = make_shapes_dataset(50, seed=12)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(
        first.targets, again.targets
    )
    assert not torch.equal(first.inputs, other.inputs)


def test_parameters_stay_in_their_ranges(shapes):
    for kind in (shapes.triangles, shapes.boxes):
        centers, heights, widths = kind.unbind(dim=2)
        assert (
            heights.min() >= SHAPES_HEIGHT_RANGE[0]
            and heights.max() <= SHAPES_HEIGHT_RANGE[1]
        )
        assert (
            widths.min() >= SHAPES_WIDTH_RANGE[0]
            and widths.max() <= SHAPES_WIDTH_RANGE[1]
        )
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
            torch.testing.assert_close(
                values, torch.full_like(values, mean_box.item())
            )
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
    triangles = torch.tensor(
        [[[10.0, 4.0, 4.0]]]
    )  # center 10, height 4, width 4
    boxes = torch.tensor([[[30.0, 2.0, 5.0]]])  # center 30, height 2, width 5
    signal = render_shapes(triangles, boxes, seq_len=40)[0, 0]
    expected = torch.zeros(40)
    expected[8:13] = torch.tensor([1.0, 3.0, 4.0, 3.0, 1.0])
    expected[28:33] = 2.0
    torch.testing.assert_close(signal, expected)


def test_collisions_include_touching_shapes():
    box = torch.tensor([[[30.0, 2.0, 5.0]]])  # covers 28..32
    far = torch.tensor([[[10.0, 4.0, 4.0]]])  # covers 8..12
    touching = torch.tensor(
        [[[35.0, 4.0, 4.0]]]
    )  # covers 33..37, next to the box
    overlapping = torch.tensor([[[31.0, 4.0, 4.0]]])
    gap_of_one = torch.tensor(
        [[[36.0, 4.0, 4.0]]]
    )  # covers 34..38, sample 33 empty
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
    assert (
        (data.inputs - render_shapes(data.triangles, data.boxes, seq_len)).abs()
        <= 0.15
    ).all()
    kinds_equal = data.targets[:, 0].gather(
        1, data.triangles[:, :, 0].round().long()
    )  # both triangle peaks at the same height
    torch.testing.assert_close(kinds_equal[:, 0], kinds_equal[:, 1])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_samples": 0}, ValueError, "num_samples must be a positive int"),
        (
            {"num_samples": 2.5},
            TypeError,
            "num_samples must be a positive int, got float",
        ),
        (
            {"num_samples": 5, "seq_len": 40},
            ValueError,
            "seq_len=40 is too short",
        ),
        (
            {"num_samples": 5, "seq_len": 100.0},
            TypeError,
            "seq_len must be a positive int, got float",
        ),
        (
            {"num_samples": 5, "noise_level": -0.1},
            ValueError,
            "noise_level must be in",
        ),
        (
            {"num_samples": 5, "noise_level": 3.0},
            ValueError,
            "noise_level must be in",
        ),
        (
            {"num_samples": 5, "min_height_gap": 30.0},
            ValueError,
            "min_height_gap must be in",
        ),
        (
            {"num_samples": 5, "seed": "zero"},
            TypeError,
            "seed must be a non-negative int, got str",
        ),
        ({"num_samples": 5, "seed": -1}, ValueError, "seed must be >= 0"),
        (
            {"num_samples": 5, "noise_level": "0.3"},
            TypeError,
            "noise_level must be a number",
        ),
    ],
)
def test_make_shapes_dataset_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_shapes_dataset(**kwargs)


@pytest.mark.parametrize(
    ("triangles", "boxes", "seq_len", "error", "match"),
    [
        (
            [[[1.0, 2.0, 3.0]]],
            torch.ones(1, 1, 3),
            10,
            TypeError,
            "triangles must be a tensor",
        ),
        (
            torch.ones(1, 3),
            torch.ones(1, 1, 3),
            10,
            ValueError,
            r"triangles must have shape",
        ),
        (
            torch.ones(1, 1, 3),
            torch.ones(1, 1, 2),
            10,
            ValueError,
            r"boxes must have shape",
        ),
        (
            torch.ones(2, 1, 3),
            torch.ones(1, 1, 3),
            10,
            ValueError,
            "same N sequences",
        ),
        (
            torch.ones(1, 1, 3),
            torch.ones(1, 1, 3),
            0,
            ValueError,
            "seq_len must be a positive",
        ),
    ],
)
def test_render_and_collide_errors(triangles, boxes, seq_len, error, match):
    with pytest.raises(error, match=match):
        render_shapes(triangles, boxes, seq_len)
    with pytest.raises(error, match=match):
        shapes_collide(triangles, boxes, seq_len)


# ----------------------------------------------------------------------------- the local oracle


def test_partner_mean_height_matches_the_generator():
    """The analytic conditional mean agrees with the partners the generator actually draws."""
    data = make_shapes_dataset(20_000, seed=7)
    own = torch.cat(
        [data.triangles[:, :, 1].flatten(), data.boxes[:, :, 1].flatten()]
    )
    partner = torch.cat(
        [
            data.triangles[:, [1, 0], 1].flatten(),
            data.boxes[:, [1, 0], 1].flatten(),
        ]
    )
    low, high = SHAPES_HEIGHT_RANGE
    for start in torch.arange(low, high, 3.0):
        in_bin = (own >= start) & (own < start + 3)
        predicted = partner_mean_height(own[in_bin]).mean().item()
        # The standard error of a bin's mean is about 7 / sqrt(5000) = 0.1.
        assert partner[in_bin].mean().item() == pytest.approx(
            predicted, abs=0.4
        )


def test_partner_mean_height_by_hand_and_symmetry():
    low, high = SHAPES_HEIGHT_RANGE
    # h = 1: the partner is uniform on [5, 25], mean 15; h = 13: on [1, 9] U [17, 25], mean 13.
    values = partner_mean_height(torch.tensor([1.0, 13.0]))
    torch.testing.assert_close(
        values, torch.tensor([15.0, 13.0], dtype=torch.float64)
    )
    heights = torch.linspace(low, high, 97)
    mirrored = partner_mean_height(low + high - heights)
    torch.testing.assert_close(
        partner_mean_height(heights), low + high - mirrored
    )
    with pytest.raises(ValueError, match="min_height_gap must be in"):
        partner_mean_height(heights, min_height_gap=24.0)
    with pytest.raises(TypeError, match="floating-point"):
        partner_mean_height(torch.tensor([3, 4]))


def test_local_oracle_beats_every_other_guess_of_the_partner(shapes):
    """Drawing each shape at the conditional mean beats the own height and a constant guess."""
    oracle = local_oracle(shapes)
    assert (
        oracle.shape == shapes.targets.shape
        and oracle.dtype == shapes.targets.dtype
    )
    assert torch.equal(
        oracle > 0, shapes.targets > 0
    )  # same shapes, only heights differ

    def mse_with_partner_guess(guess):
        guessed = []
        for kind in (shapes.triangles, shapes.boxes):
            kind = kind.clone()
            kind[:, :, 1] = (kind[:, :, 1] + guess(kind[:, :, 1])) / 2
            guessed.append(kind)
        return ((render_shapes(*guessed) - shapes.targets) ** 2).mean().item()

    oracle_mse = ((oracle - shapes.targets) ** 2).mean().item()
    assert oracle_mse == pytest.approx(
        mse_with_partner_guess(partner_mean_height), rel=1e-5
    )
    assert oracle_mse < mse_with_partner_guess(
        lambda h: h
    )  # "the partner is as tall as me"
    assert oracle_mse < mse_with_partner_guess(
        lambda h: torch.full_like(h, 13.0)
    )
    assert oracle_mse > 0
    with pytest.raises(TypeError, match="ShapesData"):
        local_oracle(shapes.inputs)


def test_enrichment_is_one_for_uniform_attention_and_finds_the_partner(shapes):
    ids = shapes.shape_ids[:50]
    uniform = torch.full((50, 100, 100), 0.01)
    table = attention_enrichment(uniform, ids)
    assert list(table.index) == ["triangle", "box"]
    assert list(table.columns) == [
        "own shape",
        "partner",
        "other kind",
        "background",
    ]
    assert table.to_numpy() == pytest.approx(1.0, rel=1e-5)
    # Every query puts all its weight, spread evenly, on its partner shape.
    partner = (ids[:, None, :] == (ids[:, :, None] ^ 1)) & (
        ids[:, :, None] >= 0
    )
    weights = partner.float() / partner.float().sum(-1, keepdim=True).clamp(
        min=1
    )
    table = attention_enrichment(weights, ids)
    assert (table["partner"] > 5).all()
    assert (table[["own shape", "other kind", "background"]] == 0).all().all()
    with pytest.raises(ValueError, match=r"weights must be \[N, T, T\]"):
        attention_enrichment(uniform[:, :50], ids)


# ----------------------------------------------------------------------------- the models


FACTORIES = {
    "cnn": make_shapes_cnn,
    "attention": make_shapes_attention_model,
    "attention_unscaled": lambda: make_shapes_attention_model(scaled=False),
    "lstm": ShapesLSTM,
}


@pytest.mark.parametrize("name", FACTORIES)
@pytest.mark.parametrize("seq_len", [1, 37, 100])
def test_output_shape_equals_input_shape(name, seq_len):
    torch.manual_seed(0)
    model = FACTORIES[name]()
    x = torch.randn(3, 1, seq_len)
    assert model(x).shape == (3, 1, seq_len)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cnn", 62_337),
        ("attention", 58_177),
        ("attention_unscaled", 58_177),
        ("lstm", 63_801),
    ],
)
def test_parameter_counts(name, expected):
    assert count_parameters(FACTORIES[name]()) == expected


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq_len=st.integers(1, 12),
    in_channels=st.integers(1, 6),
    key_channels=st.integers(1, 6),
    out_channels=st.integers(1, 6),
    scaled=st.booleans(),
)
def test_conv_attention_matches_pytorch_sdpa(
    batch, seq_len, in_channels, key_channels, out_channels, scaled
):
    torch.manual_seed(0)
    layer = ConvSelfAttention(
        in_channels, out_channels, key_channels, scaled=scaled
    )
    x = torch.randn(batch, in_channels, seq_len)
    queries = layer.query(x).transpose(1, 2)  # [B, T, key_channels]
    keys = layer.key(x).transpose(1, 2)
    values = layer.value(x).transpose(1, 2)
    scale = (
        None if scaled else 1.0
    )  # sdpa's default scale is 1/sqrt(key_channels)
    expected = F.scaled_dot_product_attention(
        queries, keys, values, scale=scale
    )
    torch.testing.assert_close(
        layer(x), expected.transpose(1, 2), rtol=1e-5, atol=1e-5
    )


def test_attention_weights_are_a_distribution_over_keys():
    torch.manual_seed(0)
    layer = ConvSelfAttention(4, 5, 8)
    weights = layer.attention(torch.randn(2, 4, 30))
    assert weights.shape == (2, 30, 30)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 30))


def test_scaling_divides_the_scores_by_sqrt_of_key_channels():
    torch.manual_seed(0)
    scaled = ConvSelfAttention(4, 4, 16, scaled=True)
    unscaled = ConvSelfAttention(4, 4, 16, scaled=False)
    unscaled.load_state_dict(scaled.state_dict())
    x = torch.randn(1, 4, 10)
    log_scaled = scaled.attention(x).log()
    log_unscaled = unscaled.attention(x).log()
    # log-softmax differs from the scores by a per-row constant, so compare centred rows
    centred = lambda logits: logits - logits.mean(dim=-1, keepdim=True)  # noqa: E731
    torch.testing.assert_close(
        centred(log_unscaled), math.sqrt(16) * centred(log_scaled)
    )


def test_attention_model_exposes_its_attention_layer():
    torch.manual_seed(0)
    model = make_shapes_attention_model()
    x = torch.randn(2, 1, 50)
    assert isinstance(model[4], ConvSelfAttention)
    weights = model[4].attention(model[:4](x))
    assert weights.shape == (2, 50, 50)
    assert "key_channels=96, scaled=True" in repr(model[4])


@pytest.mark.parametrize("name", FACTORIES)
def test_samples_do_not_influence_each_other(name):
    """A prediction must not depend on the other samples of the batch, nor on earlier calls."""
    torch.manual_seed(0)
    model = FACTORIES[name]().eval()
    x = torch.randn(6, 1, 40)
    with torch.no_grad():
        together = model(x)
        alone = torch.cat([model(x[i : i + 1]) for i in range(6)])
        shuffled = model(x.flip(0)).flip(0)
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(together, shuffled, rtol=1e-4, atol=1e-5)


def test_convolution_only_sees_21_neighbours_but_attention_sees_everything():
    torch.manual_seed(0)
    x = torch.randn(1, 1, 100, requires_grad=True)
    for model, expected in (
        (make_shapes_cnn(), 21),
        (make_shapes_attention_model(), 100),
    ):
        x.grad = None
        model(x)[0, 0, 50].backward()
        assert (x.grad[0, 0] != 0).sum().item() == expected


def test_lstm_output_at_the_start_depends_on_the_end():
    """Bidirectional: the first output position sees the last input position."""
    torch.manual_seed(0)
    x = torch.randn(1, 1, 100, requires_grad=True)
    ShapesLSTM()(x)[0, 0, 0].backward()
    assert x.grad[0, 0, -1] != 0


def test_batch_axis_lstm_reproduces_the_source_mistake():
    """Source 004's LSTM runs along the batch and carries its state between calls."""
    torch.manual_seed(0)
    model = BatchAxisLSTM().eval()
    assert count_parameters(model) == 130_660
    x = torch.randn(6, 1, 100)
    with torch.no_grad():
        first = model(x)
        second = model(
            x
        )  # same input, but the state left by the first call differs
        model.reset()
        fresh = model(x)
        model.reset()
        alone = model(x[3:4])
        model.reset()
        first_alone = model(x[0:1])
    assert not torch.allclose(first, second)
    torch.testing.assert_close(first, fresh)
    # sample 3 depends on samples 0..2 of its batch: on its own it gives another answer
    assert not torch.allclose(first[3], alone[0])
    # after a reset, the first sample of a batch has nothing before it
    torch.testing.assert_close(first[0], first_alone[0])


def test_batch_axis_lstm_treats_the_batch_as_time():
    """Gradients show it: output 3 depends on inputs 0..3 and not on inputs 4 and 5."""
    torch.manual_seed(0)
    model = BatchAxisLSTM()
    x = torch.randn(6, 1, 100, requires_grad=True)
    model(x)[3].sum().backward()
    depends = x.grad.abs().sum(dim=(1, 2)) > 0
    assert depends.tolist() == [True, True, True, True, False, False]


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda: make_shapes_cnn(channels=0),
            ValueError,
            "channels must be a positive int",
        ),
        (
            lambda: make_shapes_cnn(kernel_size=4),
            ValueError,
            "kernel_size must be odd",
        ),
        (
            lambda: make_shapes_attention_model(key_channels=0),
            ValueError,
            "key_channels",
        ),
        (
            lambda: make_shapes_attention_model(kernel_size=2),
            ValueError,
            "kernel_size must be odd",
        ),
        (
            lambda: ConvSelfAttention(4, 4, 4, scaled="yes"),
            TypeError,
            "scaled must be True or False",
        ),
        (
            lambda: ConvSelfAttention(4, 4.0, 4),
            TypeError,
            "out_channels must be a positive int, got float",
        ),
        (
            lambda: make_shapes_cnn(channels=64.0),
            TypeError,
            "channels must be a positive int, got float",
        ),
        (
            lambda: ShapesLSTM(hidden_size=0),
            ValueError,
            "hidden_size must be a positive int",
        ),
        (
            lambda: BatchAxisLSTM(seq_len=-1),
            ValueError,
            "seq_len must be a positive int",
        ),
    ],
)
def test_constructor_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


@pytest.mark.parametrize(
    ("model", "bad_input", "error", "match"),
    [
        (
            ShapesLSTM(),
            torch.randn(2, 100),
            ValueError,
            r"expects input of shape \[B, 1, T\]",
        ),
        (
            ShapesLSTM(),
            torch.randn(2, 3, 100),
            ValueError,
            r"got \(2, 3, 100\)",
        ),
        (BatchAxisLSTM(), torch.randn(2, 100), ValueError, r"\[B, 1, T\]"),
        (
            ConvSelfAttention(4, 4, 4),
            torch.randn(2, 3, 10),
            ValueError,
            r"\[B, 4, T\]",
        ),
        (ConvSelfAttention(4, 4, 4), [[1.0]], TypeError, "expects a tensor"),
    ],
)
def test_forward_errors(model, bad_input, error, match):
    with pytest.raises(error, match=match):
        model(bad_input)


@settings(max_examples=25, deadline=None)
@given(
    in_channels=st.integers(1, 9),
    out_channels=st.integers(1, 9),
    key_channels=st.integers(1, 9),
    seq_len=st.integers(1, 12),
    scaled=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv_self_attention_is_attention_on_linear_projections(
    in_channels, out_channels, key_channels, seq_len, scaled, seed
):
    """A Conv1d with kernel_size=1 is a Linear layer applied at every position, so the layer
    is single-head attention (unscaled, as in source 004, when scaled=False) on the tokens
    x^T projected by the squeezed convolution weights."""
    torch.manual_seed(seed)
    layer = ConvSelfAttention(
        in_channels, out_channels, key_channels, scaled=scaled
    )
    x = torch.randn(3, in_channels, seq_len)  # (B, C, T)
    tokens = x.transpose(1, 2)  # (B, T, C)
    q, k, v = (
        tokens @ conv.weight.squeeze(-1).T
        for conv in (layer.query, layer.key, layer.value)
    )
    output, weights = scaled_dot_product_attention(
        q, k, v, scale=None if scaled else 1.0
    )
    torch.testing.assert_close(
        layer(x), output.transpose(1, 2), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        layer.attention(x), weights, rtol=1e-5, atol=1e-5
    )


def test_standardize_puts_every_set_on_the_reference_scale():
    reference, other = (
        make_shapes_dataset(300, seed=1),
        make_shapes_dataset(200, seed=2),
    )
    (ref_set, other_set), std = standardize(reference, reference, other)
    values = torch.cat(ref_set.tensors)
    assert values.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert values.std().item() == pytest.approx(1.0, abs=1e-5)
    raw = torch.cat([reference.inputs, reference.targets])
    assert std == pytest.approx(raw.std().item())
    mean = raw.mean().item()
    # the other set is on the reference's scale, not on its own
    assert torch.allclose(other_set.tensors[1], (other.targets - mean) / std)
    assert torch.cat(other_set.tensors).mean().item() != pytest.approx(
        0.0, abs=1e-5
    )
    with pytest.raises(TypeError, match="data must be a ShapesData"):
        standardize(reference, other.tensor_dataset())


# ----------------------------------------------------------------------- the sanity check


def _standardized(num: int = 30):
    data = make_shapes_dataset(num, seed=7)
    (train_set,), _ = standardize(data, data)
    return train_set


def test_overfit_curve_logs_the_loss_before_each_logged_update():
    train_set = _standardized()
    # lr 0: nothing moves, so every logged loss is the freshly seeded model's
    # error on the first 20 sequences, and the keys are 0, 3, 6 and the last
    # step, 9 (not step 10: there is no loss after the last update)
    curve = overfit_curve("CNN", 4, train_set, steps=10, lr=0.0, log_every=3)
    assert list(curve) == [0, 3, 6, 9]
    torch.manual_seed(4)
    model = SHAPES_MODELS["CNN"]()
    inputs, targets = (t[:20] for t in train_set.tensors)
    with torch.no_grad():
        first = F.mse_loss(model(inputs), targets).item()
    assert all(loss == pytest.approx(first) for loss in curve.values())
    # one step: one loss, taken before its update; another seed, another loss
    assert overfit_curve("CNN", 4, train_set, steps=1) == pytest.approx(
        {0: first}
    )
    assert overfit_curve("CNN", 5, train_set, steps=1)[0] != pytest.approx(
        first
    )


def test_overfit_curve_falls_on_one_batch():
    curve = overfit_curve("CNN", 0, _standardized(), steps=40)
    assert list(curve) == list(range(40))
    assert curve[39] < 0.5 * curve[0]
