"""Chapter 14 over many seeds, outside the page's budget: the ViT and the CNN on the digits.

    python scripts/reproduce_digits.py [--seeds 10] [--sizes 50 100 300] [--workers 2]
        [--device cpu] [--out helpers/tasks/digits_seeds.csv] [--resume]

Every run uses ``helpers.tasks.digits.train_digits`` with the chapter's recipe and split, and
writes one CSV row (test and training accuracy, training seconds, tokens, parameters), with
the machine and the command; ``helpers.tasks.digits.seed_results`` reads the shipped file.
Four experiments, each on seeds ``0 .. seeds - 1``:

* ``models``: the ViT (class token, learned positions, patches of 2 pixels) and the CNN on
  the whole training set;
* ``size``: both on the first ``--sizes`` images of the balanced training order, and the ViT
  with patches of 4 pixels too;
* ``variant``: the ViT with mean pooling, with 2-D sinusoidal positions, with no positions;
* ``patch``: the ViT with patches of 1 and 4 pixels.

The runs go side by side, one thread each (``helpers.parallel.run_in_processes``). With
``--resume``, the rows of ``--out`` that the same command wrote on the same machine are kept
and only the missing runs are trained (a run is deterministic given its seed and machine);
the file is written whole, in the order of :func:`jobs`.
"""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd

from helpers.analysis import count_parameters
from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.digits import make_digits_data, train_digits
from helpers.vit import ViTConfig

BASE = ViTConfig()


def one_run(
    experiment: str,
    model: str,
    seed: int,
    num_train,
    vit: dict,
    device: str,
    label,
):
    config = dataclasses.replace(BASE, **vit)
    run = train_digits(
        model, seed, num_train=num_train, vit=config, device=device
    )
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
        runs += [
            dict(experiment="patch", model="ViT", vit=dict(patch_size=patch))
        ]
    for model in ("ViT", "CNN"):
        runs += [dict(experiment="models", model=model, vit={})]
        runs += [
            dict(experiment="size", model=model, vit={}, num_train=n)
            for n in sizes
        ]
    runs += [dict(experiment="size", model="ViT", vit=dict(patch_size=4), num_train=n)
             for n in sizes]  # fmt: skip
    variants = (
        dict(pool="mean"),
        dict(positions="sinusoidal"),
        dict(positions="none"),
    )
    runs += [dict(experiment="variant", model="ViT", vit=v) for v in variants]
    return [
        {"num_train": None, **run, "seed": seed}
        for run in runs
        for seed in range(seeds)
    ]


KEYS = [
    "experiment",
    "model",
    "pool",
    "positions",
    "patch_size",
    "num_train",
    "seed",
]


def job_key(job: dict, full: int) -> tuple:
    """The values of :data:`KEYS` that a job's row will have (``full``: all training images)."""
    config = dataclasses.replace(BASE, **job["vit"])
    return (job["experiment"], job["model"], config.pool, config.positions, config.patch_size,
            job["num_train"] or full, job["seed"])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 300])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="helpers/tasks/digits_seeds.csv")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows of --out that this command made here",
    )
    args = parser.parse_args()
    command = "python scripts/reproduce_digits.py " + " ".join(
        f"--{key} {' '.join(map(str, value)) if isinstance(value, list) else value}"
        for key, value in vars(args).items()
        if key not in ("out", "resume")
    )
    label = dict(
        machine=machine_label(args.device, args.workers), command=command
    )
    todo, full = (
        jobs(args.seeds, args.sizes),
        len(make_digits_data().train_labels),
    )
    kept = {}
    if args.resume:
        old = pd.read_csv(args.out)
        old = old[
            (old["machine"] == label["machine"]) & (old["command"] == command)
        ]
        kept = {tuple(row[KEYS]): row.to_dict() for _, row in old.iterrows()}
    missing = [job for job in todo if job_key(job, full) not in kept]
    print(
        f"{len(todo) - len(missing)} runs kept from {args.out}, {len(missing)} to train"
    )
    new = run_in_processes(one_run, missing, workers=args.workers, device=args.device,
                           label=label)  # fmt: skip
    made = {
        job_key(job, full): row for job, row in zip(missing, new, strict=True)
    }
    rows = [
        kept.get(job_key(job, full)) or made[job_key(job, full)] for job in todo
    ]
    table = pd.DataFrame(rows)
    table.to_csv(args.out, index=False)
    keys = [
        key for key in KEYS if key != "seed"
    ]  # a row per setting, over seeds
    summary = table.groupby(keys)["test_accuracy"].agg(["min", "median", "max"])
    print(summary.round(3).to_string())


if __name__ == "__main__":
    main()
