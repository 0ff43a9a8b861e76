"""Tests of scripts/margins.py: one command line for every chapter's margins over seeds."""

from __future__ import annotations

import inspect
import shlex

import pandas as pd
import pytest
import torch
from conftest import load_script, run_script

import helpers.tasks.digits
import helpers.tasks.retrieval
import helpers.tasks.reverse
import helpers.tasks.shakespeare
import helpers.tasks.shapes
import helpers.tasks.sorting
import helpers.tasks.warmup

margins = load_script("margins.py")
CHAPTERS = {
    "encoder": 6,
    "reverse": 7,
    "shapes": 8,
    "encoder-decoder": 9,
    "lm": 10,
    "long": 13,
    "shakespeare": 12,
    "digits": 14,
}


def test_the_parser_knows_every_chapter_by_name_and_number():
    parser = margins.build_parser()
    assert {
        name: number for name, (number, _, _) in margins.CHAPTERS.items()
    } == CHAPTERS
    for name, number in CHAPTERS.items():
        by_name, by_number = (
            parser.parse_args([name]),
            parser.parse_args([str(number)]),
        )
        assert by_name.chapter == by_number.chapter == name
        assert by_name.part == next(iter(margins.CHAPTERS[name][2]))
        assert by_name.out is None  # print only, unless asked
    args = parser.parse_args(
        ["8", "--part", "overfit", "--seeds", "3", "--lstm-seeds", "2"]
    )
    assert (args.chapter, args.part, args.seeds, args.lstm_seeds) == (
        "shapes",
        "overfit",
        3,
        2,
    )
    assert parser.parse_args(["long", "--runs", "alibi/-", "rope/-"]).runs == [
        "alibi/-",
        "rope/-",
    ]
    assert (
        parser.parse_args(["reverse"]).seeds is None
    )  # main takes the chapter's number
    assert [seeds for _, seeds, _ in margins.CHAPTERS.values()] == [
        5,
        5,
        5,
        5,
        3,
        3,
        3,
        10,
    ]
    # a part's own default number of seeds, where it has one (the others take the chapter's)
    own = {
        (name, part): spec[2]
        for name, (_, _, parts) in margins.CHAPTERS.items()
        for part, spec in parts.items()
        if len(spec) > 2
    }
    assert own == {("shapes", "full"): 3}
    assert parser.parse_args(["12", "--steps", "30"]).steps == 30
    assert parser.parse_args(["6"]).lr == 0.005


def test_the_parts_reproduce_every_measurement_of_the_old_scripts():
    parts = {
        name: list(chapter[2]) for name, chapter in margins.CHAPTERS.items()
    }
    assert parts == {
        "encoder": ["warmup"],
        "reverse": ["chapter", "schedules", "ablations"],
        "shapes": ["seeds", "overfit", "full"],
        "encoder-decoder": ["seeds"],
        "lm": ["all", "quick"],
        "long": ["cost", "shapes", "retrieval"],
        "shakespeare": ["recipe"],
        "digits": ["seeds", "attention"],
    }
    # the parts that train on --device, and the epochs each shapes part chooses
    assert set(margins.USE_DEVICE) == {
        ("shapes", "full"),
        ("digits", "seeds"),
        ("digits", "attention"),
    }
    parser = margins.build_parser()
    assert parser.parse_args(["shapes"]).epochs is None
    assert (margins.SEEDS_EPOCHS, margins.FULL_EPOCHS) == (3, 50)
    digits = parser.parse_args(["14", "--seeds", "2", "--first-seed", "3"])
    assert (digits.chapter, digits.part, digits.sizes, digits.device) == (
        "digits",
        "seeds",
        [50, 100, 300],
        "cpu",
    )
    jobs = margins.digits_jobs(range(3, 5), [50])
    assert {job["seed"] for job in jobs} == {3, 4}
    assert jobs[0]["experiment"] == "patch"  # the slowest first


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["chapter13"], ["reverse", "encoder-decoder", "13"]),
        (["shapes", "--part", "ablations"], ["seeds", "overfit"]),
        (["lm", "--quick"], ["unrecognized arguments: --quick"]),
    ],
)
def test_a_bad_chapter_or_part_is_refused_with_the_choices(args, names):
    result = run_script("margins.py", *args, timeout=60)
    assert result.returncode == 2
    for name in names:
        assert name in result.stderr


def test_the_label_names_the_numerics_the_machine_and_the_command(
    monkeypatch, tmp_path
):
    table = pd.DataFrame({"seed": [0, 1], "loss": [0.5, 0.25]})
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    labelled = margins.labelled(table, ["lm", "--seeds", "2"], workers=2)
    path = tmp_path / "table.csv"
    labelled.to_csv(path, index=False)
    written = pd.read_csv(path)
    assert list(written) == ["seed", "loss", "numerics", "machine", "command"]
    assert (written["numerics"] == "scalar").all()
    assert (
        written["command"] == "python scripts/margins.py lm --seeds 2"
    ).all()
    assert written["machine"].str.endswith(f"torch {torch.__version__}").all()
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    assert margins.numerics_label() == "machine default"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert margins.numerics_label() == "avx2"


