"""The book's diagrams: boxes, arrows and labels on matplotlib, written as
deterministic SVG.

One visual language for every diagram, and the same colours as the plots
(``helpers.plotting.ROLE_COLOURS``): a *tensor* is a square-cornered box filled
with a light tint of its role's colour (query, key, value, mask, residual); an
*operation* is a rounded white box; shapes are written in a monospace font
beside the arrows that carry them.

Coordinates are inches, measured from the top-left corner, so a font size in
points means the same thing in every diagram. Diagrams are at most ``MAX_WIDTH``
inches wide and their text at least ``MIN_FONT`` points: shown on a 390 px phone
(where a figure is 342 px wide), the smallest text is then 13.2 CSS px, above
the page's small print (13 px). ``scripts/make_diagrams.py`` draws the book's
diagrams with this module; ``tests/test_diagrams.py`` checks them.
"""

from __future__ import annotations

import pathlib

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.colors import to_rgb
from matplotlib.patches import (
    Circle,
    FancyArrowPatch,
    FancyBboxPatch,
    Rectangle,
)

from helpers.plotting import ROLE_COLOURS

__all__ = ["Diagram", "tint", "MAX_WIDTH", "MIN_FONT", "FONT", "INK"]

MAX_WIDTH = 4.5  # inches: 432 CSS px, scaled to 342 px (0.79) on a 390 px phone
MIN_FONT = (
    12.5  # points: 16.7 CSS px at full size, 13.2 px in a 342 px phone column
)
FONT = 12.5
INK = "#222222"  # text, outlines and arrows of no particular role
MONO = "DejaVu Sans Mono"

# Deterministic SVG: text drawn as paths (no dependence on the reader's fonts),
# fixed ids, no date. The same matplotlib version writes the same bytes on every
# machine.
SVG_STYLE = {
    "svg.fonttype": "path",
    "svg.hashsalt": "attention-book",
    "font.family": "DejaVu Sans",
    "font.size": FONT,
    "mathtext.fontset": "dejavusans",
    "path.simplify": False,
}


def tint(colour: str, amount: float = 0.82) -> tuple[float, float, float]:
    """``colour`` mixed with white (``amount`` of white): a fill that black text
    reads on."""
    if not 0.0 <= amount <= 1.0:
        raise ValueError(f"amount must be in [0, 1], got {amount}")
    return tuple(c + (1.0 - c) * amount for c in to_rgb(colour))


def _role_colour(role: str | None) -> str:
    if role is None:
        return INK
    if role not in ROLE_COLOURS:
        raise ValueError(
            f"unknown role {role!r}; use one of {sorted(ROLE_COLOURS)} or None"
        )
    return ROLE_COLOURS[role]


