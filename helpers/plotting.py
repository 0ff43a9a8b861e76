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
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

__all__ = [
    "ROLE_COLOURS",
    "use_book_style",
    "heatmap",
    "to_numpy",
    "show_mask_and_weights",
]

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


HIDDEN = "#d0d0d0"  # masked pairs: weight exactly zero


def show_mask_and_weights(masks, weights, titles) -> None:
    """Chapter 2's figure: one column per example, a (T, T) boolean mask on
    top, the (T, T) weights it gives below, the pairs it hides hatched grey."""
    columns = len(masks)
    fig, axes = plt.subplots(
        2, columns, figsize=(6.2, 5.6), squeeze=False, layout="constrained"
    )
    for column, (mask_2d, weights_2d, title) in enumerate(
        zip(masks, weights, titles, strict=True)
    ):
        allowed = to_numpy(mask_2d)
        top, bottom = axes[0, column], axes[1, column]
        top.imshow(
            np.where(allowed, 1.0, np.nan), cmap="Greens", vmin=0, vmax=2.5
        )
        image = bottom.imshow(
            to_numpy(weights_2d), cmap="viridis", vmin=0, vmax=1
        )
        for ax, name in ((top, f"mask: {title}"), (bottom, "weights")):
            _hatch_hidden(ax, allowed)
            ax.set(title=name, xlabel="key position", ylabel="query position")
            ax.set_xticks(range(allowed.shape[1]))
            ax.set_yticks(range(allowed.shape[0]))
            ax.grid(False)
    fig.colorbar(image, ax=axes[1, :], shrink=0.9, label="attention weight")
    fig.legend(
        handles=[
            Patch(facecolor=plt.cm.Greens(0.4), label="may attend"),
            Patch(
                facecolor=HIDDEN,
                hatch="///",
                edgecolor="white",
                label="masked: weight exactly 0",
            ),
        ],
        loc="outside upper center",
        ncols=2,
        frameon=False,
    )
    plt.show()


def _hatch_hidden(ax: plt.Axes, allowed: np.ndarray) -> None:
    """Cover every cell where ``allowed`` is False with a hatched grey
    square."""
    for i, j in zip(*np.nonzero(~allowed), strict=True):
        ax.add_patch(
            Rectangle(
                (j - 0.5, i - 0.5),
                1,
                1,
                facecolor=HIDDEN,
                hatch="///",
                edgecolor="white",
                lw=0,
            )
        )
