"""Chapter 7's asserted claims, measured over seeds: the margins behind its thresholds.

    python scripts/margins_reverse.py [--seeds 5] [--part all] [--out margins_reverse.csv]

``--part chapter`` measures the chapter's main run, its bare loop and its ablations;
``--part schedules`` the schedule experiment (every run of ``SCHEDULE_EXPERIMENT``, cut after
``--max-steps`` steps as in the chapter): the steps to 99% training accuracy and the accuracy
over the last ten steps, one row per run and seed; the chapter reads the shipped copy
(``helpers.tasks.reverse.schedule_results``):

    python scripts/margins_reverse.py --part schedules --out helpers/tasks/reverse_schedules.csv

``--part ablations`` trains the chapter's ablations (``ABLATIONS``: no positions, dropout 0.1 as
in source 000, dropout 0.3) next to the plain recipe, one row per run and seed (with the trained
model's best token accuracy at the lengths it never saw, 8, 12, 20 and 24, how many of the 16
queries the mirror head still routes to key 15 - t at lengths 20 and 24, and the accuracy with
attention dropout 0.3 switched on in the trained model) and the machine and the command; the
chapter reads the shipped copy of that file (``helpers.tasks.reverse.ablation_results``):

    python scripts/margins_reverse.py --part ablations --out helpers/tasks/reverse_ablations.csv

Run it under each numerics configuration of `make test-portability` (for example
`env ATEN_CPU_CAPABILITY=default python scripts/margins_reverse.py`) and take the worst value of
each quantity over seeds and configurations: a threshold in the chapter must sit clear of it
(CONTRIBUTING.md, "Numerics"). The recipe is the chapter's (`BOOK_CONFIG`, same data, one
thread); only `config.seed` (initialization and batch order) changes.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from helpers.parallel import machine_label
from helpers.tasks.reverse import (
    ABLATIONS,
    BOOK_CONFIG,
    SCHEDULE_EXPERIMENT,
    ReversePredictor,
    bag_oracle_accuracy,
    make_reverse_dataset,
    mirror_routing,
    steps_to_accuracy,
    token_accuracy,
    token_cross_entropy,
    train_reverse,
)
from helpers.training import evaluate


def train_and_test(config, train_set, test_loader):
    model, history = train_reverse(config, train_set)
    model.eval()
    scores = evaluate(model, test_loader, token_cross_entropy, {"accuracy": token_accuracy})
    return model, history, scores


def sequence_accuracy(model, inputs, targets):
    model.eval()
    with torch.no_grad():
        return (model(inputs).argmax(-1) == targets).all(-1).float().mean().item()


def bare_loop(seed, train_set, val_set, num_steps=100):
    """The chapter's bare loop (Adam, constant lr 0.01): first loss, validation accuracy."""
    config = BOOK_CONFIG
    torch.manual_seed(seed)
    model = ReversePredictor(
        config.num_classes, config.d_model, config.num_heads, config.num_blocks, config.ffn_width
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(train_set, batch_size=config.batch_size, shuffle=True)
    losses = []
    for inputs, targets in itertools.islice(loader, num_steps):
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = token_accuracy(model(val_set.tensors[0]), val_set.tensors[1]).item()
    return {"bare first loss": losses[0], "bare val accuracy": accuracy}


def measure(seed, train_set, val_set, test_set):
    config = BOOK_CONFIG.replace(seed=seed)
    seq_len, num_classes = config.seq_len, config.num_classes
    test_loader = DataLoader(test_set, batch_size=2000)
    inputs, targets = test_set.tensors
    row = {"seed": seed} | bare_loop(seed, train_set, val_set)
    model, history, test = train_and_test(config, train_set, test_loader)
    logged = history.set_index("step")
    losses, accuracies = logged["train_loss"], logged["train_accuracy"]
    row |= {
        "test accuracy": test["accuracy"],
        "test sequence accuracy": sequence_accuracy(model, inputs, targets),
        "loss@10": losses[10],
        "loss@100": losses[100],
        "accuracy@10": accuracies[10],
        "accuracy@30": accuracies[30],
        "steps to 99%": steps_to_accuracy(history),
    }
    anti = torch.arange(seq_len - 1, -1, -1)
    with torch.no_grad():
        maps = model.get_attention_maps(inputs[:500])
    mass = torch.stack([m[:, :, torch.arange(seq_len), anti].mean(dim=(0, 2)) for m in maps])
    row["max anti-diagonal mass"] = mass.max().item()
    # attention dropout on the trained model (the chapter's mechanism check)
    for block in model.encoder.blocks:
        block.self_attn.dropout = 0.3
    model.train()
    torch.manual_seed(0)
    with torch.no_grad():
        row["attention-dropout accuracy"] = token_accuracy(model(inputs), targets).item()
    for block in model.encoder.blocks:
        block.self_attn.dropout = 0.0
    model.eval()
    best_other = 0.0
    for length in (8, 12, 20, 24):
        x, y = make_reverse_dataset(
            2000, length, num_classes, torch.Generator().manual_seed(3)
        ).tensors
        with torch.no_grad():
            best_other = max(best_other, token_accuracy(model(x), y).item())
    row["best other-length accuracy"] = best_other
    _, _, blind = train_and_test(config.replace(positional=False), train_set, test_loader)
    row["blind - oracle"] = blind["accuracy"] - bag_oracle_accuracy(inputs, num_classes)
    dropout_model, dropout_history, dropout = train_and_test(
        config.replace(dropout=0.3), train_set, test_loader
    )
    row["dropout train accuracy"] = dropout_history["train_accuracy"].tail(5).mean()
    row["dropout test accuracy"] = dropout["accuracy"]
    row["plain - dropout test accuracy"] = test["accuracy"] - dropout["accuracy"]
    row["dropout sequence accuracy"] = sequence_accuracy(dropout_model, inputs, targets)
    row["plain - dropout sequence accuracy"] = (
        row["test sequence accuracy"] - row["dropout sequence accuracy"]
    )
    return row


def measure_schedules(seed, train_set, max_steps):
    """Every run of the schedule experiment for one seed: one row per run."""
    rows = []
    for name, changes in SCHEDULE_EXPERIMENT.items():
        config = BOOK_CONFIG.replace(seed=seed, **changes)
        try:
            _, history = train_reverse(config, train_set, max_steps=max_steps)
        except FloatingPointError:  # a diverged run: fit stops on a non-finite loss
            rows.append({"run": name, "seed": seed, "steps to 99%": None, "final": float("nan")})
            continue
        accuracies = history.set_index("step")["train_accuracy"]
        rows.append(
            {
                "run": name,
                "seed": seed,
                "steps to 99%": steps_to_accuracy(history),
                "accuracy@100": accuracies[100],
                "final": accuracies.iloc[-1],
            }
        )
        print(rows[-1], flush=True)
    return rows


def measure_ablations(seed, train_set, test_set):
    """The plain recipe and every ablation of ``ABLATIONS`` for one seed: one row per run."""
    inputs, targets = test_set.tensors
    test_loader = DataLoader(test_set, batch_size=2000)
    rows = []
    for name, changes in ABLATIONS.items():
        config = BOOK_CONFIG.replace(seed=seed, **changes)
        model, history, test = train_and_test(config, train_set, test_loader)
        train_accuracy = history["train_accuracy"]
        other_lengths = []  # the chapter's lengths never seen in training
        for length in (8, 12, 20, 24):
            x, y = make_reverse_dataset(
                2000, length, config.num_classes, torch.Generator().manual_seed(3)
            ).tensors
            with torch.no_grad():
                other_lengths.append(token_accuracy(model(x), y).item())
        # the chapter's routing check: the mirror head still reads key 15 - t at length 20, 24
        _, _, mass, reads = mirror_routing(model, inputs[:500], config.seq_len)
        routing = {
            f"mirror reads at {length}": reads(
                make_reverse_dataset(
                    500, length, config.num_classes, torch.Generator().manual_seed(3)
                ).tensors[0]
            )
            for length in (20, 24)
        }
        # the chapter's mechanism check: attention dropout 0.3 on the trained model
        for block in model.encoder.blocks:
            block.self_attn.dropout = 0.3
        model.train()
        torch.manual_seed(0)
        with torch.no_grad():
            dropped = token_accuracy(model(inputs), targets).item()
        for block in model.encoder.blocks:
            block.self_attn.dropout = config.dropout
        model.eval()
        rows.append(
            {
                "run": name,
                "seed": seed,
                "train accuracy": train_accuracy.tail(5).mean(),  # dropout on, if any
                "train accuracy std": train_accuracy.tail(10).std(),  # noise of the curve
                "test accuracy": test["accuracy"],
                "test sequence accuracy": sequence_accuracy(model, inputs, targets),
                "bag oracle": bag_oracle_accuracy(inputs, config.num_classes),
                "best other-length accuracy": max(other_lengths),
                "max anti-diagonal mass": mass,
                **routing,
                "attention-dropout 0.3 accuracy": dropped,
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed, ...")
    parser.add_argument(
        "--part", choices=["all", "chapter", "schedules", "ablations"], default="all"
    )
    parser.add_argument("--max-steps", type=int, default=250)
    parser.add_argument("--out", default=None, help="CSV path (schedules: a second CSV)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the chapter does
    config = BOOK_CONFIG
    train_set = make_reverse_dataset(
        config.num_train, config.seq_len, config.num_classes, torch.Generator().manual_seed(0)
    )
    val_set = make_reverse_dataset(
        1_000, config.seq_len, config.num_classes, torch.Generator().manual_seed(1)
    )
    test_set = make_reverse_dataset(
        10_000, config.seq_len, config.num_classes, torch.Generator().manual_seed(2)
    )
    config_env = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")}
    print("numerics:", config_env)
    if args.part in ("all", "chapter"):
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows.append(measure(seed, train_set, val_set, test_set))
            print(pd.Series(rows[-1]).round(4).to_dict(), flush=True)
        table = pd.DataFrame(rows).set_index("seed")
        print(table.agg(["min", "max"]).T.round(4).to_string())
        if args.out:
            table.assign(**config_env).to_csv(args.out)
    if args.part in ("all", "schedules"):
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows += measure_schedules(seed, train_set, args.max_steps)
        runs = pd.DataFrame(rows)
        print(runs.pivot(index="run", columns="seed", values="steps to 99%").to_string())
        summary = runs.groupby("run", sort=False)[["accuracy@100", "final"]].agg(["min", "max"])
        print(summary.round(3).to_string())
        if args.out:
            command = "python scripts/margins_reverse.py " + " ".join(sys.argv[1:])
            label = dict(machine=machine_label("cpu", 1), command=command) | config_env
            stem, _, suffix = args.out.rpartition(".")
            path = args.out if args.part == "schedules" else f"{stem}_schedules.{suffix or 'csv'}"
            runs.round(6).assign(**label).to_csv(path, index=False)
    if args.part == "ablations":
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows += measure_ablations(seed, train_set, test_set)
        runs = pd.DataFrame(rows)
        print(runs.groupby("run", sort=False).agg(["min", "max"]).round(4).T.to_string())
        command = "python scripts/margins_reverse.py " + " ".join(sys.argv[1:])
        label = dict(machine=machine_label("cpu", 1), command=command) | config_env
        if args.out:
            runs.round(6).assign(**label).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
