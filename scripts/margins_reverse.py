"""Chapter 7's asserted claims, measured over seeds: the margins behind its thresholds.

    python scripts/margins_reverse.py [--seeds 5] [--out margins_reverse.csv]

Run it under each numerics configuration of `make test-portability` (for example
`env ATEN_CPU_CAPABILITY=default python scripts/margins_reverse.py`) and take the worst value of
each quantity over seeds and configurations: a threshold in the chapter must sit clear of it
(CONTRIBUTING.md, "Numerics"). The recipe is the chapter's (`BOOK_CONFIG`, same data, one
thread); only `config.seed` (initialization and batch order) changes.
"""

from __future__ import annotations

import argparse
import os

import pandas as pd
import torch
from torch.utils.data import DataLoader

from helpers.tasks.reverse import (
    BOOK_CONFIG,
    bag_oracle_accuracy,
    make_reverse_dataset,
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


def measure(seed, train_set, test_set):
    config = BOOK_CONFIG.replace(seed=seed)
    seq_len, num_classes = config.seq_len, config.num_classes
    test_loader = DataLoader(test_set, batch_size=2000)
    inputs, targets = test_set.tensors
    row = {"seed": seed}
    model, history, test = train_and_test(config, train_set, test_loader)
    losses = history.set_index("step")["train_loss"]
    row |= {"test accuracy": test["accuracy"], "loss@10": losses[10], "loss@100": losses[100]}
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
    _, dropout_history, dropout = train_and_test(
        config.replace(dropout=0.3), train_set, test_loader
    )
    row["dropout train accuracy"] = dropout_history["train_accuracy"].tail(5).mean()
    row["dropout test accuracy"] = dropout["accuracy"]
    row["dropout / plain test loss"] = dropout["loss"] / test["loss"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the chapter does
    config = BOOK_CONFIG
    train_set = make_reverse_dataset(
        config.num_train, config.seq_len, config.num_classes, torch.Generator().manual_seed(0)
    )
    test_set = make_reverse_dataset(
        10_000, config.seq_len, config.num_classes, torch.Generator().manual_seed(2)
    )
    rows = []
    for seed in range(args.seeds):
        rows.append(measure(seed, train_set, test_set))
        print(pd.Series(rows[-1]).round(4).to_dict(), flush=True)
    table = pd.DataFrame(rows).set_index("seed")
    config_env = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")}
    print("numerics:", config_env)
    print(table.agg(["min", "max"]).T.round(4).to_string())
    if args.out:
        table.assign(**config_env).to_csv(args.out)


if __name__ == "__main__":
    main()
