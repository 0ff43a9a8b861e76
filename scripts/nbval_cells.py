"""Count, per chapter, the code cells with outputs that strict nbval compares and those it ignores.

    python scripts/nbval_cells.py

A cell is ignored when it is tagged `nbval-ignore-output` (its code still runs, so its asserts
still count); every other code cell with stored outputs is compared. Use it to report what a
change did to the suite's strength (CONTRIBUTING.md, "Numerics").
"""

from __future__ import annotations

import pathlib

import nbformat

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"


def counts(path: pathlib.Path) -> tuple[int, int]:
    """(compared, ignored) code cells with outputs in one notebook."""
    compared = ignored = 0
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or not cell.get("outputs"):
            continue
        if "nbval-ignore-output" in cell.metadata.get("tags", []):
            ignored += 1
        else:
            compared += 1
    return compared, ignored


def main() -> None:
    total_compared = total_ignored = 0
    print(f"{'notebook':40} {'compared':>8} {'ignored':>8}")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        compared, ignored = counts(path)
        total_compared += compared
        total_ignored += ignored
        print(f"{path.stem:40} {compared:8} {ignored:8}")
    print(f"{'total':40} {total_compared:8} {total_ignored:8}")


if __name__ == "__main__":
    main()
