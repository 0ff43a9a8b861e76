"""scripts/record_gpu_test.py reads a `make test-gpu` log; book/_ext/gpu_test.py quotes it."""

from __future__ import annotations

import importlib.util
import re

import pytest
from conftest import ROOT, load_script

record_gpu_test = load_script("record_gpu_test.py")
spec = importlib.util.spec_from_file_location(
    "gpu_test", ROOT / "book" / "_ext" / "gpu_test.py"
)
gpu_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_test)

# What make prints: the header, each pytest command over several lines, the summaries.
LOG = """\
GPU: NVIDIA H100 80GB HBM3 | torch 2.11.0+cu130 | Python 3.12.3
OMP_NUM_THREADS=4 python3 -m pytest -q --nbval-lax --nbval-current-env \\
\t--nbval-cell-timeout=1200 -n 5 \\
\t--dist loadscope notebooks/
........................................................................ [100%]
647 passed in 132.49s (0:02:12)
OMP_NUM_THREADS=4 python3 -m pytest -q -m "not site" -p no:cacheprovider \\
\t-n 5 --dist loadfile --ignore=tests/test_site.py tests/
FAILED tests/test_scripts.py::test_one - AssertionError
1 failed, 1272 passed, 1 skipped, 4 warnings in 92.92s (0:01:32)
"""


def test_a_log_gives_one_row_per_pytest_run_with_its_failures():
    notebooks, unit = record_gpu_test.parse(LOG)
    assert notebooks["run"] == "notebooks" and unit["run"] == "unit"
    assert (notebooks["passed"], notebooks["failed"], notebooks["seconds"]) == (
        "647",
        "0",
        "132.5",
    )
    assert (unit["passed"], unit["failed"], unit["skipped"]) == (
        "1272",
        "1",
        "1",
    )
    assert unit["failures"] == "tests/test_scripts.py::test_one"
    assert notebooks["failures"] == ""
    assert notebooks["jobs"] == unit["jobs"] == "5"
    assert unit["machine"] == "NVIDIA H100 80GB HBM3"
    assert (unit["torch"], unit["python"]) == ("2.11.0+cu130", "3.12.3")


def test_a_log_without_the_header_or_a_summary_is_refused():
    with pytest.raises(ValueError, match="make test-gpu"):
        record_gpu_test.parse(LOG.split("\n", 1)[1])
    with pytest.raises(ValueError, match="did it finish"):
        record_gpu_test.parse(LOG.split("647 passed")[0])


def test_recording_a_commit_again_replaces_its_runs(tmp_path):
    table = tmp_path / "gpu.csv"
    rows = record_gpu_test.parse(LOG)
    record_gpu_test.write_rows(rows, "abc1234", "2026-11-27", table)
    record_gpu_test.write_rows(rows, "def5678", "2026-11-28", table)
    record_gpu_test.write_rows(rows, "abc1234", "2026-11-29", table)
    lines = table.read_text().splitlines()
    assert len(lines) == 1 + 4
    # The latest commit is the one recorded last; its two runs are quoted.
    runs = gpu_test.latest_run(table)
    assert {row["date"] for row in runs.values()} == {"2026-11-29"}


def test_the_verdict_names_what_failed_or_says_nothing_did(tmp_path):
    table = tmp_path / "gpu.csv"
    rows = record_gpu_test.parse(LOG)
    record_gpu_test.write_rows(rows, "abc1234", "2026-11-27", table)
    said = gpu_test.substitutions(table)
    assert said["gpu_verdict"] == (
        "1 unit test failed (named in `book/test_gpu.csv`)"
    )
    assert (said["gpu_notebook_cells"], said["gpu_unit_passed"]) == (
        "647",
        "1,272",
    )
    noted = [{**row, "note": "why" if row["failures"] else ""} for row in rows]
    record_gpu_test.write_rows(noted, "abc1234", "2026-11-27", table)
    assert gpu_test.substitutions(table)["gpu_verdict"].endswith("csv`): why")
    passing = [{**row, "failed": "0", "failures": ""} for row in rows]
    record_gpu_test.write_rows(passing, "abc1234", "2026-11-27", table)
    assert gpu_test.substitutions(table)["gpu_verdict"] == "every check passed"


def test_a_table_missing_a_run_is_refused(tmp_path):
    table = tmp_path / "gpu.csv"
    record_gpu_test.write_rows(
        record_gpu_test.parse(LOG)[:1], "abc", "2026-11-27", table
    )
    with pytest.raises(ValueError, match="lacks a run"):
        gpu_test.latest_run(table)


def test_the_performance_page_quotes_the_recorded_run_and_types_none_of_it():
    page = (ROOT / "book" / "performance.md").read_text()
    used = set(re.findall(r"\{\{ (gpu_\w+) \}\}", page))
    assert used == set(gpu_test.substitutions()), (
        "quote every figure of the run"
    )
    runs = gpu_test.latest_run()
    for row in runs.values():
        assert f"{float(row['seconds']):.0f} s" not in page, "typed, not quoted"
    assert runs["unit"]["commit"] not in page
