"""The small scripts in scripts/ that have no test file of their own: the lowest-versions
constraints (``make test-oldest``), the count of compared and ignored notebook cells, and the
reversal benchmark (``make bench WHAT=reverse``), run on the book's recipe until it reaches its
threshold."""

from __future__ import annotations

import os
import re

import nbformat
import pytest
import tomllib
import torch
from conftest import ROOT, load_script, run_script, script_environment
from torch.utils.data import DataLoader, TensorDataset

from helpers.tasks.reverse import BOOK_CONFIG, make_reverse_dataset

oldest = load_script("oldest_constraints.py")
nbval_cells = load_script("nbval_cells.py")
bench_reverse = load_script("bench_reverse.py")


def test_oldest_constraints_pin_every_dependency_at_its_floor():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"
    ]["dependencies"]
    printed = run_script("oldest_constraints.py")
    assert printed.returncode == 0, printed.stderr
    pins = dict(line.split("==") for line in printed.stdout.splitlines())
    assert len(pins) == len(dependencies)
    for requirement in dependencies:
        name, floor = re.match(
            r"([\w.-]+)\s*>=\s*([\w.]+)", requirement
        ).groups()
        assert pins[name] == floor, requirement
    assert tuple(map(int, pins["torch"].split(".")[:2])) >= (
        2,
        5,
    )  # enable_gqa (chapter 13)


def test_a_dependency_without_a_floor_is_refused(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["torch>=2.5", "pandas"]\n')
    with pytest.raises(
        SystemExit, match="'pandas' in pyproject.toml has no lower bound"
    ):
        oldest.lower_bounds(pyproject)


def test_nbval_cells_counts_compared_and_ignored_cells(tmp_path):
    notebook = nbformat.v4.new_notebook()
    output = nbformat.v4.new_output("stream", text="1\n")
    compared = nbformat.v4.new_code_cell("print(1)", outputs=[output])
    ignored = nbformat.v4.new_code_cell("print(1)", outputs=[output])
    ignored.metadata["tags"] = ["nbval-ignore-output"]
    silent = nbformat.v4.new_code_cell("x = 1")
    notebook.cells = [
        compared,
        ignored,
        silent,
        nbformat.v4.new_markdown_cell("text"),
    ]
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook, path)
    assert nbval_cells.counts(path) == (1, 1)


def test_a_script_keeps_the_pythonpath_it_was_given(monkeypatch):
    # make test-gpu carries its packages on PYTHONPATH; a script that dropped it
    # could not import them (scripts/nbval_cells.py failed so on an H100).
    monkeypatch.setenv("PYTHONPATH", "/carried/site")
    path = script_environment()["PYTHONPATH"].split(os.pathsep)
    assert path == [str(ROOT), "/carried/site"]
    monkeypatch.delenv("PYTHONPATH")
    assert script_environment()["PYTHONPATH"] == str(ROOT)


def test_nbval_cells_totals_the_books_notebooks():
    printed = run_script("nbval_cells.py")
    assert printed.returncode == 0, printed.stderr
    rows = [line.split() for line in printed.stdout.splitlines()[1:]]
    *chapters, total = rows
    assert len(chapters) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    assert total[0] == "total"
    assert [int(total[1]), int(total[2])] == [
        sum(int(row[1]) for row in chapters),
        sum(int(row[2]) for row in chapters),
    ]


def test_chunks_continue_the_same_stream_across_epochs():
    loader = DataLoader(
        TensorDataset(torch.arange(5)), batch_size=2
    )  # 3 batches per epoch
    chunks = bench_reverse.Chunks(loader)
    taken = [batch[0].tolist() for batch in chunks.take(4) + chunks.take(3)]
    assert taken == [[0, 1], [2, 3], [4]] * 2 + [[0, 1]]


def test_the_books_recipe_reaches_the_threshold_and_stops_there():
    """The benchmark's measurement on the book's configuration, stopped at 99.9%."""
    torch.set_num_threads(1)
    config = BOOK_CONFIG
    train = make_reverse_dataset(
        config.num_train, 16, 10, torch.Generator().manual_seed(0)
    )
    test = make_reverse_dataset(2000, 16, 10, torch.Generator().manual_seed(2))
    result = bench_reverse.time_to_threshold(
        "book",
        config,
        train,
        DataLoader(test, batch_size=2000),
        10,
        stop_at_threshold=True,
    )
    assert result["steps_to_threshold"] > 0, (
        "the book's recipe never reached 99.9%"
    )
    assert (
        result["steps"] == result["steps_to_threshold"] < config.total_steps()
    )
    assert (
        result["steps_to_threshold"] % 10 == 0
    )  # measured every eval_every steps
    assert result["final_accuracy"] >= bench_reverse.THRESHOLD
    assert 0 < result["time_to_threshold_s"] == result["train_s"]


def test_digits_attention_rows_read_each_vit_and_its_untrained_start(
    monkeypatch,
):
    """scripts/margins.py digits --part attention on a three-step recipe: one row per ViT, the
    untrained one only beside a training on the true labels, the machine on every row."""
    import functools

    from helpers.tasks.digits import DigitsTrainConfig, train_digits

    script = load_script("margins.py")
    tiny = DigitsTrainConfig(steps=3, batch_size=16)
    monkeypatch.setattr(
        script, "train_digits", functools.partial(train_digits, config=tiny)
    )
    label = dict(machine="here", command="python scripts/...")
    rows = script.digits_attention_seed(
        seed=0, shuffled=False, device="cpu", label=label
    )
    assert [row["kind"] for row in rows] == ["trained", "untrained"]
    (control,) = script.digits_attention_seed(
        seed=0, shuffled=True, device="cpu", label=label
    )
    assert control["kind"] == "shuffled labels"
    for row in [*rows, control]:
        assert row["machine"] == "here" and 0 <= row["test accuracy"] <= 1
        assert set(row) >= {"head focus", "stroke agreement", "ink correlation"}
