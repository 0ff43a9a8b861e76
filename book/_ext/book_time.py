"""The book's measured execution time, read from ``book/benchmarks.csv`` at build time.

``make bench`` writes that file (one row per notebook, then ``total``). This extension turns its
total into MyST substitutions, so that every page quoting the book's time shows the figure of
the last measurement rather than a typed copy: ``{{ book_seconds }}`` (for example ``526``),
``{{ book_minutes }}`` (``8.8``) and ``{{ book_budget_seconds }}`` (the 660-second budget,
DESIGN.md). The README, which GitHub renders without Sphinx, quotes the same total and
``tests/test_benchmarks.py`` keeps it equal to the file's. A missing file or total is a build
error that names ``make bench``. The module imports nothing from Sphinx, so that the unit tests
(``tests/test_benchmarks.py``) read the same figure without the website's environment.
"""

import csv
import pathlib

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks.csv"
BUDGET_SECONDS = 660


def total_seconds(path: pathlib.Path = BENCHMARKS) -> float:
    """The ``total`` row of a benchmarks file written by ``make bench``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make bench` to measure the book")
    with path.open(newline="") as handle:
        rows = {row[0]: row[1] for row in csv.reader(handle) if len(row) >= 2}
    if "total" not in rows:
        raise ValueError(f"{path} has no 'total' row: run `make bench` to measure the book")
    return float(rows["total"])


def add_substitutions(app, config) -> None:
    seconds = total_seconds()
    config.myst_substitutions = {
        **(config.myst_substitutions or {}),
        "book_seconds": f"{seconds:.0f}",
        "book_minutes": f"{seconds / 60:.1f}",
        "book_budget_seconds": str(BUDGET_SECONDS),
    }


def setup(app):
    app.connect("config-inited", add_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
