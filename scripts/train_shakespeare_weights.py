"""Train a deeper Shakespeare GPT for longer and ship its weights with the package.

    python scripts/train_shakespeare_weights.py --steps 10000 --seed 0 --threads 1

The chapter's recipe (``helpers.tasks.shakespeare.ShakespeareConfig``: AdamW with warm-up
and cosine decay, batches of 24 random 64-character windows) with its model ``--layers``
deep (default 4; the chapter's live model has 2), a peak learning rate of ``--lr`` (default
2e-3) and the schedule stretched to ``--steps``. Writes two files into ``helpers/tasks/``:

- ``shakespeare_gpt.safetensors``: the weights (float32, safetensors, the tied embedding
  stored once), which ``helpers.tasks.shakespeare.pretrained()`` loads;
- ``shakespeare_gpt.json``: what produced them (the recipe, the seed, the held-out loss in
  nats per character over every 64-character window of the last tenth of the text, the
  training time, the commit, the machine and this command). ``tests/test_tasks_shakespeare.py``
  recomputes the held-out loss of the shipped weights and compares it with the recorded one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shlex
import subprocess
import sys
import time

import torch
from safetensors.torch import save_model

from helpers.parallel import machine_label
from helpers.tasks.shakespeare import (
    WEIGHTS_FILE,
    CharTokenizer,
    ShakespeareConfig,
    held_out_loss,
    load_text,
    split_text,
    train_shakespeare,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "helpers" / "tasks"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--evaluations", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    return parser


def recipe(args: argparse.Namespace) -> ShakespeareConfig:
    """The chapter's configuration with the command line's depth, rate, steps and seed."""
    return ShakespeareConfig(
        model=ShakespeareConfig().model.replace(num_layers=args.layers),
        lr=args.lr,
        steps=args.steps,
        seed=args.seed,
        evaluations=args.evaluations,
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    command = "python scripts/train_shakespeare_weights.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    text = load_text()
    tokenizer = CharTokenizer(text)
    train_text, held_text = split_text(text)
    config = recipe(args)
    start = time.perf_counter()
    model, history = train_shakespeare(
        config, tokenizer.encode(train_text), tokenizer.encode(held_text)
    )
    seconds = time.perf_counter() - start
    loss = held_out_loss(model, tokenizer.encode(held_text))
    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / WEIGHTS_FILE
    save_model(model.float(), str(weights))
    commit = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    curve = history[history["val_loss"].notna()][["step", "val_loss"]]
    record = {
        "held_out_loss": round(loss, 4),
        "recipe": {
            **{
                k: v
                for k, v in dataclasses.asdict(config).items()
                if k != "model"
            },
            "model": dataclasses.asdict(config.model),
        },
        "curve": [
            {"step": int(s), "val_loss": round(float(v), 4)}
            for s, v in zip(curve["step"], curve["val_loss"], strict=True)
        ],
        "train_seconds": round(seconds, 1),
        "threads": args.threads,
        "commit": commit,
        "machine": machine_label(),
        "command": command,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    weights.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    print(
        json.dumps({k: record[k] for k in ("held_out_loss", "train_seconds")})
    )
    print(f"wrote {weights} and {weights.with_suffix('.json')}")


if __name__ == "__main__":
    main()
