"""Chapter 8 at full scale, outside CI: the blog post's training protocol with the book's fixes.

    python scripts/reproduce_shapes.py [--protocol source] [--epochs 50] [--seeds 3]
        [--workers 2] [--device cpu] [--models ...] [--out helpers/tasks/shapes_full.csv]
        [--collect]

``--protocol source`` (the default) is source 004's training as its code states it: 25,000
sequences, normalized with their own mean and standard deviation, split at random 80/20
(fastai's ``RandomSplitter(valid_pct=0.2)``: 20,000 to train on, 5,000 to validate), batches
of 128 (the last, incomplete training batch dropped, as fastai's training loader does), 50
epochs at a flat learning rate of 1e-3 (``Learner.fit(50, 1e-3)``) with fastai's default
optimizer, Adam with decoupled weight decay 0.01, betas (0.9, 0.99) and eps 1e-5 (here
``torch.optim.AdamW`` with those values), and the batch-axis LSTM's state cleared before each
epoch and each evaluation (fastai's ``ModelReseter``). ``--protocol book`` is the first
protocol this script had: plain ``torch.optim.Adam`` on all 25,000 sequences, no validation
split. The source states no error per epoch; this script measures the MSE on the validation
split (``source`` only) and on the book's test set after every epoch, for the book's data
(noise-free targets, both kinds with distinct heights) and models, and writes one CSV row per
model, seed and epoch with the seconds so far, the machine and the command;
``helpers.tasks.shapes.full_scale_results`` reads the shipped file. Runs go side by side, one
thread each (`helpers.parallel.run_in_processes`): on a 2-core CPU the protocol takes hours, on
a GPU (``--workers 1 --device cuda``) minutes. Each run's rows are saved after every epoch in a
``.partial`` folder beside ``--out``; ``--collect`` merges them after an interruption, and
the same command run again skips every run it finished before (so the CPU protocol can be run
in parts, a few runs per sitting). The shipped file is the whole ``--protocol source`` run
(four models, three seeds, fifty epochs), made in three sittings on a 2-core CPU; its
``seconds`` column says how long each run trained (on a machine that was not always quiet).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.shapes import (
    SHAPES_MODELS,
    make_shapes_dataset,
    source_split,
    standardize,
)
from helpers.training import evaluate

PROTOCOLS = ("source", "book")


def make_optimizer(
    protocol: str, parameters, lr: float
) -> torch.optim.Optimizer:
    """fastai's default Adam for the source's protocol; plain Adam for the book's."""
    if protocol == "source":
        return torch.optim.AdamW(
            parameters, lr=lr, betas=(0.9, 0.99), eps=1e-5, weight_decay=0.01
        )
    return torch.optim.Adam(parameters, lr=lr)


def reset_state(model: nn.Module) -> None:
    """Clear a stateful model's memory (the batch-axis LSTM), as fastai's ModelReseter does."""
    if hasattr(model, "reset"):
        model.reset()


def mse_on(model, dataset, device) -> float:
    reset_state(model)
    loader = DataLoader(dataset, batch_size=1000)
    return evaluate(model, loader, nn.MSELoss(), device=device)["loss"]


def one_run(
    name, seed, protocol, train_set, valid_set, test_set, epochs, batch_size, lr, device,
    partial_dir, label,
):  # fmt: skip
    """One model and seed under ``protocol``: validation and test MSE after every epoch.

    The rows so far are rewritten to ``partial_dir`` after every epoch, so that an interrupted
    run of several hours keeps what it measured.
    """
    partial = partial_path(partial_dir, name, seed)
    torch.manual_seed(seed)
    model = SHAPES_MODELS[name]().to(device)
    order = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        train_set,
        batch_size,
        shuffle=True,
        generator=order,
        drop_last=protocol == "source",
    )
    optimizer = make_optimizer(protocol, model.parameters(), lr)
    rows, start = [], time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        reset_state(model)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        valid_mse = (
            mse_on(model, valid_set, device)
            if valid_set is not None
            else float("nan")
        )
        test_mse = mse_on(model, test_set, device)
        seconds = time.perf_counter() - start
        rows.append(
            dict(model=name, seed=seed, epoch=epoch, valid_mse=valid_mse, test_mse=test_mse,
                 seconds=seconds, **label)
        )  # fmt: skip
        pd.DataFrame(rows).to_csv(partial, index=False)
        print(
            f"{name:20} seed {seed} epoch {epoch:3}: valid {valid_mse:.5f} test {test_mse:.5f}"
        )
    return rows


