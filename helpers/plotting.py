"""Plotting shared by the chapters: one look for every figure, and the figures
chapters reuse.

Static figures are matplotlib/seaborn rendered as high-DPI PNG (sharp on every
screen, and byte-stable output is not needed because nbval does not compare
images). Interactive figures are Altair charts.
"""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator

__all__ = ["ROLE_COLOURS", "use_book_style", "heatmap", "to_numpy"]

#: One colour per role, in every plot and diagram of the book (matplotlib's default cycle:
#: C0 blue, C1 orange, C2 green, C7 grey, C4 purple). Defined here and nowhere else.
ROLE_COLOURS = {
    "query": "#1f77b4",
    "key": "#ff7f0e",
    "value": "#2ca02c",
    "mask": "#7f7f7f",
    "residual": "#9467bd",
}


def use_book_style() -> None:
    """Set the book's matplotlib look; call once in a notebook's setup cell."""
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")
    except ImportError:  # pragma: no cover - only outside Jupyter
        pass
    mpl.rcParams.update(
        {
            "figure.figsize": (6.2, 3.4),
            "figure.dpi": 100,
            "savefig.bbox": "tight",
            "axes.grid": True,
            "grid.alpha": 0.3,
            "grid.linestyle": "--",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 10,
            "axes.titlesize": 10,
            "legend.frameon": False,
            "image.cmap": "viridis",
        }
    )


def to_numpy(values) -> np.ndarray:
    """A detached CPU NumPy copy of a tensor (or anything array-like)."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def heatmap(
    matrix,
    ax: plt.Axes | None = None,
    *,
    xlabel: str = "key position",
    ylabel: str = "query position",
    title: str | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
) -> plt.Axes:
    """Draw a 2-D matrix (attention weights, a mask, distances) with labelled
    axes."""
    values = to_numpy(matrix)
    if values.ndim != 2:
        raise ValueError(
            f"heatmap needs a 2-D matrix, got shape {values.shape}; "
            "select one batch element and head first, e.g. weights[0, 0]"
        )
    if ax is None:
        _, ax = plt.subplots()
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    # Rows and columns are positions: integer ticks only, and a full frame so
    # that white (zero) cells at the edge are not mistaken for empty page.
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for spine in ax.spines.values():
        spine.set_visible(True)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax
