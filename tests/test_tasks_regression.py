"""Tests of helpers.tasks.regression: chapter 1's noisy samples of a smooth curve."""

import numpy as np
import pytest
import torch

from helpers.tasks.regression import make_regression_data, true_function


def test_true_function_is_2_sin_x_plus_x():
    x = torch.linspace(-3, 3, 7)
    torch.testing.assert_close(true_function(x), 2 * torch.sin(x) + x)


def test_data_are_seeded_and_sorted():
    x1, y1 = make_regression_data(
        20, generator=torch.Generator().manual_seed(5)
    )
    x2, y2 = make_regression_data(
        20, generator=torch.Generator().manual_seed(5)
    )
    torch.testing.assert_close(x1, x2)
    torch.testing.assert_close(y1, y2)
    assert (x1.diff() >= 0).all()
    assert x1.shape == y1.shape == (20,)


def test_data_lie_in_range_and_noise_zero_gives_the_curve():
    x, y = make_regression_data(
        50, noise=0.0, x_max=3.0, generator=torch.Generator().manual_seed(1)
    )
    assert (x >= 0).all() and (x < 3.0).all()
    torch.testing.assert_close(y, true_function(x.double()).float())


def test_data_are_drawn_in_float64_and_rounded_once_so_every_cpu_gets_the_same_bits():
    # An independent float64 reference (NumPy's sin, not torch's), rounded to float32: equal
    # bits. Float32 sin and randn differ in their last bit between instruction sets.
    x, y = make_regression_data(
        200, noise=0.5, generator=torch.Generator().manual_seed(5)
    )
    generator = torch.Generator().manual_seed(5)
    x64 = (
        torch.rand(200, generator=generator, dtype=torch.float64).numpy() * 10.0
    )
    eps = torch.randn(200, generator=generator, dtype=torch.float64).numpy()
    x64 = np.sort(x64)  # sorted before the noise is drawn, as the function does
    expected = 2 * np.sin(x64) + x64 + 0.5 * eps
    assert x.dtype == y.dtype == torch.float32
    assert np.array_equal(x.numpy(), x64.astype(np.float32))
    assert np.array_equal(y.numpy(), expected.astype(np.float32))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"num_points": 0},
            ValueError,
            "num_points must be a positive int, got 0",
        ),
        (
            {"num_points": 3.0},
            TypeError,
            "num_points must be a positive int, got float",
        ),
        ({"noise": float("nan")}, ValueError, "noise must be finite"),
        ({"noise": -1.0}, ValueError, "noise must be >= 0.*standard deviation"),
        ({"noise": "1"}, TypeError, "noise must be a number, got str"),
        ({"x_max": 0.0}, ValueError, "x_max must be > 0"),
        ({"x_max": None}, TypeError, "x_max must be a number, got NoneType"),
    ],
)
def test_errors_say_what_is_wrong(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_regression_data(**{"num_points": 5} | kwargs)
