"""Train the encoder chapter's deep stacks over seeds: post-LN and pre-LN, with and without
warm-up, and ship the results.

    python scripts/warmup_runs.py --seeds 0 1 2 3 4 --workers 2

Each run is ``helpers.tasks.warmup.train_stack`` (12 blocks, Adam at a constant 0.005 after
an optional 100-step linear warm-up, 300 steps) and becomes one row of
``helpers/tasks/warmup_runs.csv``: the norm's place, the warm-up, the seed, the learning rate,
the final training loss, the test accuracy, the machine and this command. Chapter 6 draws the
rows and asserts that its live runs fall among them.
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys

import pandas as pd

from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.warmup import RUNS_FILE, train_stack

OUT = (
    pathlib.Path(__file__).resolve().parents[1]
    / "helpers"
    / "tasks"
    / RUNS_FILE
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    command = "python scripts/warmup_runs.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    jobs = [
        dict(norm_first=norm_first, warmup_steps=warmup, seed=seed, lr=args.lr)
        for seed in args.seeds
        for norm_first in (False, True)
        for warmup in (0, 100)
    ]
    results = run_in_processes(train_stack, jobs, workers=args.workers)
    rows = [
        {
            "norm": "pre-LN" if job["norm_first"] else "post-LN",
            "warmup": job["warmup_steps"],
            "seed": job["seed"],
            "lr": job["lr"],
            "final_loss": round(result["losses"][-1], 4),
            "accuracy": round(result["accuracy"], 4),
        }
        for job, result in zip(jobs, results, strict=True)
    ]
    table = pd.DataFrame(rows)
    table["machine"] = machine_label()
    table["command"] = command
    table.to_csv(args.out, index=False)
    print(table.drop(columns=["machine", "command"]).to_string(index=False))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
