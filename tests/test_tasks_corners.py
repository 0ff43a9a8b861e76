"""Tests of helpers.tasks.corners, chapter 9's square-corner task (source 001)."""

from __future__ import annotations

import pytest
import torch
from conftest import seeded
from torch import nn

from helpers.tasks.corners import (
    CORNER_MODEL,
    CORNERS,
    CornerConfig,
    CornerTransformer,
    cross_attention_focus,
    follows_the_rule,
    follows_the_rule_by_case,
    free_running_mse,
    make_corner_sequences,
    reflection_rule,
    teacher_forcing_split,
    train_corners,
)


def test_noise_free_sequences_walk_around_the_square():
    points, clockwise = make_corner_sequences(200, seeded(), noise=0.0)
    corner_index = (
        (points[:, :, None] == CORNERS).all(-1).float().argmax(-1)
    )  # (N, 4)
    steps = (corner_index[:, 1:] - corner_index[:, :-1]) % 4
    assert torch.all(steps[clockwise] == 1) and torch.all(
        steps[~clockwise] == 3
    )
    assert 0.3 < clockwise.float().mean() < 0.7
    assert set(corner_index[:, 0].tolist()) == {0, 1, 2, 3}


def test_clockwise_means_clockwise_on_the_plane():
    points, clockwise = make_corner_sequences(50, seeded(), noise=0.0)
    a, b = points[:, 1] - points[:, 0], points[:, 2] - points[:, 1]
    cross = (
        a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    )  # negative for a clockwise turn
    assert torch.all((cross < 0) == clockwise)


def test_splits_are_seeded_and_held_out():
    first, _ = make_corner_sequences(64, seeded(13))
    again, _ = make_corner_sequences(64, seeded(13))
    other, _ = make_corner_sequences(64, seeded(19))
    assert torch.equal(first, again)
    # source 001 evaluated on its training points; a held-out set shares no sequence
    assert not (first[:, None] == other[None]).all(-1).all(-1).any()


def test_teacher_forcing_split_shifts_the_target_by_one():
    points, _ = make_corner_sequences(8, seeded())
    source, decoder_input, target = teacher_forcing_split(points).tensors
    assert torch.equal(source, points[:, :2]) and torch.equal(
        target, points[:, 2:]
    )
    assert torch.equal(decoder_input[:, 0], source[:, -1])
    assert torch.equal(decoder_input[:, 1:], target[:, :-1])


def test_generation_equals_teacher_forcing_on_its_own_outputs():
    torch.manual_seed(0)
    model = CornerTransformer().eval()
    points, _ = make_corner_sequences(5, seeded())
    source = points[:, :2]
    generated = model.generate(source, 2)
    decoder_input = torch.cat([source[:, -1:], generated[:, :1]], dim=1)
    torch.testing.assert_close(
        model(source, decoder_input), generated, atol=1e-6, rtol=1e-5
    )


def test_source_001_layers_have_no_residual_and_no_normalization():
    plain = CornerTransformer(residual=False)
    assert not any(isinstance(m, nn.LayerNorm) for m in plain.modules())
    assert any(
        isinstance(m, nn.LayerNorm) for m in CornerTransformer().modules()
    )
    # no residual: zeroing the FFN's last layer zeroes the encoder's output
    with torch.no_grad():
        plain.encoder.ffn.linear2.weight.zero_()
        plain.encoder.ffn.linear2.bias.zero_()
    assert torch.all(plain.encode(torch.randn(3, 2, 2)) == 0)
    with pytest.raises(ValueError, match="residual model"):
        plain.get_attention_maps(torch.randn(1, 2, 2), torch.randn(1, 2, 2))


def test_attention_maps_have_the_documented_shapes():
    model = CornerTransformer(CORNER_MODEL.replace(num_heads=2, num_layers=2))
    maps = model.get_attention_maps(torch.randn(3, 2, 2), torch.randn(3, 2, 2))
    assert [m.shape for m in maps["encoder"]] == [(3, 2, 2, 2)] * 2
    assert [m.shape for m in maps["cross"]] == [(3, 2, 2, 2)] * 2
    assert all(torch.all(m[..., 0, 1] == 0) for m in maps["decoder"])


class _PlantedCross:
    """A stand-in model whose one decoder block has the given cross-attention
    weights ``(B, H, 2, 2)``, whatever the points."""

    def __init__(self, cross: torch.Tensor) -> None:
        self.cross = cross

    def get_attention_maps(self, source, decoder_input):
        assert source.shape == decoder_input.shape == (len(self.cross), 2, 2)
        return {"encoder": [], "decoder": [], "cross": [self.cross]}


# Two sequences, two heads; rows are the queries (-> p3, -> p4), columns the
# keys (p1, p2). Head 0 reads key t for query t on average (0.8, 0.6), head 1
# (0.575, 0.9): the best head per query gives 0.8 and 0.9, so the focus is 0.8.
PLANTED_CROSS = torch.tensor(
    [
        [[[0.9, 0.1], [0.5, 0.5]], [[0.2, 0.8], [0.1, 0.9]]],
        [[[0.7, 0.3], [0.3, 0.7]], [[0.95, 0.05], [0.1, 0.9]]],
    ]
)


