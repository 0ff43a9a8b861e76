"""Chapter 1's task: noisy samples of a smooth curve, for kernel regression to
recover.

The estimator itself is in :mod:`helpers.kernel`; this module only makes the
data.
"""

from __future__ import annotations

import torch

from helpers import _validate as check

__all__ = ["true_function", "make_regression_data"]


def true_function(x: torch.Tensor) -> torch.Tensor:
    """The curve the toy data are sampled from: ``2 sin(x) + x``."""
    return 2 * torch.sin(x) + x


def make_regression_data(
    num_points: int = 80,
    noise: float = 1.0,
    x_max: float = 10.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted inputs ``x`` uniform on [0, x_max) and targets
    ``true_function(x)`` plus noise.

    The noise is Gaussian with standard deviation ``noise``. Everything is drawn
    and computed in float64 and rounded once to float32, so the data are the
    same bits on every CPU: float32 ``randn`` and ``sin`` differ in their last
    bit between instruction sets (AVX2 vs scalar code), and so would every chart
    and table made from the data.
    """
    check.positive_int("num_points", num_points)
    check.non_negative_number("noise", noise, "it is a standard deviation")
    check.positive_number("x_max", x_max)
    x = torch.rand(num_points, generator=generator, dtype=torch.float64) * x_max
    x, _ = torch.sort(x)
    eps = torch.randn(num_points, generator=generator, dtype=torch.float64)
    y = true_function(x) + noise * eps
    return x.float(), y.float()