def partial_path(partial_dir, name: str, seed: int) -> Path:
    """The file one run's rows are saved to, epoch by epoch."""
    return Path(partial_dir) / f"{name.replace(' ', '_')}-seed{seed}.csv"


def run_is_complete(partial_dir, job: dict, epochs: int, label: dict) -> bool:
    """Whether an earlier invocation of the same command finished this run (every epoch).

    The protocol takes hours on a CPU, so it can be run in parts: the same command again
    trains only the runs it has not finished; ``--collect`` merges them. A run saved by
    another command (another protocol, epochs or data) is trained again, not mixed in.
    """
    path = partial_path(partial_dir, job["name"], job["seed"])
    if not path.is_file():
        return False
    rows = pd.read_csv(path)
    return (
        list(rows["epoch"]) == list(range(1, epochs + 1))
        and (rows["command"] == label["command"]).all()
    )


def datasets(protocol: str, num_train: int):
    """Train, validation (None for the book's protocol) and test sets, normalized as the source
    does: with the mean and standard deviation of all ``num_train`` sequences, inputs and
    targets together, computed before the split."""
    data, test = (
        make_shapes_dataset(num_train, seed=1),
        make_shapes_dataset(1000, seed=3),
    )
    (all_set, test_set), _ = standardize(data, data, test)
    if protocol == "book":
        return all_set, None, test_set
    inputs, targets = all_set.tensors
    train_idx, valid_idx = source_split(num_train)
    train_set = TensorDataset(inputs[train_idx], targets[train_idx])
    valid_set = TensorDataset(inputs[valid_idx], targets[valid_idx])
    return train_set, valid_set, test_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=PROTOCOLS, default="source")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--num-train", type=int, default=25_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=list(SHAPES_MODELS))
    parser.add_argument("--out", default="helpers/tasks/shapes_full.csv")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: merge the per-run files of an interrupted run into --out",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.models) - set(SHAPES_MODELS))
    if unknown:
        parser.error(
            f"unknown models {unknown}: choose from {list(SHAPES_MODELS)}"
        )
    train_set, valid_set, test_set = datasets(args.protocol, args.num_train)
    # The slowest run first (one LSTM seed), then every seed of the models the chapter's claim
    # is about, then the LSTMs' other seeds: an interrupted run still has whole seeds of those.
    lstms = [m for m in args.models if "LSTM" in m]
    others = [m for m in args.models if m not in lstms]
    jobs = (
        [dict(name=m, seed=0) for m in lstms]
        + [
            dict(name=m, seed=s)
            for m in reversed(others)
            for s in range(args.seeds)
        ]
        + [dict(name=m, seed=s) for s in range(1, args.seeds) for m in lstms]
    )
    label = dict(
        machine=machine_label(args.device, args.workers),
        command="python scripts/reproduce_shapes.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k not in ("models", "out", "collect")
        ),
    )
    partial_dir = Path(args.out).with_suffix(".partial")
    done = [
        job
        for job in jobs
        if run_is_complete(partial_dir, job, args.epochs, label)
    ]
    for job in done:
        print(
            f"{job['name']} seed {job['seed']}: complete in {partial_dir}, not trained again"
        )
    jobs = [job for job in jobs if job not in done]
    if not args.collect and jobs:
        partial_dir.mkdir(parents=True, exist_ok=True)
        run_in_processes(
            one_run,
            jobs,
            workers=args.workers,
            protocol=args.protocol,
            train_set=train_set,
            valid_set=valid_set,
            test_set=test_set,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            device=args.device,
            partial_dir=str(partial_dir),
            label=label,
        )
    parts = sorted(partial_dir.glob("*.csv"))
    if not parts:
        raise SystemExit(
            f"no runs in {partial_dir}: run without --collect first"
        )
    table = pd.concat([pd.read_csv(part) for part in parts], ignore_index=True)
    table = table.sort_values(["model", "seed", "epoch"])
    table.to_csv(args.out, index=False)
    print(
        table.pivot_table(
            index="epoch", columns="model", values="test_mse"
        ).round(5)
    )


if __name__ == "__main__":
    main()