def test_cross_attention_focus_of_planted_weights():
    points = torch.zeros(2, 4, 2)
    assert cross_attention_focus(
        _PlantedCross(PLANTED_CROSS), points
    ) == pytest.approx(0.8)
    # a head that reads key t with weight 1 for both queries: focus 1
    perfect = torch.eye(2).expand(2, 2, 2, 2)
    assert cross_attention_focus(_PlantedCross(perfect), points) == 1.0
    # uniform attention: 0.5
    uniform = torch.full((2, 2, 2, 2), 0.5)
    assert cross_attention_focus(_PlantedCross(uniform), points) == 0.5


def test_the_planted_weights_tell_the_focus_from_near_misses():
    """The control of the test above: each plausible slip in the computation
    gives another number on the planted weights, so the test would catch it."""
    diagonal = PLANTED_CROSS.diagonal(dim1=-2, dim2=-1)  # (B, H, 2)
    per_head = diagonal.mean(0)  # (H, 2)
    near_misses = {
        "the larger query": per_head.amax(0).max(),
        "one head for both queries": per_head[per_head.mean(1).argmax()].min(),
        "best head per sequence": diagonal.amax(1).mean(0).min(),
        "the other key": PLANTED_CROSS.flip(-1)
        .diagonal(dim1=-2, dim2=-1)
        .mean(0)
        .amax(0)
        .min(),
        "the worst head": per_head.amin(0).min(),
    }
    for slip, value in near_misses.items():
        assert value.item() != pytest.approx(0.8), slip


def test_cross_attention_focus_of_a_real_model_is_a_weight():
    torch.manual_seed(0)
    points, _ = make_corner_sequences(16, seeded(3))
    focus = cross_attention_focus(
        CornerTransformer(CORNER_MODEL.replace(num_layers=2)), points
    )
    assert 0.0 < focus < 1.0


def test_a_short_run_learns_and_free_running_is_reported():
    train, _ = make_corner_sequences(64, seeded(1))
    model, history = train_corners(
        CornerConfig(epochs=15, seed=0), train, train
    )
    assert history["train_loss"].iloc[-1] < 0.5 * history["train_loss"].iloc[0]
    teacher_forced, free_running = free_running_mse(model, train)
    assert 0 < teacher_forced < 1 and 0 < free_running < 1


def test_the_reflection_rule_reaches_the_noise_floor():
    clean, _ = make_corner_sequences(100, seeded(2), noise=0.0)
    source, _, target = teacher_forcing_split(clean).tensors
    assert torch.equal(reflection_rule(source), target)
    noisy, _ = make_corner_sequences(4000, seeded(3), noise=0.1)
    source, _, target = teacher_forcing_split(noisy).tensors
    mse = nn.functional.mse_loss(reflection_rule(source), target).item()
    assert mse == pytest.approx(0.01, rel=0.1)
    assert nn.functional.mse_loss(-source, target).item() == pytest.approx(
        0.02, rel=0.1
    )


class _RuleModel:
    """A stand-in that predicts with the reflection rule."""

    def generate(self, source, num_points):
        return reflection_rule(source)[:, :num_points]


def test_follows_the_rule_tells_the_rule_from_a_guess():
    points, _ = make_corner_sequences(400, seeded(4))
    assert follows_the_rule(_RuleModel(), points, seeded(5)) == 1.0
    torch.manual_seed(0)
    untrained = CornerTransformer().eval()
    assert follows_the_rule(untrained, points, seeded(5)) < 0.6


class _SecondPointModel:
    """A stand-in whose point 3 depends on point 2 alone: point 2's own corner."""

    def generate(self, source, num_points):
        return source[:, 1:2].sign()


def test_the_two_undirected_cases_tell_point_1_readers_from_the_rest():
    points, _ = make_corner_sequences(400, seeded(4))
    rule = follows_the_rule_by_case(_RuleModel(), points, seeded(5))
    assert rule == {"adjacent": 1.0, "same": 1.0, "opposite": 1.0}
    # reading point 2 alone, it is right in one of the two cases at most: here, always
    # in "opposite" (the rule's corner is point 2's own), never in "same"
    blind = follows_the_rule_by_case(_SecondPointModel(), points, seeded(5))
    assert blind == {"adjacent": 0.0, "same": 0.0, "opposite": 1.0}
    # the same draws as follows_the_rule: a quarter of them are "opposite"
    overall = follows_the_rule(_SecondPointModel(), points, seeded(5))
    assert 0.15 < overall < 0.35


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: make_corner_sequences(0, seeded()),
            ValueError,
            "num_sequences",
        ),
        (lambda: make_corner_sequences(4, 0), TypeError, "generator"),
        (
            lambda: make_corner_sequences(4, seeded(), noise=-1.0),
            ValueError,
            "noise",
        ),
        (
            lambda: teacher_forcing_split(torch.randn(4, 3, 2)),
            ValueError,
            r"\(N, 4, 2\)",
        ),
        (
            lambda: CornerTransformer()(
                torch.randn(2, 2, 3), torch.randn(2, 2, 2)
            ),
            ValueError,
            "T, 2",
        ),
        (
            lambda: train_corners({}, torch.randn(4, 4, 2)),
            TypeError,
            "CornerConfig",
        ),
    ],
)
def test_bad_arguments_are_refused(call, error, message):
    with pytest.raises(error, match=message):
        call()
