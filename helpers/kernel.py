"""Attention as kernel regression (chapter 1): the Nadaraya-Watson estimator.

Shapes: ``queries`` (Tq,), ``keys`` (Tk,), ``values`` (Tk,); attention weights (Tq, Tk),
one row per query, each row a probability distribution over the keys.

The estimator predicts, for a query ``q``, the weighted average of the values

    f(q) = sum_j a_j(q) v_j,   a_j(q) = softmax_j( -(q - k_j)^2 / (2 width^2) ),

which is attention with a Gaussian kernel as its similarity. Writing the normalized kernel as
a softmax (instead of dividing exponentials by their sum) keeps it finite when every kernel
value underflows to zero: a narrow kernel far from every key.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from helpers._validate import check_positive_int

__all__ = [
    "true_function",
    "make_regression_data",
    "gaussian_kernel",
    "kernel_scores",
    "nadaraya_watson",
    "nearest_neighbour",
    "LearnedWidthRegression",
    "fit_width",
    "check_kernel_regression",
]


def true_function(x: torch.Tensor) -> torch.Tensor:
    """The curve the toy data are sampled from: ``2 sin(x) + x``."""
    return 2 * torch.sin(x) + x


def make_regression_data(
    num_points: int = 80,
    noise: float = 1.0,
    x_max: float = 10.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted inputs ``x`` uniform on [0, x_max) and targets ``true_function(x)`` plus noise.

    The noise is Gaussian with standard deviation ``noise``. Everything is drawn and computed in
    float64 and rounded once to float32, so the data are the same bits on every CPU: float32
    ``randn`` and ``sin`` differ in their last bit between instruction sets (AVX2 vs scalar
    code), and so would every chart and table made from the data.
    """
    check_positive_int("num_points", num_points)
    if not noise >= 0:  # also refuses NaN
        raise ValueError(f"noise is a standard deviation and must be >= 0, got {noise}")
    x = torch.rand(num_points, generator=generator, dtype=torch.float64) * x_max
    x, _ = torch.sort(x)
    eps = torch.randn(num_points, generator=generator, dtype=torch.float64)
    y = true_function(x) + noise * eps
    return x.float(), y.float()


def _check_width(width) -> None:
    values = width.detach() if isinstance(width, torch.Tensor) else torch.tensor(float(width))
    if not (values > 0).all():  # NaN fails this test too
        raise ValueError(
            f"width must be > 0, got {width}; a kernel of width 0 is a hard lookup, "
            "use nearest_neighbour for that"
        )


def gaussian_kernel(distance: torch.Tensor, width: float | torch.Tensor = 1.0) -> torch.Tensor:
    """The Gaussian kernel ``exp(-distance^2 / (2 width^2))``, elementwise."""
    _check_width(width)
    return torch.exp(-(distance**2) / (2 * width**2))


def _check_pairs(keys, values) -> None:
    _check_1d("keys", keys)
    _check_1d("values", values)
    if keys.shape != values.shape:
        raise ValueError(
            f"keys and values must pair up one to one, got {tuple(keys.shape)} keys and "
            f"{tuple(values.shape)} values"
        )


def _check_1d(name: str, tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one scalar per point), got shape {tuple(tensor.shape)}; "
            "flatten it with .reshape(-1)"
        )


def kernel_scores(
    queries: torch.Tensor, keys: torch.Tensor, width: float | torch.Tensor
) -> torch.Tensor:
    """Attention scores ``-(q_i - k_j)^2 / (2 width^2)``, shape (Tq, Tk): the kernel's logarithm."""
    _check_1d("queries", queries)
    _check_1d("keys", keys)
    _check_width(width)
    differences = queries[:, None] - keys[None, :]  # (Tq, Tk)
    return -(differences**2) / (2 * width**2)