def test_the_label_names_the_device_a_part_trains_on(monkeypatch):
    monkeypatch.setattr(
        margins, "machine_label", lambda device, workers: f"{device} x{workers}"
    )
    table = pd.DataFrame({"seed": [0]})
    argv = ["digits", "--device", "cuda", "--workers", "1"]
    assert margins.labelled(table, argv, 1, "cuda")["machine"][0] == "cuda x1"
    assert margins.labelled(table, ["lm"], 2)["machine"][0] == "cpu x2"
    # rows a part labelled itself (runs kept from an earlier sitting) keep their labels
    kept = table.assign(machine="there", command="python scripts/margins.py x")
    kept = margins.labelled(kept, argv, 1, "cuda")
    assert (kept["machine"][0], kept["command"][0]) == (
        "there",
        "python scripts/margins.py x",
    )
    assert list(kept) == ["seed", "machine", "command", "numerics"]


def test_the_command_leaves_out_the_options_that_pick_among_the_same_runs():
    argv = ["shapes", "--part", "full", "--models", "CNN", "CNN + attention"]
    argv += ["--collect", "--out", "x.csv", "--epochs", "2"]
    assert (
        margins.command_line(argv)
        == "python scripts/margins.py shapes --part full --out x.csv --epochs 2"
    )
    resumed = margins.command_line(["digits", "--resume", "--out", "d.csv"])
    assert resumed == "python scripts/margins.py digits --out d.csv"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["shapes", "--device", "cuda"], "trains on the CPU only"),
        (["shapes", "--part", "full"], "--part full needs --out"),
        (["digits", "--resume"], "--resume needs --out"),
    ],
)
def test_an_option_a_part_cannot_honour_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as refused:
        margins.main(argv)
    assert refused.value.code == 2 and message in capsys.readouterr().err


def shipped_commands(monkeypatch) -> list[str]:
    """Every ``how_to_make`` command of the shipped results' readers in helpers.tasks."""
    commands = []
    for module in (
        helpers.tasks.reverse,
        helpers.tasks.shapes,
        helpers.tasks.sorting,
        helpers.tasks.retrieval,
        helpers.tasks.warmup,
        helpers.tasks.shakespeare,
        helpers.tasks.digits,
    ):
        monkeypatch.setattr(
            module, "shipped_table", lambda _, command: commands.append(command)
        )
        for _, reader in inspect.getmembers(module, inspect.isfunction):
            if (
                reader.__module__ == module.__name__
                and "shipped_table(" in inspect.getsource(reader)
            ):
                reader()
    return commands


def test_every_shipped_files_command_parses(monkeypatch):
    commands = [
        c for c in shipped_commands(monkeypatch) if "scripts/margins" in c
    ]
    # encoder 1, reverse 2, shapes 3, encoder-decoder 1, shakespeare 1, long 1, digits 2
    assert len(commands) == 11
    parser = margins.build_parser()
    for command in commands:
        python, script, *argv = shlex.split(command)
        assert (python, script) == ("python", "scripts/margins.py"), command
        args = parser.parse_args(argv)
        assert args.out.startswith("helpers/tasks/"), command


def test_the_shapes_sets_are_standardized_by_the_training_set():
    train, val, test, raw_test, oracle, copy = margins.shapes_data(
        num_train=200
    )
    values = torch.cat(train.tensors)
    assert values.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert values.std().item() == pytest.approx(1.0, abs=1e-5)
    assert len(val) == len(test) == len(raw_test) == 1000
    assert 0 < oracle < copy  # the local oracle beats copying the input


def test_a_run_writes_its_table_with_the_labels(tmp_path):
    """End to end, chapter 13's cost part (about 25 s): the ratios the chapter asserts."""
    out = tmp_path / "cost.csv"
    result = run_script(
        "margins.py", "13", "--part", "cost", "--out", str(out), timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "median" in result.stdout
    table = pd.read_csv(out)
    measured = ["tiled/naive memory", "naive/fused time", "cache speed-up"]
    assert list(table) == [
        "repeat",
        *measured,
        "numerics",
        "machine",
        "command",
    ]
    assert list(table["repeat"]) == [0, 1, 2]
    assert (
        table["command"]
        == f"python scripts/margins.py 13 --part cost --out {out}"
    ).all()
    # the chapter's claims: tiling keeps a small fraction of the naive peak; a cache is faster
    assert table["tiled/naive memory"].between(0, 0.1).all()
    assert (table["cache speed-up"] > 1).all()
