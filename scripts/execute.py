"""Execute notebooks in place and refresh their py:percent twins.

    python scripts/execute.py notebooks/01_kernel_regression.ipynb [...]
    python scripts/execute.py --all

For each notebook: the twin that was edited last (.py or .ipynb) is taken as the source, the
notebook is executed top to bottom in a fresh kernel from a temporary working directory (a
notebook must not rely on the repository's relative paths), then both files are written back.
Prints the wall time of each notebook, so this doubles as the benchmark command (`make bench`).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def source_notebook(ipynb: pathlib.Path) -> nbformat.NotebookNode:
    """Read the notebook, taking cell sources from the .py twin when that was edited last."""
    twin = ipynb.with_suffix(".py")
    if not ipynb.exists():
        return jupytext.read(twin)
    notebook = jupytext.read(ipynb)
    if twin.exists() and twin.stat().st_mtime > ipynb.stat().st_mtime:
        edited = jupytext.read(twin)
        notebook = jupytext.combine.combine_inputs_with_outputs(
            edited, notebook
        )
    return notebook


def execute(ipynb: pathlib.Path, timeout: int) -> float:
    notebook = source_notebook(ipynb)
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    notebook.metadata.setdefault("jupytext", {})["formats"] = "ipynb,py:percent"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": workdir}},
        )
        client.execute()
    elapsed = time.perf_counter() - start
    jupytext.write(notebook, ipynb, fmt="ipynb")
    # The twin goes through the CLI so that jupytext.toml's metadata filters apply (the drift
    # check of tests/test_notebooks.py applies the same configuration in-process).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupytext",
            "--quiet",
            "--to",
            "py:percent",
            str(ipynb),
        ],
        check=True,
        cwd=ROOT,
    )
    return elapsed


def machine() -> str:
    """The CPU model, its cores and PyTorch's version, as the benchmark tables name a machine."""
    model = platform.machine()
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import torch

    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__}"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def record_run(path: pathlib.Path, times: dict, started: dict) -> None:
    """One whole run: the notebook times and, in ``<name>_run.csv``, when, where and on what."""
    lines = ["notebook,wall time (s)"] + [
        f"{name},{sec:.1f}" for name, sec in times.items()
    ]
    lines.append(f"total,{sum(times.values()):.1f}")
    path.write_text("\n".join(lines) + "\n")
    run = {**started, "load_after": f"{os.getloadavg()[0]:.2f}"}
    with path.with_name(path.stem + "_run.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(run))
        writer.writeheader()
        writer.writerow(run)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    parser.add_argument(
        "--all", action="store_true", help="every notebook in notebooks/"
    )
    parser.add_argument(
        "--timeout", type=int, default=900, help="seconds per cell"
    )
    parser.add_argument(
        "--record", type=pathlib.Path, help="also write the times to this CSV"
    )
    args = parser.parse_args()
    paths = sorted(NOTEBOOKS.glob("[0-9]*.py")) if args.all else args.notebooks
    if not paths:
        parser.error("name notebooks to execute, or pass --all")
    if args.record and not args.all:
        parser.error(
            "--record writes one whole run of the book: pass --all with it"
        )
    # What the run measures: the commit (and whether code outside notebooks/ differed from it),
    # the machine, and the load it started under (a busy 2-core machine is not a benchmark).
    changed = [
        line[3:]
        for line in git("status", "--porcelain").splitlines()
        if not line[3:].startswith("notebooks/")
    ]
    started = {
        "date": datetime.date.today().isoformat(),
        "commit": git("rev-parse", "--short=7", "HEAD"),
        "uncommitted_changes": len(changed),
        "machine": machine(),
        "load_before": f"{os.getloadavg()[0]:.2f}",
    }
    times = {}
    for path in paths:
        ipynb = path.resolve().with_suffix(".ipynb")
        times[ipynb.stem] = execute(ipynb, args.timeout)
        print(
            f"{ipynb.relative_to(ROOT)}: {times[ipynb.stem]:6.1f} s", flush=True
        )
    total = sum(times.values())
    print(f"total: {total:6.1f} s")
    if args.record:
        record_run(args.record, times, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
