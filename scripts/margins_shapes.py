"""Chapter 8's asserted claims, measured over seeds: the margins behind its thresholds.

    python scripts/margins_shapes.py [--seeds 5] [--out margins_shapes.csv]

Run it under each numerics configuration of `make test-portability` (for example
`env ATEN_CPU_CAPABILITY=default python scripts/margins_shapes.py`) and take the worst value
of each quantity over seeds and configurations: a threshold in the chapter must sit clear of it
(CONTRIBUTING.md, "Numerics"). The recipe is the chapter's (same data, models, optimizer,
schedule, budgets); only the seed changes. Prints one row per seed and the worst values.
"""

from __future__ import annotations

import argparse
import os

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.tasks.shapes import (
    ShapesLSTM,
    make_shapes_attention_model,
    make_shapes_cnn,
    make_shapes_dataset,
)
from helpers.training import cosine_warmup_schedule, evaluate, fit

FACTORIES = {
    "CNN": make_shapes_cnn,
    "CNN + attention": make_shapes_attention_model,
    "bidirectional LSTM": ShapesLSTM,
}


def datasets():
    sizes_and_seeds = ((4000, 1), (1000, 2), (1000, 3))
    train, val, test = (make_shapes_dataset(n, seed=s) for n, s in sizes_and_seeds)
    values = torch.cat([train.inputs, train.targets])
    mean, std = values.mean().item(), values.std().item()

    def norm(d):
        return TensorDataset((d.inputs - mean) / std, (d.targets - mean) / std)

    return norm(train), norm(val), norm(test), test


def overfit_ratio(name, seed, train_set, steps=200):
    torch.manual_seed(seed)
    model = FACTORIES[name]()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = train_set.tensors[0][:20], train_set.tensors[1][:20]
    first = None
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        first = loss.item() if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item() / first


def train(name, seed, epochs, train_set, val_set, test_set):
    torch.manual_seed(seed)
    model = FACTORIES[name]()
    loader = DataLoader(train_set, 64, shuffle=True, generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    total = epochs * len(loader)
    fit(
        model,
        loader,
        loss_fn=nn.MSELoss(),
        optimizer=optimizer,
        epochs=epochs,
        scheduler=cosine_warmup_schedule(optimizer, round(0.05 * total), total),
        val_loader=DataLoader(val_set, 500),
        clip_grad_norm=1.0,
        progress=False,
    )
    mse = evaluate(model, DataLoader(test_set, 500), nn.MSELoss())["loss"]
    return model.eval(), mse


def attention_mass(model, test_set, test_data):
    """Mean weight that box / triangle queries put on same-kind and other-kind shapes."""
    with torch.no_grad():
        weights = model[4].attention(model[:4](test_set.tensors[0]))
    kinds = torch.div(test_data.shape_ids, 2, rounding_mode="floor")
    out = {}
    for kind, kind_name in ((0, "triangle"), (1, "box")):
        queries = kinds == kind
        same = (kinds[:, None, :] == kind).expand_as(weights)
        other = (kinds[:, None, :] == 1 - kind).expand_as(weights)
        out[f"{kind_name}_same"] = (weights * same).sum(-1)[queries].mean().item()
        out[f"{kind_name}_other"] = (weights * other).sum(-1)[queries].mean().item()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    train_set, val_set, test_set, test_data = datasets()
    rows = []
    for seed in range(args.seeds):
        row = {"seed": seed}
        for name in FACTORIES:
            row[f"overfit {name}"] = overfit_ratio(name, seed, train_set)
        short = {}
        for name in FACTORIES:
            short[name], row[f"mse {name}"] = train(name, seed, 2, train_set, val_set, test_set)
        long_model, row["mse long attention"] = train(
            "CNN + attention", seed, 8, train_set, val_set, test_set
        )
        for key, value in attention_mass(long_model, test_set, test_data).items():
            row[f"long {key}"] = value
        for key, value in attention_mass(short["CNN + attention"], test_set, test_data).items():
            row[f"short {key}"] = value
        rows.append(row)
        print(pd.Series(row).round(4).to_dict(), flush=True)
    table = pd.DataFrame(rows).set_index("seed")
    config = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")}
    print("numerics:", config)
    print(table.agg(["min", "max"]).T.round(4).to_string())
    if args.out:
        table.assign(**config).to_csv(args.out)


if __name__ == "__main__":
    main()
