"""Tests of the book's diagrams: helpers.diagrams, scripts/make_diagrams.py and their use.

Every diagram in book/_static/diagrams/ is drawn by scripts/make_diagrams.py; the committed
SVG must be exactly what the script draws now, legible on a phone, in the book's role colours,
and shown in its chapter inside a ``{figure}`` with alt text and a caption.
"""

from __future__ import annotations

import importlib.util
import re

import matplotlib

matplotlib.use("Agg")  # no display; before pyplot is imported

import matplotlib.pyplot as plt
import pytest
from conftest import ROOT, markdown_of, read_notebook

from helpers.diagrams import FONT, MAX_WIDTH, MIN_FONT, Diagram, tint
from helpers.plotting import ROLE_COLOURS

_spec = importlib.util.spec_from_file_location(
    "make_diagrams", ROOT / "scripts/make_diagrams.py"
)
make_diagrams = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_diagrams)

DIAGRAMS = make_diagrams.DIAGRAMS
FOLDER = ROOT / "book" / "_static" / "diagrams"

# Drawn for chapters whose notebooks another contributor is writing (or that do not exist
# yet): whoever inserts a figure removes its name here.
AWAITING_INSERTION: set[str] = set()

FIGURE = re.compile(
    r"```\{figure\} \.\./book/_static/diagrams/(?P<name>[\w-]+)\.svg\n(?P<body>.*?)\n```",
    re.DOTALL,
)
PHONE_COLUMN_PX = (
    342  # a figure's width on a 390 px phone (measured in the built site)
)
SMALL_PRINT_PX = 13  # `font-size: small`, the size of the page's smallest text


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_committed_svg_is_what_the_script_draws(name, tmp_path):
    draw, _chapter = DIAGRAMS[name]
    fresh = draw().save(tmp_path / f"{name}.svg").read_bytes()
    committed = FOLDER / f"{name}.svg"
    assert committed.exists(), (
        f"{committed} is missing: run python scripts/make_diagrams.py"
    )
    assert fresh == committed.read_bytes(), (
        f"{committed.name} is out of date: run python scripts/make_diagrams.py {name}"
    )


def test_drawing_is_deterministic(tmp_path):
    first = make_diagrams.soft_lookup().save(tmp_path / "a.svg").read_bytes()
    second = make_diagrams.soft_lookup().save(tmp_path / "b.svg").read_bytes()
    assert first == second
    assert b"<dc:date>" not in first  # no timestamp in the file


def test_every_svg_in_the_folder_is_drawn_by_the_script():
    assert {path.stem for path in FOLDER.glob("*.svg")} == set(DIAGRAMS)
    assert AWAITING_INSERTION.issubset(DIAGRAMS)


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_diagram_text_is_legible_on_a_phone(name):
    diagram = DIAGRAMS[name][0]()
    assert diagram.width <= MAX_WIDTH
    # An SVG is shown at its own size (1 pt = 4/3 CSS px), shrunk to fit a narrower column.
    natural_px = diagram.width * 96
    scale = min(1.0, PHONE_COLUMN_PX / natural_px)
    smallest_px = diagram.smallest_font() * 4 / 3 * scale
    assert smallest_px >= SMALL_PRINT_PX, (
        f"{name}: text of {smallest_px:.1f} px on a phone"
    )


def test_diagrams_use_the_role_colours_of_the_plots_and_no_others():
    svgs = "".join(
        (FOLDER / f"{name}.svg").read_text().lower() for name in DIAGRAMS
    )
    unused = [
        role
        for role, colour in ROLE_COLOURS.items()
        if colour.lower() not in svgs
    ]
    assert not unused, f"no diagram shows these roles: {unused}"
    # Colours are defined once, in helpers.plotting: the drawing script names none of its own.
    script = (ROOT / "scripts" / "make_diagrams.py").read_text()
    assert not re.findall(r"#[0-9a-fA-F]{6}\b", script)


def test_the_svgs_have_a_white_background_for_the_dark_theme():
    # pydata-sphinx-theme puts images on white in dark mode; the diagram's own white background
    # keeps it readable wherever else it is shown (a feed reader, GitHub's dark mode).
    for name in DIAGRAMS:
        svg = (FOLDER / f"{name}.svg").read_text()
        background = re.search(
            r'<g id="patch_1">\s*<path d="[^"]*" style="([^"]*)"', svg
        )
        assert background and background[1] == "fill: #ffffff", name


def figures_by_chapter() -> dict[str, list[re.Match]]:
    chapters = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        chapters[path.stem] = list(
            FIGURE.finditer(markdown_of(read_notebook(path)))
        )
    return chapters


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_each_diagram_is_shown_in_its_chapter(name):
    chapter = DIAGRAMS[name][1]
    shown_in = {
        stem
        for stem, found in figures_by_chapter().items()
        for m in found
        if m["name"] == name
    }
    if name in AWAITING_INSERTION:
        assert not shown_in, (
            f"{name} is now in {shown_in}: remove it from AWAITING_INSERTION"
        )
    else:
        assert chapter in shown_in, (
            f"{name} is not in a {{figure}} of notebooks/{chapter}"
        )


def test_every_figure_of_a_diagram_has_alt_text_and_a_caption():
    found = [m for matches in figures_by_chapter().values() for m in matches]
    assert found, "no diagram is shown in any chapter"
    for match in found:
        name, body = match["name"], match["body"]
        assert (FOLDER / f"{name}.svg").exists(), (
            f"figure of a missing diagram {name}"
        )
        alt = re.search(r"^:alt: (.+)$", body, re.MULTILINE)
        assert alt and len(alt[1].split()) >= 15, (
            f"{name}: alt text must say what it shows"
        )
        caption = "\n".join(
            line for line in body.splitlines() if not line.startswith(":")
        )
        if name.startswith("map_"):  # the book's map: where the chapter sits
            assert len(caption.split()) >= 8, f"{name}: say what is highlighted"
            continue
        assert len(caption.split()) >= 20, (
            f"{name}: the caption must say what to look at"
        )
        assert "Look at" in caption or "look at" in caption, (
            f"{name}: say what to look at"
        )


def test_diagram_refuses_what_a_phone_cannot_show():
    with pytest.raises(ValueError, match="at most"):
        Diagram(MAX_WIDTH + 0.5, 3)
    with pytest.raises(ValueError, match="height"):
        Diagram(3, 0)
    diagram = Diagram(3, 2)
    with pytest.raises(ValueError, match="minimum"):
        diagram.text(1, 1, "tiny", size=MIN_FONT - 2)
    with pytest.raises(ValueError, match="unknown role"):
        diagram.tensor(1, 1, 1, 0.4, "x", role="queries")
    diagram.text(1, 1, "fine", size=FONT)
    assert diagram.smallest_font() == FONT


def test_tint_mixes_with_white():
    assert tint("#000000", 1.0) == (1.0, 1.0, 1.0)
    assert tint("#000000", 0.0) == (0.0, 0.0, 0.0)
    assert tint("#ff0000", 0.5) == (1.0, 0.5, 0.5)
    with pytest.raises(ValueError, match="amount"):
        tint("#ff0000", 1.5)
