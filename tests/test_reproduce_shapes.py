"""scripts/reproduce_shapes.py, chapter 8's full-scale reproduction outside CI, and the results
file it wrote, which the package ships and the chapter draws (helpers.tasks.shapes.
full_scale_results): a tiny run writes one row per model, seed and epoch, saves each run as it
goes, and --collect rebuilds the file from those; the shipped file is the whole protocol."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys

import pandas as pd
import pytest
import tomllib
from conftest import ROOT

from helpers.tasks.shapes import FULL_SCALE_FILE, full_scale_results

SCRIPT = ROOT / "scripts" / "reproduce_shapes.py"
PROTOCOL = "--epochs 50 --seeds 3 --num-train 25000 --batch-size 128 --lr 0.001"
MODELS = ["CNN", "CNN + attention", "bidirectional LSTM"]


def run_script(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


def test_a_tiny_run_writes_every_epoch_and_collect_rebuilds_it(tmp_path):
    out = tmp_path / "tiny.csv"
    tiny = ["--epochs", "2", "--seeds", "1", "--num-train", "64", "--workers", "1"]
    models = ["--models", "CNN", "CNN + attention"]
    done = run_script(*tiny, *models, "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out)
    assert list(table.columns) == [
        "model", "seed", "epoch", "test_mse", "seconds", "machine", "command"
    ]  # fmt: skip
    assert sorted(set(zip(table["model"], table["epoch"], strict=True))) == [
        ("CNN", 1), ("CNN", 2), ("CNN + attention", 1), ("CNN + attention", 2)
    ]  # fmt: skip
    assert (table["test_mse"] > 0).all() and table["command"].str.contains("--epochs 2").all()
    assert (table.groupby("model")["seconds"].diff().dropna() > 0).all()
    # every run was saved on its own as it went, and --collect merges those files again
    assert len(list((tmp_path / "tiny.partial").glob("*.csv"))) == 2
    out.unlink()
    collected = run_script(*tiny, *models, "--out", str(out), "--collect")
    assert collected.returncode == 0, collected.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out), table)


def test_collect_without_a_run_says_what_to_do(tmp_path):
    done = run_script("--out", str(tmp_path / "none.csv"), "--collect")
    assert done.returncode != 0
    assert "run without --collect first" in done.stderr


def test_the_package_ships_the_results_file():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["helpers.tasks"]
    assert any(fnmatch.fnmatch(FULL_SCALE_FILE, pattern) for pattern in patterns)
    assert (ROOT / "helpers" / "tasks" / FULL_SCALE_FILE).is_file()


@pytest.fixture(scope="module")
def results():
    return full_scale_results()


def test_the_shipped_results_are_the_blog_posts_whole_protocol(results):
    """Three models, three seeds each, 50 epochs each, from one command and one machine."""
    assert results["command"].nunique() == 1 and results["machine"].nunique() == 1
    assert PROTOCOL in results["command"].iloc[0]
    runs = results.groupby(["model", "seed"])["epoch"].apply(list)
    assert sorted(runs.index) == [(model, seed) for model in MODELS for seed in range(3)]
    assert all(epochs == list(range(1, 51)) for epochs in runs)
    assert results["test_mse"].between(0, 2).all()
    assert (results.groupby(["model", "seed"])["seconds"].diff().dropna() > 0).all()


def test_a_missing_results_file_says_how_to_make_it(monkeypatch):
    import helpers.tasks.shapes as shapes

    monkeypatch.setattr(shapes, "FULL_SCALE_FILE", "no_such_file.csv")
    with pytest.raises(FileNotFoundError, match="scripts/reproduce_shapes.py --out"):
        shapes.full_scale_results()
