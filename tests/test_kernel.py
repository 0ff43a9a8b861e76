"""Tests of helpers.kernel: Nadaraya-Watson regression (chapter 1).

The data of chapter 1 are tested in tests/test_tasks_regression.py, its checker in
tests/test_checks.py.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.kernel import (
    LearnedWidthRegression,
    fit_width,
    gaussian_kernel,
    kernel_scores,
    nadaraya_watson,
    nearest_neighbour,
)
from helpers.tasks.regression import make_regression_data

sizes = st.integers(min_value=1, max_value=40)
widths = st.floats(min_value=0.01, max_value=100.0)


def random_problem(num_queries, num_keys, seed=0):
    generator = torch.Generator().manual_seed(seed)
    queries = torch.rand(num_queries, generator=generator) * 10
    keys = torch.rand(num_keys, generator=generator) * 10
    values = torch.randn(num_keys, generator=generator)
    return queries, keys, values


@settings(max_examples=40, deadline=None)
@given(
    num_queries=sizes, num_keys=sizes, width=widths, seed=st.integers(0, 1000)
)
def test_weights_are_convex_and_predictions_lie_between_values(
    num_queries, num_keys, width, seed
):
    queries, keys, values = random_problem(num_queries, num_keys, seed)
    predictions, weights = nadaraya_watson(queries, keys, values, width)
    assert weights.shape == (num_queries, num_keys)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(num_queries))
    assert (predictions >= values.min() - 1e-5).all()
    assert (predictions <= values.max() + 1e-5).all()


def test_weights_normalize_over_keys():
    """Pins the fix of the source text's `k / k.sum(0)`: each QUERY's weights sum to one."""
    queries, keys, values = random_problem(7, 11)
    _, weights = nadaraya_watson(queries, keys, values, width=0.5)
    kernel = gaussian_kernel(queries[:, None] - keys[None, :], 0.5)
    torch.testing.assert_close(weights, kernel / kernel.sum(1, keepdim=True))
    torch.testing.assert_close(weights.sum(1), torch.ones(7))
    assert not torch.allclose(
        weights, kernel / kernel.sum(0)
    )  # not the source's axis


def test_matches_kernel_weighted_average():
    queries, keys, values = random_problem(5, 9)
    kernel = gaussian_kernel(queries[:, None] - keys[None, :], 1.3)
    expected = (kernel * values).sum(1) / kernel.sum(1)
    predictions, _ = nadaraya_watson(queries, keys, values, 1.3)
    torch.testing.assert_close(predictions, expected)


def test_far_query_with_narrow_kernel_stays_finite():
    keys = torch.tensor([0.0, 1.0, 2.0])
    values = torch.tensor([1.0, 2.0, 3.0])
    prediction, weights = nadaraya_watson(
        torch.tensor([50.0]), keys, values, width=0.05
    )
    assert (
        gaussian_kernel(torch.tensor(48.0), 0.05) == 0
    )  # the naive form would divide 0 by 0
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(prediction, torch.tensor([3.0]))


def test_limits_of_the_width():
    queries, keys, values = random_problem(6, 8)
    wide, _ = nadaraya_watson(queries, keys, values, width=1e5)
    torch.testing.assert_close(wide, values.mean().expand(6), atol=1e-4, rtol=0)
    hard, hard_weights = nearest_neighbour(queries, keys, values)
    narrow, _ = nadaraya_watson(queries, keys, values, width=1e-4)
    torch.testing.assert_close(narrow, hard)
    assert (hard_weights.sum(1) == 1).all()


def test_mask_excludes_pairs():
    x = torch.tensor([0.0, 1.0, 2.0])
    y = torch.tensor([0.0, 10.0, 20.0])
    mask = ~torch.eye(3, dtype=torch.bool)
    predictions, weights = nadaraya_watson(x, x, y, width=1e-3, mask=mask)
    assert (weights.diagonal() == 0).all()
    torch.testing.assert_close(predictions[0], torch.tensor(10.0))


def test_leave_one_out_gives_no_weight_to_the_own_key():
    x, y = make_regression_data(12, generator=torch.Generator().manual_seed(2))
    model, _, _ = fit_width(x, y, steps=5, leave_one_out=True)
    _, weights = model(x, x, y, mask=~torch.eye(12, dtype=torch.bool))
    assert (weights.diagonal() == 0).all()
    torch.testing.assert_close(weights.sum(1), torch.ones(12))


def test_gradient_reaches_the_width():
    model = LearnedWidthRegression(1.0)
    queries, keys, values = random_problem(4, 6)
    predictions, _ = model(queries, keys, values)
    predictions.sum().backward()
    assert model.log_width.grad is not None and model.log_width.grad != 0


def test_leave_one_out_keeps_a_useful_width_and_self_attention_collapses():
    x, y = make_regression_data(60, generator=torch.Generator().manual_seed(3))
    _, _, loo_widths = fit_width(x, y, steps=150, leave_one_out=True)
    _, self_losses, self_widths = fit_width(
        x, y, steps=300, leave_one_out=False
    )
    assert 0.1 < loo_widths[-1] < 1.5
    assert self_widths[-1] < 0.2 * loo_widths[-1]
    assert (
        self_widths[-1] < self_widths[-50]
    )  # still shrinking: it never settles
    assert self_losses[-1] < self_losses[0]


def _zeros(values=3):
    """Queries, keys and values for a misuse test: 2 queries, 3 keys, ``values`` values."""
    return torch.zeros(2), torch.zeros(3), torch.zeros(values)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: gaussian_kernel(torch.zeros(3), 0.0),
            ValueError,
            "width must be > 0",
        ),
        (
            lambda: kernel_scores(torch.zeros(2, 2), torch.zeros(3), 1.0),
            ValueError,
            "1-D",
        ),
        (
            lambda: kernel_scores([1.0], torch.zeros(3), 1.0),
            TypeError,
            "torch.Tensor",
        ),
        (
            lambda: nadaraya_watson(*_zeros(values=4)),
            ValueError,
            "pair up",
        ),
        (
            lambda: nadaraya_watson(*_zeros(), mask=torch.ones(2, 3)),
            TypeError,
            r"mask must be boolean.*mask\.bool\(\)",
        ),
        (
            lambda: gaussian_kernel(torch.zeros(3), torch.tensor(float("nan"))),
            ValueError,
            "> 0",
        ),
        (
            lambda: nadaraya_watson(torch.zeros(2), [0.0, 1.0], torch.zeros(2)),
            TypeError,
            "torch.Tensor",
        ),
        (
            lambda: nearest_neighbour(*_zeros(values=4)),
            ValueError,
            "pair up",
        ),
        (
            lambda: nadaraya_watson(*_zeros(), mask=torch.ones(3, 2).bool()),
            ValueError,
            "shape",
        ),
        (
            lambda: fit_width(torch.zeros(4), torch.zeros(4), steps=0),
            ValueError,
            "steps",
        ),
        (
            lambda: fit_width(torch.zeros(4), torch.zeros(4), lr=-1.0),
            ValueError,
            "lr must be > 0",
        ),
        (
            lambda: fit_width(torch.zeros(4), torch.zeros(4), lr="0.1"),
            TypeError,
            "lr must be a number, got str",
        ),
        (
            lambda: fit_width(torch.zeros(4), torch.zeros(4), steps=10.0),
            TypeError,
            "steps must be a positive int, got float",
        ),
        (
            lambda: fit_width(torch.zeros(4), torch.zeros(4), leave_one_out=1),
            TypeError,
            "leave_one_out must be True or False",
        ),
        (
            lambda: gaussian_kernel(torch.zeros(3), "1"),
            TypeError,
            "width must be a number",
        ),
        (
            lambda: LearnedWidthRegression("1"),
            TypeError,
            "width must be a number",
        ),
        (lambda: LearnedWidthRegression(-1.0), ValueError, "width must be > 0"),
    ],
)
def test_errors_say_what_is_wrong(call, error, message):
    with pytest.raises(error, match=message):
        call()