class Diagram:
    """A blank canvas ``width`` x ``height`` inches; y grows downwards."""

    def __init__(self, width: float, height: float):
        if not 0 < width <= MAX_WIDTH:
            raise ValueError(
                f"width={width} inches: a diagram must be at most {MAX_WIDTH} "
                "inches wide to stay legible on a phone; stack its parts "
                "vertically instead"
            )
        if height <= 0:
            raise ValueError(f"height must be positive, got {height}")
        with mpl.rc_context(SVG_STYLE):
            self.figure = plt.figure(figsize=(width, height), facecolor="white")
            self.ax = self.figure.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(height, 0)
        self.ax.set_axis_off()
        self.width, self.height = width, height

    def text(
        self,
        x,
        y,
        label,
        *,
        size=FONT,
        colour=INK,
        mono=False,
        ha="center",
        **kw,
    ):
        """Text centred (vertically) at ``(x, y)``."""
        if size < MIN_FONT:
            raise ValueError(
                f"size={size} is below the diagrams' minimum of {MIN_FONT} pt"
            )
        family = MONO if mono else "DejaVu Sans"
        return self.ax.text(
            x,
            y,
            label,
            fontsize=size,
            color=colour,
            ha=ha,
            va="center",
            family=family,
            **kw,
        )

    def tensor(
        self,
        x,
        y,
        w,
        h,
        label,
        role=None,
        *,
        mono=False,
        dashed=False,
        filled=True,
    ):
        """A tensor: a box centred at ``(x, y)`` filled with its role's tint (or
        an outline)."""
        colour = _role_colour(role)
        fill = "none" if not filled else tint(colour) if role else "white"
        self.ax.add_patch(
            Rectangle(
                (x - w / 2, y - h / 2), w, h, facecolor=fill, edgecolor=colour, lw=1.6,
                linestyle="--" if dashed else "-",
            )
        )  # fmt: skip
        self.text(x, y, label, mono=mono)
        return (x, y, w, h)

    def operation(self, x, y, w, h, label, role=None, *, dashed=False):
        """An operation: a rounded white box centred at ``(x, y)``, edged in its
        role's colour."""
        self.ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.08",
                facecolor="white", edgecolor=_role_colour(role), lw=1.6,
                linestyle="--" if dashed else "-",
            )
        )  # fmt: skip
        self.text(x, y, label)
        return (x, y, w, h)

    def arrow(
        self,
        start,
        end,
        *,
        role=None,
        label=None,
        side="right",
        dashed=False,
        rad=0.0,
    ):
        """An arrow from ``start`` to ``end``; ``label`` (a shape, say) beside
        its middle."""
        colour = _role_colour(role)
        self.ax.add_patch(
            FancyArrowPatch(
                start, end, arrowstyle="-|>,head_length=6,head_width=3.5", color=colour,
                lw=1.6, shrinkA=0, shrinkB=0, mutation_scale=1,
                linestyle="--" if dashed else "-", connectionstyle=f"arc3,rad={rad}",
            )
        )  # fmt: skip
        if label is not None:
            mid_x, mid_y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
            offset = 0.08 if side == "right" else -0.08
            self.text(
                mid_x + offset,
                mid_y,
                label,
                mono=True,
                ha="left" if side == "right" else "right",
            )

    def line(self, points, *, role=None, dashed=False, lw=1.6):
        """A polyline through ``points`` (no arrow head)."""
        xs, ys = zip(*points, strict=True)
        self.ax.plot(
            xs, ys, color=_role_colour(role), lw=lw, linestyle="--" if dashed else "-",
            solid_capstyle="butt",
        )  # fmt: skip

    def circle(
        self, x, y, radius, *, role=None, fill="none", lw=1.6, dashed=False
    ):
        """A circle centred at ``(x, y)``: a dial, a dot, or a sum node."""
        self.ax.add_patch(
            Circle(
                (x, y), radius, facecolor=fill, edgecolor=_role_colour(role), lw=lw,
                linestyle="--" if dashed else "-",
            )
        )  # fmt: skip

    def cells(
        self,
        x,
        y,
        values,
        *,
        cell=(0.3, 0.3),
        cmap="viridis",
        colours=None,
        labels=True,
    ):
        """A small matrix (list of rows) of shaded cells, top-left corner at
        ``(x, y)``.

        ``cell`` is a cell's (width, height). Values in [0, 1] are coloured with
        ``cmap`` (viridis, as the book's attention maps) and, if ``labels``,
        written in their cell; ``colours`` (a list of rows of colours) overrides
        the map.
        """
        colour_map = mpl.colormaps[cmap]
        cell_w, cell_h = cell
        for i, row in enumerate(values):
            for j, value in enumerate(row):
                fill = (
                    colours[i][j] if colours is not None else colour_map(value)
                )
                self.ax.add_patch(
                    Rectangle(
                        (x + j * cell_w, y + i * cell_h), cell_w, cell_h, facecolor=fill,
                        edgecolor="white", lw=1.2,
                    )
                )  # fmt: skip
                if labels:
                    red, green, blue = to_rgb(fill)
                    light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
                    self.text(
                        x + (j + 0.5) * cell_w, y + (i + 0.5) * cell_h, f"{value:.2f}",
                        colour=INK if light else "white",
                    )  # fmt: skip

    def smallest_font(self) -> float:
        """The smallest font size (points) of any text in the diagram."""
        return min(
            text.get_fontsize() for text in self.figure.texts + self.ax.texts
        )

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write the diagram as SVG, byte for byte the same on every run; close
        the figure."""
        path = pathlib.Path(path)
        with mpl.rc_context(SVG_STYLE):
            self.figure.savefig(
                path,
                format="svg",
                facecolor="white",
                metadata={"Date": None, "Creator": None},
            )
        plt.close(self.figure)
        return path
