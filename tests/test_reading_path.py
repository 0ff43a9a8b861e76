"""The reading path alone reproduces the page.

A reader of the website sees every cell but those tagged ``remove-cell`` (the asserts and the
glue). Those cells must not change what the visible ones print: a hidden check that draws from
the page's random generator, or builds a module from the global random state, shifts every
number after it, and a reader who copies the visible code gets other numbers than the page
shows. Each test below executes a chapter without its removed cells, under the numerics of
`make notebooks`, and compares every visible cell's text with the stored one (cells tagged
``nbval-ignore-output``, whose numbers come from timing or training, excepted, as in nbval).

`make test` runs chapters 1-6 (about 4 minutes on two cores); the training chapters take
minutes each, so they run on request: ``READING_PATH_ALL=1 .venv/bin/pytest -q
tests/test_reading_path.py``.
"""

from __future__ import annotations

import configparser
import copy
import os
import re

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT

FIRST_SIX = {"01", "02", "03", "04", "05", "06"}
CHAPTERS = [
    path
    for path in NOTEBOOKS
    if os.environ.get("READING_PATH_ALL") == "1" or path.name[:2] in FIRST_SIX
]
NUMERICS = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "JUPYTER_PLATFORM_DIRS": "1",
}


def sanitizers() -> list[tuple[re.Pattern, str]]:
    """The regexes strict nbval applies to outputs (``tests/nbval_sanitize.cfg``)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return [
        (re.compile(config[section]["regex"]), config[section]["replace"])
        for section in config.sections()
    ]


def cell_text(cell, rules) -> str:
    """A code cell's printed text: streams, and the plain text of outputs without an image."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif "data" in output and "image/png" not in output["data"]:
            parts.append(output["data"].get("text/plain", ""))
    text = "".join(parts)
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def differing_cells(stored, executed, rules) -> list[str]:
    """Sources (first line) of the compared cells whose text differs."""
    return [
        f"{old.source.splitlines()[0] if old.source else '<empty>'}: "
        f"stored {cell_text(old, rules)[:200]!r}, alone {cell_text(new, rules)[:200]!r}"
        for old, new in zip(stored, executed, strict=True)
        if old.cell_type == "code"
        and "nbval-ignore-output" not in old.metadata.get("tags", [])
        and cell_text(old, rules) != cell_text(new, rules)
    ]


def without_removed_cells(notebook):
    """The notebook as the website shows it: the removed cells dropped, outputs cleared."""
    kept = copy.deepcopy(notebook)
    kept.cells = [
        cell
        for cell in kept.cells
        if "remove-cell" not in cell.metadata.get("tags", [])
    ]
    stored = copy.deepcopy(kept.cells)
    for cell in kept.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    return kept, stored


@pytest.mark.parametrize("path", CHAPTERS, ids=[path.stem for path in CHAPTERS])
def test_the_reading_path_alone_prints_the_stored_outputs(
    path, monkeypatch, tmp_path
):
    from nbclient import NotebookClient

    for name, value in NUMERICS.items():
        monkeypatch.setenv(name, value)
    notebook, stored = without_removed_cells(nbformat.read(path, as_version=4))
    NotebookClient(
        notebook,
        timeout=1200,  # nbval's cell timeout in `make notebooks`
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},  # files it writes
    ).execute()
    assert not differing_cells(stored, notebook.cells, sanitizers())


def test_the_comparison_sees_a_hidden_cell_that_moves_the_random_state():
    """The check itself: a removed cell that draws from the generator changes what the next
    visible cell prints when it is left out."""
    from nbclient import NotebookClient

    cells = [
        nbformat.v4.new_code_cell("import torch\ntorch.manual_seed(0)"),
        nbformat.v4.new_code_cell(
            "torch.rand(1)", metadata={"tags": ["remove-cell"]}
        ),
        nbformat.v4.new_code_cell("print(round(torch.rand(1).item(), 4))"),
    ]
    full = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(full, timeout=60, kernel_name="python3").execute()
    notebook, stored = without_removed_cells(full)
    NotebookClient(notebook, timeout=60, kernel_name="python3").execute()
    differ = differing_cells(stored, notebook.cells, sanitizers())
    assert len(differ) == 1 and differ[0].startswith("print(")
