"""book/benchmarks.csv, written by `make bench`: every chapter measured, the total within the
budget (DESIGN.md: 600 s for the whole book on a 2-core CPU), and the one figure the README
quotes for the whole book equal to the file's total (the Performance page renders the file)."""

from __future__ import annotations

import csv
import re

from conftest import CHAPTERS, ROOT

BUDGET_S = 600


def rows():
    with open(ROOT / "book" / "benchmarks.csv", newline="") as file:
        return {row["notebook"]: float(row["wall time (s)"]) for row in csv.DictReader(file)}


def test_every_chapter_is_measured_and_the_total_is_their_sum():
    times = rows()
    assert sorted(name for name in times if name != "total") == sorted(CHAPTERS)
    assert abs(sum(v for k, v in times.items() if k != "total") - times["total"]) < 0.5


def test_the_book_executes_within_its_budget():
    assert rows()["total"] <= BUDGET_S, f"make bench measured more than {BUDGET_S} s"


def test_the_readme_quotes_the_measured_total():
    quoted = re.findall(r"the whole book in\s+([\d,.]+) s", (ROOT / "README.md").read_text())
    assert quoted == [f"{rows()['total']:.1f}"], (
        f"README.md must quote the whole book's time from book/benchmarks.csv once, found "
        f"{quoted}; update it after `make bench`"
    )
