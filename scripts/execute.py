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
import pathlib
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
        lines = ["notebook,wall time (s)"] + [
            f"{name},{sec:.1f}" for name, sec in times.items()
        ]
        lines.append(f"total,{total:.1f}")
        args.record.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
