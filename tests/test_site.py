"""Checks of the built website (``make site`` builds it first): launch buttons, downloads, glue.

These read the static HTML in _build/html; the browser tests drive the same pages in Chromium.
"""

import ast
import html
import json
import re

import pytest
from conftest import (
    BRANCH,
    CHAPTERS,
    OWNER_REPO,
    ROOT,
    glued_values,
    markdown_of,
    read_notebook,
)

pytestmark = pytest.mark.site

SITE = ROOT / "_build" / "html"


@pytest.fixture(scope="module", autouse=True)
def site_is_built():
    if not (SITE / "index.html").exists():
        pytest.fail(
            "no _build/html: run `make book` (or `make site`, which builds it first)"
        )


def page(stem):
    return (SITE / "notebooks" / f"{stem}.html").read_text()


def test_every_chapter_has_a_page():
    assert CHAPTERS
    for stem in CHAPTERS:
        assert (SITE / "notebooks" / f"{stem}.html").exists(), stem


def test_every_page_has_the_favicon():
    for path in [
        SITE / "book" / "intro.html",
        *(SITE / "notebooks" / f"{s}.html" for s in CHAPTERS),
    ]:
        link = re.search(r'<link rel="icon" href="([^"]+)"', path.read_text())
        assert link, f"{path.name} has no favicon link"
        assert (path.parent / link.group(1)).resolve().is_file(), link.group(1)


@pytest.mark.parametrize("stem", CHAPTERS)
def test_launch_buttons_point_at_the_chapter_notebook(stem):
    text = page(stem)
    path = f"notebooks/{stem}.ipynb"
    colab = f"https://colab.research.google.com/github/{OWNER_REPO}/blob/{BRANCH}/{path}"
    binder = f"https://mybinder.org/v2/gh/{OWNER_REPO}/{BRANCH}?urlpath=lab/tree/{path}"
    assert f'href="{colab}"' in text
    assert f'href="{html.escape(binder)}"' in text or f'href="{binder}"' in text
    assert (
        f'href="https://github.com/{OWNER_REPO}"' in text
    )  # repository button
    assert f"github.com/{OWNER_REPO}/issues/new" in text  # issues button


@pytest.mark.parametrize("stem", CHAPTERS)
def test_download_button_serves_the_notebook(stem):
    assert f'href="../_sources/notebooks/{stem}.ipynb"' in page(stem)
    downloaded = SITE / "_sources" / "notebooks" / f"{stem}.ipynb"
    stored = ROOT / "notebooks" / f"{stem}.ipynb"
    assert json.loads(downloaded.read_text()) == json.loads(stored.read_text())


@pytest.mark.parametrize("stem", CHAPTERS)
def test_glued_numbers_appear_in_the_prose(stem):
    notebook = read_notebook(stem)
    values = glued_values(notebook)
    markdown = markdown_of(notebook)
    text = html.unescape(re.sub(r"<[^>]+>", "", page(stem)))
    roles = re.findall(r"\{glue:text\}`(\w+)(?::([^`]+))?`", markdown)
    for name, spec in roles:
        stored = values[name]
        shown = (
            format(ast.literal_eval(stored), spec)
            if spec
            else stored.strip("'\"")
        )
        assert shown in text, (
            f"{stem}: glued {name} = {shown} not found on the page"
        )


@pytest.mark.parametrize("stem", CHAPTERS)
def test_pages_load_mathjax_and_hide_the_setup_cell(stem):
    text = page(stem)
    assert "mathjax" in text.lower()
    assert "tag_hide-cell" in text


def test_performance_page_shows_the_benchmark_tables():
    text = (SITE / "book" / "performance.html").read_text()
    tables = re.findall(r"<table.*?</table>", text, flags=re.S)
    assert any("08_cnn_attention_lstm" in table for table in tables), (
        "benchmarks.csv not a table"
    )
    assert any("source 000" in table for table in tables), (
        "bench_reverse.csv not a table"
    )


@pytest.mark.parametrize("page", ["intro", "performance"])
def test_pages_quote_the_measured_book_time(page):
    """The substitution of book/_ext/book_time.py: the total of book/benchmarks.csv, rendered."""
    with open(ROOT / "book" / "benchmarks.csv") as file:
        total = float(
            next(line for line in file if line.startswith("total,")).split(",")[
                1
            ]
        )
    text = re.sub(
        r"\s+",
        " ",
        re.sub(r"<[^>]+>", " ", (SITE / "book" / f"{page}.html").read_text()),
    )
    assert f"{total:.0f} s ({total / 60:.1f} minutes)" in text, (
        f"{page}: the total is not shown"
    )
    assert "book_seconds" not in text, (
        f"{page}: a substitution was left unrendered"
    )
