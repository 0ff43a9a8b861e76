"""The Sources and errata page (book/sources.md) names tests; every one must exist.

The page's table says which test pins the fix of each mistake found in the source texts. A
renamed or deleted test would leave the page pointing at nothing; this check catches it.
"""

import re

import pytest
from conftest import NOTEBOOKS, PAGES, ROOT, markdown_of, read_notebook

SOURCES = ROOT / "book" / "sources.md"


def defined_tests() -> dict[str, set[str]]:
    """Every ``def test_...`` in tests/, by file name."""
    return {
        path.name: set(
            re.findall(r"^def (test_\w+)\(", path.read_text(), flags=re.M)
        )
        for path in (ROOT / "tests").glob("test_*.py")
    }


def test_the_sources_page_is_in_the_table_of_contents():
    assert "book/sources" in PAGES


def test_every_test_the_sources_page_names_exists():
    text = SOURCES.read_text()
    tests = defined_tests()
    everywhere = set().union(*tests.values())
    qualified = re.findall(r"`(test_\w+\.py)::(test_\w+)`", text)
    bare = set(re.findall(r"`(test_\w+)`", text))
    assert qualified and bare, "the page names no tests: has its table moved?"
    for file, name in qualified:
        assert name in tests.get(file, set()), (
            f"sources.md names {file}::{name}, which is gone"
        )
    missing = sorted(name for name in bare if name not in everywhere)
    assert not missing, f"sources.md names tests that do not exist: {missing}"


def test_every_source_text_has_a_label_the_chapters_can_link_to():
    text = SOURCES.read_text()
    for number in range(5):
        assert f"(source-00{number})=" in text


# Chapters whose prose still says "source 00N" without a link (they are relinked separately);
# remove a chapter from this set once it is, and the check below holds it to it.
NOT_YET_RELINKED: set[str] = set()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_chapters_name_a_source_by_a_linked_description(request, path):
    """Prose says "a JAX blog post" linked to the page, not an unexplained "source 002"."""
    if path.stem in NOT_YET_RELINKED:
        request.applymarker(
            pytest.mark.xfail(strict=True, reason="not relinked yet")
        )
    bare = re.findall(r"\b[Ss]ource 00\d\b", markdown_of(read_notebook(path)))
    assert not bare, (
        f"{path.name}: {len(bare)} bare mentions such as {bare[0]!r}"
    )
