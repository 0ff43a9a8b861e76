"""The last ``make test-gpu`` run, read from ``book/test_gpu.csv`` at build time.

``scripts/record_gpu_test.py`` writes that file from the log of ``make test-gpu`` (one row per
pytest run: the notebooks, then the unit tests). This extension turns the rows of its latest
commit into MyST substitutions, so that the Performance page quotes the run rather than typing
it: ``{{ gpu_machine }}``, ``{{ gpu_torch }}``, ``{{ gpu_python }}``, ``{{ gpu_date }}``,
``{{ gpu_commit }}``, ``{{ gpu_jobs }}``, ``{{ gpu_notebook_cells }}`` (cells that passed),
``{{ gpu_notebook_seconds }}``, ``{{ gpu_unit_passed }}``, ``{{ gpu_unit_seconds }}`` and
``{{ gpu_notebook_verdict }}`` (whether every chapter ran to its end), ``{{ gpu_verdict }}``
(how many checks failed, with the recorded note on why, or that nothing did). Like
``book_time``, it imports nothing from Sphinx, so the unit tests read the same figures.
"""

import csv
import pathlib

TABLE = pathlib.Path(__file__).resolve().parents[1] / "test_gpu.csv"


def latest_run(path: pathlib.Path = TABLE) -> dict[str, dict[str, str]]:
    """The last commit's rows of ``path``, by run (``notebooks`` and ``unit``)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: run `make test-gpu` on a GPU and record its log "
            "with scripts/record_gpu_test.py"
        )
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise ValueError(
            f"{path} has no rows: record a `make test-gpu` log into it"
        )
    commit = rows[-1]["commit"]
    runs = {row["run"]: row for row in rows if row["commit"] == commit}
    if set(runs) != {"notebooks", "unit"}:
        raise ValueError(
            f"{path}: commit {commit} lacks a run ({sorted(runs)}); record both"
        )
    return runs


def verdict(runs: dict[str, dict[str, str]]) -> str:
    """'every check passed', or how many checks of which run failed, with the recorded
    note on why (the names stay in the table: they are too long for a sentence)."""
    failed = []
    for run, what in (("notebooks", "notebook cell"), ("unit", "unit test")):
        count = len(runs[run]["failures"].split()) + int(runs[run]["errors"])
        if count:
            failed.append(f"{count} {what}{'s' if count > 1 else ''}")
    if not failed:
        return "every check passed"
    notes = sorted({runs[run].get("note", "") for run in runs} - {""})
    said = " and ".join(failed) + " failed (named in `book/test_gpu.csv`)"
    return said + "".join(f": {note}" for note in notes)


def substitutions(path: pathlib.Path = TABLE) -> dict[str, str]:
    runs = latest_run(path)
    notebooks, unit = runs["notebooks"], runs["unit"]
    return {
        "gpu_machine": unit["machine"],
        "gpu_torch": unit["torch"],
        "gpu_python": unit["python"],
        "gpu_date": unit["date"],
        "gpu_commit": unit["commit"],
        "gpu_jobs": notebooks["jobs"],
        "gpu_notebook_cells": f"{int(notebooks['passed']):,}",
        "gpu_notebook_seconds": f"{float(notebooks['seconds']):.0f}",
        "gpu_unit_passed": f"{int(unit['passed']):,}",
        "gpu_unit_seconds": f"{float(unit['seconds']):.0f}",
        "gpu_verdict": verdict(runs),
        "gpu_notebook_verdict": (
            "every chapter ran to its end with its checks"
            if not notebooks["failures"].split() and not int(notebooks["errors"])
            else "some chapters failed (see below)"
        ),
    }


def add_substitutions(app, config) -> None:
    config.myst_substitutions = {
        **(config.myst_substitutions or {}),
        **substitutions(),
    }


def setup(app):
    app.connect("config-inited", add_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
