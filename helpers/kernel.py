"""Attention as kernel regression (chapter 1): the Nadaraya-Watson estimator.

Shapes: ``queries`` (Tq,), ``keys`` (Tk,), ``values`` (Tk,); attention weights
(Tq, Tk), one row per query, each row a probability distribution over the keys.

The estimator predicts, for a query ``q``, the weighted average of the values

    f(q) = sum_j a_j(q) v_j,   a_j(q) = softmax_j( -(q - k_j)^2 / (2 width^2) ),

which is attention with a Gaussian kernel as its similarity. Writing the
normalized kernel as a softmax (instead of dividing exponentials by their sum)
keeps it finite when every kernel value underflows to zero: a narrow kernel far
from every key.
"""

from __future__ import annotations

import torch
from torch import nn

from helpers import _validate as check

__all__ = [
    "gaussian_kernel",
    "kernel_scores",
    "nadaraya_watson",
    "nearest_neighbour",
    "LearnedWidthRegression",
    "fit_width",
]


def gaussian_kernel(
    distance: torch.Tensor, width: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """The Gaussian kernel ``exp(-distance^2 / (2 width^2))``, elementwise."""
    check.kernel_width(width)
    return torch.exp(-(distance**2) / (2 * width**2))


def kernel_scores(
    queries: torch.Tensor, keys: torch.Tensor, width: float | torch.Tensor
) -> torch.Tensor:
    """Attention scores ``-(q_i - k_j)^2 / (2 width^2)``, shape (Tq, Tk): the
    kernel's logarithm."""
    check.vector("queries", queries)
    check.vector("keys", keys)
    check.kernel_width(width)
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

    Returns ``(predictions (Tq,), weights (Tq, Tk))``; each row of ``weights``
    sums to one. ``mask`` (Tq, Tk) bool, True = may attend, excludes pairs, e.g.
    ``~torch.eye(n, dtype=bool)`` for leave-one-out predictions of the training
    points themselves. A query whose keys are all masked has no weights to
    normalize: its row of weights and its prediction are NaN.
    """
    check.pairs(keys, values)
    scores = kernel_scores(queries, keys, width)
    if mask is not None:
        check.bool_mask(mask)
        if mask.shape != scores.shape:
            raise ValueError(
                f"mask must have shape {tuple(scores.shape)} (Tq, Tk), "
                f"got {tuple(mask.shape)}"
            )
        scores = scores.masked_fill(~mask, float("-inf"))
    # normalize over the KEYS of each query
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def nearest_neighbour(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard lookup: each query takes the value of its closest key.

    Returns ``(predictions (Tq,), weights (Tq, Tk))`` with one-hot rows.
    """
    check.pairs(keys, values)
    scores = kernel_scores(queries, keys, 1.0)
    index = scores.argmax(dim=-1)
    weights = torch.nn.functional.one_hot(index, num_classes=keys.shape[0]).to(
        values.dtype
    )
    return values[index], weights


class LearnedWidthRegression(nn.Module):
    """Nadaraya-Watson regression whose kernel width is a trainable parameter.

    The width is stored as its logarithm so that gradient steps can never make
    it negative.
    """

    def __init__(self, initial_width: float = 1.0):
        super().__init__()
        check.kernel_width(initial_width)
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
        """Predictions (Tq,) and weights (Tq, Tk) with the current learned
        width."""
        return nadaraya_watson(queries, keys, values, self.width, mask=mask)


def _check_fit(x, y, steps, lr, leave_one_out) -> None:
    check.pairs(x, y)
    check.positive_int("steps", steps)
    check.positive_number("lr", lr)
    check.boolean("leave_one_out", leave_one_out)


def fit_width(
    x: torch.Tensor,
    y: torch.Tensor,
    initial_width: float = 2.0,
    steps: int = 200,
    lr: float = 0.05,
    leave_one_out: bool = True,
) -> tuple[LearnedWidthRegression, list[float], list[float]]:
    """Learn the kernel width by gradient descent on the mean squared error.

    With ``leave_one_out=False`` each point may attend to itself, and the loss
    is minimized by a width shrinking towards zero (every point predicts its own
    noisy label). Returns the model and the per-step losses and widths.
    """
    _check_fit(x, y, steps, lr, leave_one_out)
    model = LearnedWidthRegression(initial_width).to(x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    mask = (
        ~torch.eye(len(x), dtype=torch.bool, device=x.device)
        if leave_one_out
        else None
    )
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
