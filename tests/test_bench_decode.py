"""scripts/bench_decode.py, the per-step cost of decoding with and without the key/value cache:
a tiny run writes the CSV it promises, and the properties that hold on every machine hold in it
(a cached step dispatches as many operators and writes as many elements at every context, and
reads no value back), whatever its timings."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT
from conftest import run_script as run_script_named

SCRIPT = ROOT / "scripts" / "bench_decode.py"
COLUMNS = [
    "model", "device", "mode", "context", "steps", "seconds_per_step", "ops_per_step",
    "non_view_ops_per_step", "syncs_per_step", "elements_written_per_step", "repeats",
    "load_average", "machine", "command",
]  # fmt: skip


def run_script(*args):
    return run_script_named("bench_decode.py", *args)


def assert_a_cached_step_does_not_grow(cached: pd.DataFrame) -> None:
    """The cached rows of one model: as many operators and elements written at every
    context, and no value read back in the loop."""
    for column in (
        "ops_per_step",
        "non_view_ops_per_step",
        "elements_written_per_step",
    ):
        assert cached[column].nunique() == 1, column
    assert (cached["syncs_per_step"] == 0).all()


def test_a_tiny_run_writes_the_csv_and_the_cached_step_does_not_grow(tmp_path):
    out = tmp_path / "decode.csv"
    tiny = ["--contexts", "8", "40", "120", "--steps", "4", "--repeats", "1"]
    done = run_script(*tiny, "--max-recompute", "40", "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out)
    assert list(table.columns) == COLUMNS
    assert table["command"].str.contains("--contexts 8 40 120").all()
    assert (
        table["machine"].str.contains("torch").all()
        and (table["device"] == "cpu").all()
    )
    cached = table[table["mode"] == "cache"]
    assert list(cached["context"]) == [8, 40, 120]
    assert_a_cached_step_does_not_grow(cached)
    recomputed = table[table["mode"] == "no cache"]
    assert list(recomputed["context"]) == [8, 40]  # --max-recompute 40
    assert recomputed["elements_written_per_step"].is_monotonic_increasing
    assert (table["seconds_per_step"] > 0).all()


def test_cuda_when_absent_is_refused_without_writing(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    out = tmp_path / "decode.csv"
    done = run_script("--device", "cuda", "--out", str(out))
    assert done.returncode == 2 and "CUDA is not available" in done.stderr
    assert not out.exists()


def check_shipped(table: pd.DataFrame, device: str) -> None:
    """What every shipped decode benchmark must hold, whatever its timings."""
    assert list(table.columns) == COLUMNS
    assert (table["device"] == device).all()
    assert table["machine"].str.contains("torch").all()
    assert (
        table["command"].str.startswith("python scripts/bench_decode.py").all()
    )
    assert (table["seconds_per_step"] > 0).all()
    for _, cached in table[table["mode"] == "cache"].groupby("model"):
        assert_a_cached_step_does_not_grow(cached)


def test_the_shipped_measurements_hold_what_a_cached_step_promises():
    """book/bench_decode.csv (one CPU thread) and book/bench_decode_gpu.csv (an H100), which
    chapter 11 draws side by side."""
    check_shipped(pd.read_csv(ROOT / "book" / "bench_decode.csv"), "cpu")
    gpu = pd.read_csv(ROOT / "book" / "bench_decode_gpu.csv")
    check_shipped(gpu, "cuda")
    assert gpu["machine"].str.contains("H100").all()
    assert "--device cuda" in gpu["command"].iloc[0]


def test_the_shipped_check_fails_on_a_cached_step_that_grows():
    table = pd.read_csv(ROOT / "book" / "bench_decode_gpu.csv")
    cached = table["mode"] == "cache"
    table.loc[cached, "elements_written_per_step"] += table.loc[
        cached, "context"
    ]
    with pytest.raises(AssertionError, match="elements_written_per_step"):
        check_shipped(table, "cuda")
