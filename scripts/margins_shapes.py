"""Chapter 8's asserted claims, measured over seeds: the spread behind its thresholds.

    python scripts/margins_shapes.py [--seeds 5] [--lstm-seeds 5] [--epochs 3] [--workers 2]
        [--out helpers/tasks/shapes_seeds.csv]
    python scripts/margins_shapes.py --part overfit --seeds 3 --out helpers/tasks/shapes_overfit.csv

The recipe is the chapter's (`helpers.tasks.shapes.train_shapes_model` with its defaults and
the chapter's number of epochs, `--epochs`; the same data); only the seed changes. It trains
every model on every seed (the bidirectional LSTM on `--lstm-seeds` of them) and writes one row
per seed: each model's test MSE, the ratios and attention enrichments the chapter asserts, the
sanity check's final / first loss, and the machine and command. The package ships that file
(`helpers.tasks.shapes.seed_results`), so that chapter 8 states its spread over seeds and checks
its own few runs against it. Run it also under each numerics configuration of `make
test-portability` (for example `env ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2
ONEDNN_MAX_CPU_ISA=SSE41 python scripts/margins_shapes.py`): a threshold in the chapter must
sit clear of the worst value over seeds and configurations (CONTRIBUTING.md, "Numerics").

``--part overfit`` runs source 004's single-batch check as its code states it (Adam at 1e-3 for
5,000 steps on the first 20 training sequences, the loss logged every 1,000) on the chapter's
three proper models, and writes the loss per model, seed and logged step
(``helpers.tasks.shapes.overfit_results`` reads the shipped copy).
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import torch
from torch import nn
from torch.utils.data import TensorDataset

from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.shapes import (
    SHAPES_MODELS,
    attention_enrichment,
    local_oracle,
    make_shapes_dataset,
    train_shapes_model,
)


def datasets():
    sizes_and_seeds = ((20_000, 1), (1000, 2), (1000, 3))
    train, val, test = (make_shapes_dataset(n, seed=s) for n, s in sizes_and_seeds)
    values = torch.cat([train.inputs, train.targets])
    mean, std = values.mean().item(), values.std().item()

    def norm(d):
        return TensorDataset((d.inputs - mean) / std, (d.targets - mean) / std)

    oracle = (((local_oracle(test) - test.targets) / std) ** 2).mean().item()
    copy = (((test.inputs - test.targets) / std) ** 2).mean().item()
    return norm(train), norm(val), norm(test), test, oracle, copy


def overfit_curve(name, seed, train_set, steps=200, lr=3e-3, log_every=None):
    """Adam on the first 20 training sequences: the loss before steps 0, log_every, ..., steps.

    The chapter's sanity check is 200 steps at lr 3e-3; source 004's is 5,000 at 1e-3, with the
    loss printed every 1,000 (its loop runs 5,001 iterations and prints before each step).
    """
    torch.manual_seed(seed)
    model = SHAPES_MODELS[name]()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = train_set.tensors[0][:20], train_set.tensors[1][:20]
    logged = {}
    for step in range(steps + 1):
        loss = nn.functional.mse_loss(model(x), y)
        if step in (0, steps) or (log_every and step % log_every == 0):
            logged[step] = loss.item()
        if step < steps:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return logged


def overfit_ratio(name, seed, train_set, steps=200):
    """The chapter's sanity check: final / first loss after 200 Adam steps on 20 sequences."""
    curve = overfit_curve(name, seed, train_set, steps)
    return curve[steps] / curve[0]


SOURCE_OVERFIT = {"steps": 5000, "lr": 1e-3, "log_every": 1000}
"""Source 004's single-batch check: ``for epoch in range(5001)`` with Adam at lr 1e-3."""


def overfit_part(args, train_set) -> None:
    """Source 004's single-batch check on the book's models, one row per model, seed and step."""
    names = ("CNN", "CNN + attention", "bidirectional LSTM")
    jobs = [dict(name=n, seed=s) for s in range(args.seeds) for n in names]
    curves = run_in_processes(
        overfit_curve, jobs, workers=args.workers, train_set=train_set, **SOURCE_OVERFIT
    )
    rows = [
        {"model": job["name"], "seed": job["seed"], "step": step, "loss": loss}
        for job, curve in zip(jobs, curves, strict=True)
        for step, loss in curve.items()
    ]
    table = pd.DataFrame(rows)
    print(table.pivot_table(index="step", columns=["model", "seed"], values="loss").to_string())
    if args.out:
        command = "python scripts/margins_shapes.py " + " ".join(sys.argv[1:])
        label = dict(machine=machine_label("cpu", args.workers), command=command)
        table.assign(**label).to_csv(args.out, index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--lstm-seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3, help="the chapter's CONFIG['epochs']")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--part",
        choices=["seeds", "overfit"],
        default="seeds",
        help="seeds: the chapter's runs; overfit: source 004's single-batch check",
    )
    args = parser.parse_args()
    train_set, val_set, test_set, test_data, oracle, copy = datasets()
    torch.set_num_threads(1)
    if args.part == "overfit":
        overfit_part(args, train_set)
        return
    jobs = [dict(name="bidirectional LSTM", seed=s) for s in range(args.lstm_seeds)]
    jobs += [dict(name=n, seed=s) for s in range(args.seeds) for n in ("CNN + attention", "CNN")]
    jobs += [dict(name="batch-axis LSTM", seed=s) for s in range(args.seeds)]
    trained = run_in_processes(
        train_shapes_model,
        jobs,
        workers=args.workers,
        train_set=train_set,
        val_set=val_set,
        test_set=test_set,
        epochs=args.epochs,
    )
    results = {(job["name"], job["seed"]): out for job, out in zip(jobs, trained, strict=True)}
    rows = []
    for seed in range(args.seeds):
        row = {"seed": seed}
        for name in ("CNN", "CNN + attention", "bidirectional LSTM"):
            row[f"overfit {name}"] = overfit_ratio(name, seed, train_set)
        for name in SHAPES_MODELS:
            if (name, seed) in results:
                row[f"mse {name}"] = results[name, seed][2]
        row["ratio CNN / attention"] = row["mse CNN"] / row["mse CNN + attention"]
        row["CNN / oracle"] = row["mse CNN"] / oracle
        row["attention / oracle"] = row["mse CNN + attention"] / oracle
        row["batch-axis / copy"] = row["mse batch-axis LSTM"] / copy
        model = results["CNN + attention", seed][0]
        with torch.no_grad():
            weights = model[4].attention(model[:4](test_set.tensors[0]))
        table = attention_enrichment(weights, test_data.shape_ids)
        for kind in table.index:
            for region in table.columns:
                row[f"{kind} {region}"] = table.loc[kind, region]
            row[f"{kind} partner / other kind"] = (
                table.loc[kind, "partner"] / table.loc[kind, "other kind"]
            )
        rows.append(row)
        print(pd.Series(row).round(4).to_dict(), flush=True)
    table = pd.DataFrame(rows).set_index("seed")
    config = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")}
    print("numerics:", config, f"oracle {oracle:.4f} copy {copy:.4f}")
    print(table.agg(["min", "max"]).T.round(4).to_string())
    if args.out:
        command = "python scripts/margins_shapes.py " + " ".join(sys.argv[1:])
        label = dict(machine=machine_label("cpu", args.workers), command=command)
        table.assign(**config, **label).to_csv(args.out)


if __name__ == "__main__":
    main()
