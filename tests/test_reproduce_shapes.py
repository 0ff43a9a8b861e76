"""scripts/margins.py shapes --part full, chapter 8's full-scale reproduction outside CI, and the
results file it wrote, which the package ships and the chapter draws (helpers.tasks.shapes.
full_scale_results): a tiny run writes one row per model, seed and epoch, saves each run as it
goes, and --collect rebuilds the file from those; the shipped file is the whole protocol (written
by the script the part replaced, with the same options)."""

from __future__ import annotations

import fnmatch
import re

import pandas as pd
import pytest
import tomllib
import torch
from conftest import ROOT, load_script
from conftest import run_script as run_script_named

from helpers.tasks.shapes import (
    FULL_SCALE_FILE,
    SHAPES_MODELS,
    full_scale_results,
    make_shapes_dataset,
    overfit_curve,
    overfit_results,
    seed_results,
    source_split,
)

PROTOCOL = "--protocol source --epochs 50 --seeds 3 --num-train 25000 --batch-size 128 --lr 0.001"
SHIPPED_COLUMNS = [
    "model",
    "seed",
    "epoch",
    "valid_mse",
    "test_mse",
    "seconds",
    "machine",
    "command",
]  # the shipped file's, written before the part labelled its numerics
COLUMNS = [*SHIPPED_COLUMNS[:-2], "numerics", "machine", "command"]
MODELS = ["CNN", "CNN + attention", "bidirectional LSTM"]


def run_script(*args):
    return run_script_named("margins.py", "shapes", "--part", "full", *args)


def tiny_run(epochs: int, num_train: int) -> list[str]:
    """The arguments of a run of one seed, on one worker, small enough for a unit test."""
    return [
        "--epochs",
        str(epochs),
        "--seeds",
        "1",
        "--num-train",
        str(num_train),
        "--workers",
        "1",
    ]


def test_a_tiny_run_writes_every_epoch_and_collect_rebuilds_it(tmp_path):
    out = tmp_path / "tiny.csv"
    tiny = tiny_run(epochs=2, num_train=64)
    models = ["--models", "CNN", "CNN + attention"]
    done = run_script(*tiny, *models, "--protocol", "book", "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out)
    assert list(table.columns) == COLUMNS
    assert (
        table["valid_mse"].isna().all()
    )  # the book's protocol has no validation split
    assert sorted(set(zip(table["model"], table["epoch"], strict=True))) == [
        ("CNN", 1), ("CNN", 2), ("CNN + attention", 1), ("CNN + attention", 2)
    ]  # fmt: skip
    assert (table["test_mse"] > 0).all() and table["command"].str.contains(
        "--epochs 2"
    ).all()
    assert (table.groupby("model")["seconds"].diff().dropna() > 0).all()
    # every run was saved on its own as it went, and --collect merges those files again
    assert len(list((tmp_path / "tiny.partial").glob("*.csv"))) == 2
    out.unlink()
    collected = run_script(
        *tiny, *models, "--protocol", "book", "--out", str(out), "--collect"
    )
    assert collected.returncode == 0, collected.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out), table)


def test_the_source_protocol_validates_on_a_fifth_and_runs_the_batch_axis_lstm(
    tmp_path,
):
    out = tmp_path / "source.csv"
    tiny = tiny_run(epochs=1, num_train=300)
    done = run_script(
        *tiny, "--models", "batch-axis LSTM", "CNN", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out)
    assert list(table.columns) == COLUMNS and set(table["model"]) == {
        "CNN",
        "batch-axis LSTM",
    }
    assert (
        table["valid_mse"].between(0, 10).all()
        and table["test_mse"].between(0, 10).all()
    )
    # the command names margins.py's default protocol by leaving it out: the source's
    _, _, *argv = table["command"].iloc[0].split()
    parsed = load_script("margins.py").build_parser().parse_args(argv)
    assert parsed.protocol == "source"


