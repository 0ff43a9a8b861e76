"""The book's measured execution time, read from ``book/benchmarks.csv`` at build time.

``make bench`` writes that file (one row per notebook, then ``total``) and, beside it,
``book/benchmarks_run.csv``: the one run it measured (date, commit, machine, load average before
and after). This extension turns both into MyST substitutions, so that every page quoting the
book's time shows the figure of the last whole run rather than a typed copy:
``{{ book_seconds }}`` (for example ``526``), ``{{ book_minutes }}`` (``8.8``),
``{{ book_budget_seconds }}`` (the 780-second budget, DESIGN.md), ``{{ book_verdict }}``
("within" or "over"), ``{{ book_run_date }}``, ``{{ book_run_commit }}``,
``{{ book_run_machine }}``, ``{{ book_run_load }}``. The README, which GitHub renders without
Sphinx, quotes the same total and ``tests/test_benchmarks.py`` keeps it equal to the file's. A
missing file or total is a build error that names ``make bench``. The module imports nothing from
Sphinx, so that the unit tests read the same figures without the website's environment.
"""

import csv
import pathlib

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks.csv"
BUDGET_SECONDS = 780


def total_seconds(path: pathlib.Path = BENCHMARKS) -> float:
    """The ``total`` row of a benchmarks file written by ``make bench``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make bench` to measure the book")
    with path.open(newline="") as handle:
        rows = {row[0]: row[1] for row in csv.reader(handle) if len(row) >= 2}
    if "total" not in rows:
        raise ValueError(f"{path} has no 'total' row: run `make bench` to measure the book")
    return float(rows["total"])


def the_run(path: pathlib.Path = BENCHMARKS) -> dict:
    """The run that wrote ``path``: its date, commit, machine and load (``<stem>_run.csv``)."""
    run = path.with_name(path.stem + "_run.csv")
    if not run.is_file():
        raise FileNotFoundError(f"{run} is missing: run `make bench` to measure the book")
    with run.open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    return row


def substitutions(path: pathlib.Path = BENCHMARKS) -> dict:
    seconds, run = total_seconds(path), the_run(path)
    return {
        "book_seconds": f"{seconds:.0f}",
        "book_minutes": f"{seconds / 60:.1f}",
        "book_budget_seconds": str(BUDGET_SECONDS),
        "book_verdict": "within" if seconds <= BUDGET_SECONDS else "over",
        "book_run_date": run["date"],
        "book_run_commit": run["commit"],
        "book_run_machine": run["machine"],
        "book_run_load": f"{run['load_before']} before and {run['load_after']} after",
    }


def add_substitutions(app, config) -> None:
    config.myst_substitutions = {**(config.myst_substitutions or {}), **substitutions()}


def setup(app):
    app.connect("config-inited", add_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
