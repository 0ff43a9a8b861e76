"""Measuring models: parameter counts and the stable rank of a matrix.

Chapters 4, 6, 7 and 8 count parameters; chapters 4 and 6 measure how far attention's output
collapses towards a low-rank matrix. One definition of each, here.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import nn

from helpers import _validate as check

__all__ = ["count_parameters", "parameter_table", "stable_rank"]


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """The number of scalar parameters of ``module`` (shared parameters counted once).

    ``trainable_only=True`` counts only those with ``requires_grad`` (frozen ones left out).
    """
    check.module(module)
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def parameter_table(module: nn.Module, max_depth: int = 1) -> pd.DataFrame:
    """A table of the parameter count of every submodule down to ``max_depth`` levels.

    Submodules without parameters (dropout, activations) are left out.
    Columns: ``module`` (dotted name), ``type`` and ``parameters``; a last row ``total``.
    """
    check.module(module)
    check.positive_int("max_depth", max_depth)
    rows = []
    for name, child in module.named_modules():
        depth = name.count(".") + 1
        count = count_parameters(child)
        if name and depth <= max_depth and count > 0:  # skip dropout, activations
            rows.append((name, type(child).__name__, count))
    rows.append(("total", type(module).__name__, count_parameters(module)))
    return pd.DataFrame(rows, columns=["module", "type", "parameters"])


def stable_rank(matrix: torch.Tensor) -> float:
    """``||M||_F^2 / ||M||_2^2``: the sum of squared singular values over the largest one squared.

    Between 1 (every row along one direction) and ``min(M.shape)`` (all singular values equal),
    and, unlike the rank, not fooled by tiny singular values that are rounding noise.
    """
    check.tensor("matrix", matrix, floating=True, min_ndim=2)
    if matrix.ndim != 2:
        raise ValueError(
            f"matrix must be 2-D, got shape {tuple(matrix.shape)}; pick one, e.g. x[0]"
        )
    singular = torch.linalg.svdvals(matrix.detach().double())
    if singular[0] == 0:
        raise ValueError("the stable rank of a zero matrix is undefined (0 / 0)")
    return float((singular**2).sum() / singular[0] ** 2)