def test_the_source_protocol_is_fastais_defaults():
    """AdamW with fastai's betas, eps and decoupled weight decay; a seeded 80/20 split."""
    script = load_script("margins.py")
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = script.make_optimizer("source", [parameter], 1e-3)
    assert isinstance(optimizer, torch.optim.AdamW)
    group = optimizer.param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"]) == (
        (0.9, 0.99),
        1e-5,
        0.01,
    )
    assert (
        type(script.make_optimizer("book", [parameter], 1e-3))
        is torch.optim.Adam
    )
    train, valid = source_split(25_000)
    assert (len(train), len(valid)) == (20_000, 5_000)
    assert sorted(torch.cat([train, valid]).tolist()) == list(range(25_000))
    assert torch.equal(valid, source_split(25_000, 0.2, seed=0)[1])
    assert not torch.equal(valid, source_split(25_000, 0.2, seed=1)[1])
    with pytest.raises(ValueError, match="valid_pct"):
        source_split(100, valid_pct=20)


def test_an_unknown_model_is_refused_by_name(tmp_path):
    done = run_script(
        "--models", "Transformer", "--out", str(tmp_path / "x.csv")
    )
    assert (
        done.returncode != 0 and "unknown models ['Transformer']" in done.stderr
    )


def test_the_part_refuses_to_run_without_out():
    """Its runs are saved beside --out as they go: a clear parser error without one."""
    done = run_script("--models", "CNN")
    assert done.returncode == 2 and "--part full needs --out CSV" in done.stderr


def test_the_parts_defaults_are_the_blog_posts_and_the_seeds_part_keeps_its_own():
    """50 epochs and 3 seeds for --part full; --part seeds keeps the chapter's 3 epochs."""
    margins = load_script("margins.py")
    args = margins.build_parser().parse_args(["shapes", "--part", "full"])
    assert (args.epochs, args.protocol, args.num_train) == (
        None,
        "source",
        25_000,
    )
    assert (args.batch_size, args.lr, args.device) == (128, 1e-3, "cpu")
    assert margins.FULL_EPOCHS == 50 and margins.SEEDS_EPOCHS == 3
    assert margins.CHAPTERS["shapes"][2]["full"][2] == 3


def test_collect_without_a_run_says_what_to_do(tmp_path):
    done = run_script("--out", str(tmp_path / "none.csv"), "--collect")
    assert done.returncode != 0
    assert "run without --collect first" in done.stderr


def test_the_package_ships_the_results_file():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["helpers.tasks"]
    assert any(
        fnmatch.fnmatch(FULL_SCALE_FILE, pattern) for pattern in patterns
    )
    assert (ROOT / "helpers" / "tasks" / FULL_SCALE_FILE).is_file()


@pytest.fixture(scope="module")
def results():
    return full_scale_results()


def test_the_shipped_results_are_one_whole_run_at_the_blog_posts_scale(results):
    """The source's protocol: all four models (the post's batch-axis LSTM too), three seeds
    each, 50 epochs each, validated on the post's split, from one command and one machine."""
    assert (
        results["command"].nunique() == 1 and results["machine"].nunique() == 1
    )
    assert PROTOCOL in results["command"].iloc[0]
    assert list(results.columns) == SHIPPED_COLUMNS
    runs = results.groupby(["model", "seed"])["epoch"].apply(list)
    assert sorted(runs.index) == sorted(
        (m, s) for m in SHAPES_MODELS for s in range(3)
    )
    assert all(epochs == list(range(1, 51)) for epochs in runs)
    assert (
        results["test_mse"].between(0, 2).all()
        and results["valid_mse"].between(0, 2).all()
    )
    assert (
        results.groupby(["model", "seed"])["seconds"].diff().dropna() > 0
    ).all()


def test_a_missing_results_file_says_how_to_make_it(monkeypatch):
    import helpers.tasks.shapes as shapes

    monkeypatch.setattr(shapes, "FULL_SCALE_FILE", "no_such_file.csv")
    with pytest.raises(
        FileNotFoundError, match="scripts/margins.py shapes --part full"
    ):
        shapes.full_scale_results()


