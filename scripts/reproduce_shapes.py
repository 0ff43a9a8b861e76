"""Chapter 8 at full scale, outside CI: the blog post's protocol with the book's fixes.

    python scripts/reproduce_shapes.py [--epochs 50] [--seeds 3] [--workers 2]
        [--models "CNN" "CNN + attention" "bidirectional LSTM"]
        [--out helpers/tasks/shapes_full.csv] [--collect]

The blog post (chapter 8's source) trains on 25,000 sequences for 50 epochs, in batches of 128
at a flat learning rate of 1e-3, and reports a test MSE of about 0.01 after 5 epochs and 0.001
after 40 for its attention model. This script runs that protocol on the book's data (noise-free
targets, both kinds checked for distinct heights) and models (the bidirectional LSTM along the
right axis), evaluates the test MSE after every epoch, and writes one CSV row per model, seed
and epoch (with the seconds so far, the machine and the command), so that the chapter's figure
of test MSE against epoch is drawn from the file (``helpers.tasks.shapes.full_scale_results``
reads it; the package ships it). Runs go side by side, one thread each
(`helpers.parallel.run_in_processes`); on a 2-core CPU the full protocol takes about two hours,
on a GPU (`--workers 1`, `--device cuda`) minutes. Each run's rows are saved after every epoch
in a ``.partial`` folder beside ``--out``; ``--collect`` merges them after an interruption.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.parallel import run_in_processes
from helpers.tasks.shapes import SHAPES_MODELS, make_shapes_dataset
from helpers.training import evaluate


def machine(device: str, workers: int) -> str:
    """The processor (or GPU), cores and threads, for the CSV and the figure's label."""
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = "one thread per run" if workers > 1 else f"{torch.get_num_threads()} threads"
    return f"{name}, {os.cpu_count()} cores, {threads}, torch {torch.__version__}"


def one_run(name, seed, train_set, test_set, epochs, batch_size, lr, device, partial_dir, label):
    """The blog post's recipe: Adam at a flat ``lr``; test MSE after every epoch.

    The rows so far are rewritten to ``partial_dir`` after every epoch, so that an interrupted
    run of several hours keeps what it measured.
    """
    partial = Path(partial_dir) / f"{name.replace(' ', '_')}-seed{seed}.csv"
    torch.manual_seed(seed)
    model = SHAPES_MODELS[name]().to(device)
    order = torch.Generator().manual_seed(seed)
    loader = DataLoader(train_set, batch_size, shuffle=True, generator=order)
    test_loader = DataLoader(test_set, batch_size=1000)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    rows, start = [], time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        test_mse = evaluate(model, test_loader, nn.MSELoss(), device=device)["loss"]
        seconds = time.perf_counter() - start
        rows.append(
            dict(model=name, seed=seed, epoch=epoch, test_mse=test_mse, seconds=seconds, **label)
        )
        pd.DataFrame(rows).to_csv(partial, index=False)
        print(f"{name:20} seed {seed} epoch {epoch:3}: test MSE {test_mse:.5f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--num-train", type=int, default=25_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--models", nargs="+", default=["CNN", "CNN + attention", "bidirectional LSTM"]
    )
    parser.add_argument("--out", default="helpers/tasks/shapes_full.csv")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: merge the per-run files of an interrupted run into --out",
    )
    args = parser.parse_args()
    train, test = make_shapes_dataset(args.num_train, seed=1), make_shapes_dataset(1000, seed=3)
    values = torch.cat([train.inputs, train.targets])
    mean, std = values.mean().item(), values.std().item()
    train_set, test_set = (
        TensorDataset((d.inputs - mean) / std, (d.targets - mean) / std) for d in (train, test)
    )
    # The slowest run first (one LSTM seed), then every seed of the models the chapter's claim
    # is about, then the LSTM's other seeds: an interrupted run still has whole seeds of those.
    lstms = [m for m in args.models if "LSTM" in m]
    others = [m for m in args.models if m not in lstms]
    jobs = (
        [dict(name=m, seed=0) for m in lstms]
        + [dict(name=m, seed=s) for m in reversed(others) for s in range(args.seeds)]
        + [dict(name=m, seed=s) for s in range(1, args.seeds) for m in lstms]
    )
    label = dict(
        machine=machine(args.device, args.workers),
        command="python scripts/reproduce_shapes.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k not in ("models", "out", "collect")
        ),
    )
    partial_dir = Path(args.out).with_suffix(".partial")
    if not args.collect:
        partial_dir.mkdir(parents=True, exist_ok=True)
        run_in_processes(
            one_run,
            jobs,
            workers=args.workers,
            train_set=train_set,
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
        raise SystemExit(f"no runs in {partial_dir}: run without --collect first")
    table = pd.concat([pd.read_csv(part) for part in parts], ignore_index=True)
    table = table.sort_values(["model", "seed", "epoch"])
    table.to_csv(args.out, index=False)
    print(table.pivot_table(index="epoch", columns="model", values="test_mse").round(5))


if __name__ == "__main__":
    main()
