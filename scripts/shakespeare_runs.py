"""Train the Shakespeare chapter's GPT over seeds and for longer than the page can afford.

    python scripts/shakespeare_runs.py --steps 1500 --seeds 0 1 2 --out FILE.csv
    python scripts/shakespeare_runs.py --steps 8000 --seeds 0 --evaluations 16 \
        --append --out FILE.csv

Each run is the chapter's recipe (``helpers.tasks.shakespeare.ShakespeareConfig``) with the
given number of steps (the schedule stretched to it) and seed; every evaluation of the
held-out loss is a row: ``steps`` (the run's length), ``seed``, ``step``, ``train_loss``,
and ``val_loss`` (nats per character), and the run's ``threads``, ``machine`` and
``command``. Losses do not depend on how busy the machine is; times do, so none are kept
(the chapter measures its own). The chapter draws these rows and asserts that its live
run falls among them.
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys

import pandas as pd
import torch

from helpers.parallel import machine_label
from helpers.tasks.shakespeare import (
    CharTokenizer,
    ShakespeareConfig,
    load_text,
    split_text,
    train_shakespeare,
)


def run(steps: int, seed: int, evaluations: int) -> pd.DataFrame:
    text = load_text()
    tokenizer = CharTokenizer(text)
    train_text, held_text = split_text(text)
    config = ShakespeareConfig(steps=steps, seed=seed, evaluations=evaluations)
    _, history = train_shakespeare(
        config, tokenizer.encode(train_text), tokenizer.encode(held_text)
    )
    rows = history[history["val_loss"].notna()]
    rows = rows[["step", "train_loss", "val_loss"]].copy()
    rows.insert(0, "seed", seed)
    rows.insert(0, "steps", steps)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--evaluations", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument(
        "--append", action="store_true", help="add to --out's rows"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    command = "python scripts/shakespeare_runs.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    machine = machine_label()
    frames = []
    for seed in args.seeds:
        rows = run(args.steps, seed, args.evaluations)
        print(rows.to_string(index=False), flush=True)
        frames.append(rows)
    table = pd.concat(frames)
    table["threads"] = args.threads
    table["machine"] = machine
    table["command"] = command
    if args.append and args.out.exists():
        table = pd.concat([pd.read_csv(args.out), table])
    table.round(4).to_csv(args.out, index=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