def test_the_shipped_seed_results_cover_every_model_on_five_seeds():
    """The file of scripts/margins.py shapes, which chapter 8 states its spread from: every model on
    the same five seeds at the chapter's budget, from one command and one machine."""
    table = seed_results()
    assert list(table["seed"]) == list(range(5))
    assert table["command"].nunique() == 1 and table["machine"].nunique() == 1
    assert "--epochs 3" in table["command"].iloc[0]
    for name in (
        "CNN",
        "CNN + attention",
        "bidirectional LSTM",
        "batch-axis LSTM",
    ):
        assert table[f"mse {name}"].between(0, 2).all(), name
    ratio = table["mse CNN"] / table["mse CNN + attention"]
    assert (
        ratio.round(6).tolist()
        == table["ratio CNN / attention"].round(6).tolist()
    )


def test_the_overfit_check_logs_the_sources_steps_and_the_loss_falls():
    """--part overfit: the loss before each logged step, as source 004's loop prints it
    (``for epoch in range(5001)``), with the chapter's own function."""
    margins = load_script("margins.py")
    assert margins.SOURCE_OVERFIT == {
        "steps": 5001,
        "lr": 1e-3,
        "log_every": 1000,
    }
    # one home: helpers.tasks.shapes
    assert margins.overfit_curve is overfit_curve
    train = make_shapes_dataset(20, seed=1)
    data = torch.utils.data.TensorDataset(train.inputs, train.targets)
    curve = overfit_curve("CNN", 0, data, steps=61, lr=3e-3, log_every=20)
    assert list(curve) == [0, 20, 40, 60]
    assert curve[60] < curve[0] / 2
    every = overfit_curve("CNN", 0, data, steps=61)
    assert margins.overfit_ratio("CNN", 0, data, steps=61) == pytest.approx(
        every[60] / every[0]
    )


def test_the_shipped_overfit_results_are_the_sources_check_on_three_seeds():
    table = overfit_results()
    assert (
        table["command"].nunique() == 1
        and "--part overfit" in table["command"].iloc[0]
    )
    runs = table.groupby(["model", "seed"])["step"].apply(list)
    assert sorted(runs.index) == [
        (model, seed) for model in MODELS for seed in range(3)
    ]
    assert all(steps == list(range(0, 5001, 1000)) for steps in runs)
    assert (table["loss"] > 0).all()


def test_the_same_command_again_skips_the_runs_it_finished(tmp_path):
    """The CPU protocol runs in parts: finished runs are kept, not trained again."""
    out = tmp_path / "parts.csv"
    tiny = tiny_run(epochs=1, num_train=64)
    first = run_script(
        *tiny, "--models", "CNN", "--protocol", "book", "--out", str(out)
    )
    assert first.returncode == 0, first.stderr
    saved = (tmp_path / "parts.partial" / "CNN-seed0.csv").read_text()
    again = run_script(*tiny, "--models", "CNN", "CNN + attention", "--protocol", "book",
                       "--out", str(out))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "CNN seed 0: complete" in again.stdout
    assert re.search(r"CNN \+ attention +seed 0 epoch +1", again.stdout)
    assert (tmp_path / "parts.partial" / "CNN-seed0.csv").read_text() == saved
    merged = pd.read_csv(out)
    assert set(merged["model"]) == {"CNN", "CNN + attention"}
    # one command for both sittings: the one margins.py records, less --models
    assert merged["command"].nunique() == 1
    assert (
        merged["command"]
        .iloc[0]
        .startswith("python scripts/margins.py shapes --part full --epochs 1")
    )
    assert "--models" not in merged["command"].iloc[0]
    # another command (here, more epochs) trains the run again rather than mixing files
    longer = run_script(*tiny_run(epochs=2, num_train=64), "--models", "CNN",
                        "--protocol", "book", "--out", str(out))  # fmt: skip
    assert (
        "complete" not in longer.stdout
        and "CNN                  seed 0 epoch   2" in longer.stdout
    )
