"""Chapter 14's attention readings over many seeds, with the shuffled-label control.

    python scripts/reproduce_digits_attention.py [--seeds 10] [--workers 2] [--device cpu]
        [--out helpers/tasks/digits_attention.csv]

For each seed, three ViTs of the chapter (class token, learned positions, patches of 2 pixels):
``trained``, by ``helpers.tasks.digits.train_digits`` with the chapter's recipe and split;
``shuffled labels``, trained the same way on the training labels permuted at random (the
control: a claim about what learning the digits does to attention must not hold for it too);
``untrained``, the trained one's initialization. Each is read by
``helpers.tasks.digits.attention_readings`` on the test images, and written as one CSV row with
the machine and the command; ``helpers.tasks.digits.attention_results`` reads the shipped file.
The trainings go side by side, one thread each (``helpers.parallel.run_in_processes``).
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch

from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.digits import (
    attention_readings,
    make_digits_data,
    make_digits_model,
    train_digits,
)

KINDS = ("trained", "shuffled labels", "untrained")


def one_seed(seed: int, shuffled: bool, device: str, label: dict) -> list[dict]:
    """The readings of one training (and, for the true labels, of its initialization)."""
    data = make_digits_data()
    run = train_digits("ViT", seed, shuffled_labels=shuffled, device=device)
    kind = "shuffled labels" if shuffled else "trained"
    rows = [dict(kind=kind, seed=seed, train_accuracy=run.train_accuracy,
                 **attention_readings(run.model, data), **label)]  # fmt: skip
    if not shuffled:
        torch.manual_seed(
            seed
        )  # as train_digits does before it builds the model
        untrained = make_digits_model("ViT").eval()
        rows.append(dict(kind="untrained", seed=seed, train_accuracy=float("nan"),
                         **attention_readings(untrained, data), **label))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="helpers/tasks/digits_attention.csv")
    args = parser.parse_args()
    command = (
        f"python scripts/reproduce_digits_attention.py --seeds {args.seeds} "
        f"--workers {args.workers} --device {args.device}"
    )
    label = dict(
        machine=machine_label(args.device, args.workers), command=command
    )
    jobs = [
        dict(seed=seed, shuffled=shuffled)
        for seed in range(args.seeds)
        for shuffled in (False, True)
    ]
    made = run_in_processes(one_seed, jobs, workers=args.workers,
                            device=args.device, label=label)  # fmt: skip
    table = pd.DataFrame([row for rows in made for row in rows])
    table["kind"] = pd.Categorical(table["kind"], KINDS, ordered=True)
    table = table.sort_values(["kind", "seed"])
    table.to_csv(args.out, index=False)
    readings = table.columns.drop(["kind", "seed", "machine", "command"])
    summary = table.groupby("kind", observed=True)[list(readings)]
    print(summary.agg(["min", "median", "max"]).T.round(3).to_string())


if __name__ == "__main__":
    main()