def nadaraya_watson(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    width: float | torch.Tensor = 1.0,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nadaraya-Watson kernel regression with a Gaussian kernel.

    Returns ``(predictions (Tq,), weights (Tq, Tk))``; each row of ``weights`` sums to one.
    ``mask`` (Tq, Tk) bool, True = may attend, excludes pairs, e.g. ``~torch.eye(n, dtype=bool)``
    for leave-one-out predictions of the training points themselves. A query whose keys are
    all masked has no weights to normalize: its row of weights and its prediction are NaN.
    """
    _check_pairs(keys, values)
    scores = kernel_scores(queries, keys, width)
    if mask is not None:
        if mask.dtype != torch.bool or mask.shape != scores.shape:
            raise ValueError(
                f"mask must be a bool tensor of shape {tuple(scores.shape)} (True = may attend), "
                f"got dtype {mask.dtype} and shape {tuple(mask.shape)}"
            )
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # normalize over the KEYS of each query
    return weights @ values, weights


def nearest_neighbour(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard lookup: each query takes the value of its closest key.

    Returns ``(predictions (Tq,), weights (Tq, Tk))`` with one-hot rows.
    """
    _check_pairs(keys, values)
    scores = kernel_scores(queries, keys, 1.0)
    index = scores.argmax(dim=-1)
    weights = torch.nn.functional.one_hot(index, num_classes=keys.shape[0]).to(values.dtype)
    return values[index], weights


class LearnedWidthRegression(nn.Module):
    """Nadaraya-Watson regression whose kernel width is a trainable parameter.

    The width is stored as its logarithm so that gradient steps can never make it negative.
    """

    def __init__(self, initial_width: float = 1.0):
        super().__init__()
        _check_width(initial_width)
        self.log_width = nn.Parameter(torch.tensor(float(initial_width)).log())

    @property
    def width(self) -> torch.Tensor:
        return self.log_width.exp()

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictions (Tq,) and weights (Tq, Tk) with the current learned width."""
        return nadaraya_watson(queries, keys, values, self.width, mask=mask)


def fit_width(
    x: torch.Tensor,
    y: torch.Tensor,
    initial_width: float = 2.0,
    steps: int = 200,
    lr: float = 0.05,
    leave_one_out: bool = True,
) -> tuple[LearnedWidthRegression, list[float], list[float]]:
    """Learn the kernel width by gradient descent on the training points' squared error.

    With ``leave_one_out=False`` each point may attend to itself, and the loss is minimized by
    a width shrinking towards zero (every point predicts its own noisy label). Returns the
    model and the per-step losses and widths.
    """
    _check_pairs(x, y)
    check_positive_int("steps", steps)
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    model = LearnedWidthRegression(initial_width).to(x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    mask = ~torch.eye(len(x), dtype=torch.bool, device=x.device) if leave_one_out else None
    losses, widths = [], []
    for _ in range(steps):
        predictions, _ = model(x, x, y, mask=mask)
        loss = torch.mean((predictions - y) ** 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        widths.append(model.width.item())
    return model, losses, widths


def check_kernel_regression(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor],
) -> str:
    """Check a reader's Laplace-kernel regression ``fn(queries, keys, values, width)``.

    The Laplace kernel is ``exp(-|q - k| / width)``; the prediction is the kernel-weighted
    average of the values. Raises AssertionError with a hint when ``fn`` is wrong.
    """
    generator = torch.Generator().manual_seed(1)
    queries = torch.rand(7, generator=generator) * 10
    keys = torch.rand(11, generator=generator) * 10
    values = torch.randn(11, generator=generator)
    for width in (0.3, 1.0, 4.0):
        expected = torch.softmax(-(queries[:, None] - keys[None, :]).abs() / width, -1) @ values
        got = fn(queries, keys, values, width)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise AssertionError(
                f"expected a tensor of shape {tuple(expected.shape)} (one prediction per "
                f"query), got {shape}"
            )
        if not torch.allclose(got, expected, atol=1e-5):
            distances = (queries[:, None] - keys[None, :]).abs()
            wrong_axis = torch.exp(-distances / width)
            wrong_axis = (wrong_axis / wrong_axis.sum(0)) @ values
            hint = (
                "your weights are normalized over the queries (axis 0); normalize each "
                "query's weights over the keys (axis -1)"
                if torch.allclose(got, wrong_axis, atol=1e-5)
                else "compare your weights with softmax(-|q - k| / width) over the keys"
            )
            raise AssertionError(f"wrong predictions for width={width}: {hint}")
    return "Correct: your Laplace-kernel regression matches the reference."
