"""Chapter 12 over many seeds, outside the page's budget: the ViT and the CNN on the digits.

    python scripts/reproduce_digits.py [--seeds 10] [--sizes 50 100 300] [--workers 2]
        [--device cpu] [--out helpers/tasks/digits_seeds.csv]

Every run uses ``helpers.tasks.digits.train_digits`` with the chapter's recipe and split, and
writes one CSV row (test and training accuracy, training seconds, tokens, parameters), with
the machine and the command; ``helpers.tasks.digits.seed_results`` reads the shipped file.
Four experiments, each on seeds ``0 .. seeds - 1``:

* ``models``: the ViT (class token, learned positions, patches of 2 pixels) and the CNN on
  the whole training set;
* ``size``: both on the first ``--sizes`` images of the balanced training order;
* ``variant``: the ViT with mean pooling, with 2-D sinusoidal positions, with no positions;
* ``patch``: the ViT with patches of 1 and 4 pixels.

The runs go side by side, one thread each (``helpers.parallel.run_in_processes``).
"""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd

from helpers.analysis import count_parameters
from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.digits import train_digits
from helpers.vit import ViTConfig

BASE = ViTConfig()


def one_run(experiment: str, model: str, seed: int, num_train, vit: dict, device: str, label):
    config = dataclasses.replace(BASE, **vit)
    run = train_digits(model, seed, num_train=num_train, vit=config, device=device)
    return dict(
        experiment=experiment, model=model, pool=config.pool, positions=config.positions,
        patch_size=config.patch_size, num_train=run.num_train,
        seed=seed, test_accuracy=run.test_accuracy, train_accuracy=run.train_accuracy,
        seconds=round(run.seconds, 3), tokens=config.num_tokens if model == "ViT" else 0,
        parameters=count_parameters(run.model), **label,
    )  # fmt: skip


def jobs(seeds: int, sizes: list[int]) -> list[dict]:
    """Every run, the slowest experiment (patches of 1 pixel: 65 tokens) first."""
    runs = []
    for patch in (1, 4):
        runs += [dict(experiment="patch", model="ViT", vit=dict(patch_size=patch))]
    for model in ("ViT", "CNN"):
        runs += [dict(experiment="models", model=model, vit={})]
        runs += [dict(experiment="size", model=model, vit={}, num_train=n) for n in sizes]
    variants = (dict(pool="mean"), dict(positions="sinusoidal"), dict(positions="none"))
    runs += [dict(experiment="variant", model="ViT", vit=v) for v in variants]
    return [{"num_train": None, **run, "seed": seed} for run in runs for seed in range(seeds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 300])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="helpers/tasks/digits_seeds.csv")
    args = parser.parse_args()
    command = "python scripts/reproduce_digits.py " + " ".join(
        f"--{key} {' '.join(map(str, value)) if isinstance(value, list) else value}"
        for key, value in vars(args).items()
        if key != "out"
    )
    label = dict(machine=machine_label(args.device, args.workers), command=command)
    rows = run_in_processes(one_run, jobs(args.seeds, args.sizes), workers=args.workers,
                            device=args.device, label=label)  # fmt: skip
    table = pd.DataFrame(rows)
    table.to_csv(args.out, index=False)
    keys = ["experiment", "model", "pool", "positions", "patch_size", "num_train"]
    summary = table.groupby(keys)["test_accuracy"].agg(["min", "median", "max"])
    print(summary.round(3).to_string())


if __name__ == "__main__":
    main()
