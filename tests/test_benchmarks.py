"""book/benchmarks.csv, written by `make bench`: every chapter measured in one whole run (its
date, commit, machine and load in book/benchmarks_run.csv), the verdict against the budget
(DESIGN.md: 780 s for the whole book on a 2-core CPU) stated, and one figure for the book's time
everywhere: the README quotes the file's total, and the pages read it at build time
(book/_ext/book_time.py; tests/test_site.py checks the built pages)."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest
from conftest import CHAPTERS, NOTEBOOKS, ROOT, load_script

BUDGET_S = 780


def rows():
    with open(ROOT / "book" / "benchmarks.csv", newline="") as file:
        return {
            row["notebook"]: float(row["wall time (s)"])
            for row in csv.DictReader(file)
        }


def test_every_chapter_is_measured_and_the_total_is_their_sum():
    times = rows()
    assert sorted(name for name in times if name != "total") == sorted(CHAPTERS)
    assert (
        abs(sum(v for k, v in times.items() if k != "total") - times["total"])
        < 0.5
    )


def test_the_recorded_figure_is_one_named_run():
    """The total is one `make bench` run, named: its date, a commit of this repository, the
    machine and the load it ran under (a figure pieced from several runs names none of them)."""
    run = book_time().the_run()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", run["date"]), run
    assert "cores" in run["machine"] and "torch" in run["machine"], run
    float(run["load_before"]), float(run["load_after"])
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{run['commit']}^{{commit}}"], cwd=ROOT
    )
    assert known.returncode == 0, (
        f"{run['commit']} is not a commit of this repository"
    )


def test_the_pages_state_the_verdict_against_the_budget():
    """Over the budget, the page says "over": the verdict is computed, never typed."""
    values = book_time().substitutions()
    assert values["book_verdict"] == (
        "within" if rows()["total"] <= BUDGET_S else "over"
    )
    text = (ROOT / "book" / "performance.md").read_text()
    for name in (
        "book_verdict",
        "book_run_date",
        "book_run_commit",
        "book_run_load",
    ):
        assert f"{{{{ {name} }}}}" in text, name


def test_a_partial_run_cannot_be_recorded():
    command = [
        sys.executable,
        "scripts/execute.py",
        "--record",
        "/tmp/never.csv",
    ]
    notebook = "notebooks/01_kernel_regression.ipynb"
    result = subprocess.run(
        [*command, notebook], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode != 0 and "pass --all" in result.stderr


def test_the_readme_quotes_the_measured_total():
    quoted = re.findall(
        r"the whole book in\s+([\d,.]+) s", (ROOT / "README.md").read_text()
    )
    assert quoted == [f"{rows()['total']:.1f}"], (
        f"README.md must quote the whole book's time from book/benchmarks.csv once, found "
        f"{quoted}; update it after `make bench`"
    )


def book_time():
    """book/_ext/book_time.py, the Sphinx extension that gives the pages the total."""
    return load_script("book_time.py", folder="book/_ext")


def test_the_pages_read_the_total_from_the_file():
    extension = book_time()
    assert extension.total_seconds() == rows()["total"]
    assert extension.BUDGET_SECONDS == BUDGET_S
    for page in ("intro.md", "performance.md"):
        assert "{{ book_seconds }}" in (ROOT / "book" / page).read_text(), page


def test_no_page_types_the_books_time():
    """A typed copy of the total goes stale at the next `make bench`: pages use the substitution."""
    total = f"{rows()['total']:.0f}"
    typed = re.compile(rf"\b{total}(\.\d)? ?(s|seconds)\b")
    pages = [
        *(ROOT / "book").glob("*.md"),
        *(n.with_suffix(".py") for n in NOTEBOOKS),
    ]
    found = [p.name for p in pages if typed.search(p.read_text())]
    assert not found, (
        f"{found} type the book's time ({total} s): write {{{{ book_seconds }}}}"
    )


def test_a_missing_measurement_is_an_error_that_names_make_bench(tmp_path):
    extension = book_time()
    with pytest.raises(FileNotFoundError, match="make bench"):
        extension.total_seconds(tmp_path / "benchmarks.csv")
    (tmp_path / "benchmarks.csv").write_text(
        "notebook,wall time (s)\n01_x,3.0\n"
    )
    with pytest.raises(ValueError, match="no 'total' row"):
        extension.total_seconds(tmp_path / "benchmarks.csv")


def make_bench(what: str) -> subprocess.CompletedProcess:
    """``make -n bench WHAT=<what>``: the commands the benchmark entry point would run."""
    return subprocess.run(
        ["make", "--no-print-directory", "-n", "bench", f"WHAT={what}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_one_entry_point_writes_every_shipped_benchmark():
    """`make bench WHAT=...` runs each benchmark as its shipped CSV says it was made."""
    book = make_bench("book").stdout
    assert "scripts/execute.py --all --record book/benchmarks.csv" in book
    assert "scripts/bench_reverse.py --record" in make_bench("reverse").stdout
    with open(ROOT / "book" / "bench_decode.csv", newline="") as file:
        recorded = {row["command"] for row in csv.DictReader(file)}
    assert len(recorded) == 1, recorded
    command = recorded.pop().removeprefix("python ")
    assert command in " ".join(
        make_bench("decode").stdout.replace("\\\n", " ").split()
    )


def test_an_unknown_benchmark_names_the_choices():
    result = make_bench("nope")
    assert result.returncode != 0
    assert "choose book, reverse or decode" in result.stdout + result.stderr
