"""Turn the log of ``make test-gpu`` into rows of ``book/test_gpu.csv``.

    make test-gpu GPU_PYTHON=python3 2>&1 | tee test_gpu.log
    python scripts/record_gpu_test.py test_gpu.log --commit "$(git rev-parse --short HEAD)"

The log's first line names the GPU, torch and Python (the Makefile prints it); each of its two
pytest runs (the notebooks, then the unit tests) ends with a summary line such as
``647 passed in 132.49s``. One row per run; a row of the same commit and run is replaced. The
website quotes the latest commit's rows (``book/_ext/gpu_test.py``), so the Performance page
never types a GPU figure.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import pathlib
import re

TABLE = pathlib.Path(__file__).resolve().parent.parent / "book" / "test_gpu.csv"
COLUMNS = [
    "date", "commit", "machine", "torch", "python", "run", "passed", "failed",
    "skipped", "errors", "seconds", "jobs", "failures", "command", "note",
]  # fmt: skip
HEADER = re.compile(
    r"^GPU: (?P<machine>.+?) \| torch (?P<torch>\S+)(?: \| Python (?P<python>\S+))?$"
)
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?)\b")
SUMMARY = re.compile(
    r"^=*\s*(?P<counts>(?:\d+ \w+,? ?)+) in (?P<seconds>[\d.]+)s\b"
)


def parse(log: str) -> list[dict[str, str]]:
    """One dict per pytest run found in a ``make test-gpu`` log, in the log's order."""
    header = next(
        (HEADER.match(line) for line in log.splitlines() if HEADER.match(line)),
        None,
    )
    if header is None:
        raise ValueError(
            "no 'GPU: <name> | torch <version>' line: is this the log of `make test-gpu`?"
        )
    # make echoes a command over several lines, each but the last ending in a backslash.
    lines = re.sub(r"\\\n\s*", " ", log).splitlines()
    rows, command, failures = [], None, []
    for line in lines:
        if "-m pytest" in line:
            command, failures = line.strip(), []
        elif command and line.startswith(("FAILED ", "ERROR ")):
            failures.append(line.split()[1])
        elif command and (summary := SUMMARY.match(line)):
            counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                      for n, kind in COUNT.findall(summary["counts"])}  # fmt: skip
            jobs = re.search(r" -n (\d+)", command)
            rows.append({
                "machine": header["machine"], "torch": header["torch"],
                "python": header["python"] or "",
                "run": "notebooks" if "notebooks/" in command else "unit",
                "passed": str(counts.get("passed", 0)),
                "failed": str(counts.get("failed", 0)),
                "skipped": str(counts.get("skipped", 0)),
                "errors": str(counts.get("error", 0)),
                "seconds": f"{float(summary['seconds']):.1f}",
                "jobs": jobs[1] if jobs else "1",
                "failures": " ".join(failures), "command": "make test-gpu",
            })  # fmt: skip
            command = None
    if not rows:
        raise ValueError(
            "no pytest summary line ('N passed in Xs') in the log: did it finish?"
        )
    return rows


def write_rows(
    rows, commit: str, date: str, table: pathlib.Path = TABLE
) -> None:
    """Write ``rows`` for ``commit`` into ``table``, replacing that commit's runs."""
    kept = []
    if table.is_file():
        with table.open(newline="") as handle:
            kept = list(csv.DictReader(handle))
    runs = {row["run"] for row in rows}
    kept = [
        old
        for old in kept
        if not (old["commit"] == commit and old["run"] in runs)
    ]
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(
            kept + [{**row, "commit": commit, "date": date} for row in rows]
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "log", type=pathlib.Path, help="the output of `make test-gpu`"
    )
    parser.add_argument(
        "--commit", required=True, help="the commit that was tested"
    )
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--out", type=pathlib.Path, default=TABLE)
    parser.add_argument(
        "--python", help="Python's version, where the log does not name it"
    )
    parser.add_argument(
        "--command", default="make test-gpu", help="the command as run"
    )
    parser.add_argument(
        "--note",
        default="",
        help="why a check failed, as the Performance page should say it",
    )
    args = parser.parse_args()
    rows = parse(args.log.read_text())
    for row in rows:
        row["python"] = row["python"] or args.python or ""
        row["command"] = args.command
        row["note"] = args.note if row["failures"] else ""
    write_rows(rows, args.commit, args.date, args.out)
    for row in rows:
        print(f"{row['run']}: {row['passed']} passed, {row['failed']} failed "
              f"in {row['seconds']} s on {row['machine']}")  # fmt: skip


if __name__ == "__main__":
    main()
