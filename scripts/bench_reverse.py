"""Time-to-99.9% on the reversal task: source 000's configuration against the book's.

    python scripts/bench_reverse.py                 # both configurations, 3 runs each
    python scripts/bench_reverse.py --threads 2     # torch threads (default 1, as chapter 7)
    python scripts/bench_reverse.py --record        # also write book/bench_reverse.csv

What "source 000" means here: source 000's *hyper-parameters* (batch 32, learning rate 1e-3,
dropout 0.1, 100 warm-up steps, 3 epochs) trained on the *book's* model and schedule. The
book's ReversePredictor has a single linear classifier head (source 000's head is Linear,
LayerNorm, ReLU, Dropout, Linear, LayerNorm), its pre-LN encoder ends with a final LayerNorm
(source 000's has none), and the schedule is linear warm-up then cosine to zero over the run
(source 000 multiplies by cos(pi * step / max_iter)). The ratio below therefore measures the
effect of the hyper-parameters, not of source 000's exact architecture.

Both configurations train the same model class (helpers.tasks.reverse.ReversePredictor) on the same
50,000 training sequences with the same loop (helpers.training.fit), and are evaluated on the
same 10,000 fresh test sequences (seed 2, as chapter 7's test set) every ``--eval-every``
optimizer steps. The clock runs only while training: evaluation time is excluded, so the
measurement does not depend on how often we look. Time-to-99.9% is the training time at the
first evaluation with test token accuracy >= 99.9% (an upper bound, by at most one evaluation
interval). The first run of each configuration continues to the end of its schedule (its final
test accuracy is reported); the others stop at the threshold. Training is deterministic, so
repeats differ only in time: the best of the repeats is the least disturbed by other work on the
machine.

Wall times depend on the machine and on whatever else runs on it: report the load average
(printed) with the numbers.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import os
import platform
import sys
import time

import torch
from torch.utils.data import DataLoader

from helpers.tasks.reverse import (
    BOOK_CONFIG,
    SOURCE_000_CONFIG,
    ReverseConfig,
    build_reverse_training,
    make_reverse_dataset,
    token_accuracy,
)
from helpers.training import evaluate, fit, token_cross_entropy

THRESHOLD = 0.999
RECORD_PATH = os.path.join(
    os.path.dirname(__file__), "..", "book", "bench_reverse.csv"
)


def _seconds(value: float) -> str:
    return "not reached" if math.isnan(value) else f"{value:.2f}"


class Chunks:
    """Cut an endless stream of epochs of ``loader`` into consecutive chunks of batches.

    ``fit(..., epochs=1)`` on one chunk trains that many steps; the next chunk continues where
    the previous one stopped (mid-epoch included), so chunked training is the same run.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.stream = itertools.chain.from_iterable(itertools.repeat(loader))

    def take(self, steps: int) -> list:
        return list(itertools.islice(self.stream, steps))


def time_to_threshold(
    name: str,
    config: ReverseConfig,
    train_set,
    test_loader,
    eval_every: int,
    stop_at_threshold: bool = False,
) -> dict[str, float]:
    """Train ``config`` (to the end of its schedule, or until the threshold is reached);
    report the training time and step at which test accuracy first reached 99.9%."""
    model, optimizer, scheduler, loader = build_reverse_training(
        config, train_set
    )
    chunks = Chunks(loader)
    metrics = {"accuracy": token_accuracy}
    total, step, train_seconds = config.total_steps(), 0, 0.0
    reached_at, reached_step = float("nan"), -1
    while step < total and not (stop_at_threshold and reached_step > 0):
        batches = chunks.take(min(eval_every, total - step))
        start = time.perf_counter()
        fit(
            model,
            batches,
            loss_fn=token_cross_entropy,
            optimizer=optimizer,
            scheduler=scheduler,
            epochs=1,
            clip_grad_norm=config.clip_grad_norm,
            progress=False,
            log_every=len(batches),
        )
        train_seconds += time.perf_counter() - start
        step += len(batches)
        accuracy = evaluate(model, test_loader, token_cross_entropy, metrics)[
            "accuracy"
        ]
        if reached_step < 0 and accuracy >= THRESHOLD:
            reached_at, reached_step = train_seconds, step
    print(
        f"  {name:>10}: {THRESHOLD:.1%} after {reached_step} steps, {reached_at:.2f} s; "
        f"stopped at step {step} ({train_seconds:.1f} s), test accuracy {accuracy:.5f}",
        flush=True,
    )
    return {
        "time_to_threshold_s": reached_at,
        "steps_to_threshold": reached_step,
        "train_s": train_seconds,
        "steps": step,
        "final_accuracy": accuracy,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1, as chapter 7 uses)",
    )
    parser.add_argument(
        "--eval-every", type=int, default=10, help="steps between evaluations"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per configuration"
    )
    parser.add_argument(
        "--record",
        nargs="?",
        const=RECORD_PATH,
        default=None,
        help=f"write the results as CSV (default path {RECORD_PATH})",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs"
    )
    load_before = os.getloadavg()[0]
    print(f"load average before: {load_before:.2f}")

    train_set = make_reverse_dataset(
        50_000, 16, 10, torch.Generator().manual_seed(0)
    )
    test_set = make_reverse_dataset(
        10_000, 16, 10, torch.Generator().manual_seed(2)
    )
    test_loader = DataLoader(test_set, batch_size=2000)
    runs = {"source 000": SOURCE_000_CONFIG, "book": BOOK_CONFIG}
    for name, config in runs.items():
        print(f"{name}: {config}")
    results = {name: [] for name in runs}
    for repeat in range(args.repeats):
        # The first repeat runs each whole schedule; later ones stop at the threshold.
        # Alternate the order so that a burst of load elsewhere does not favour one side.
        order = list(runs) if repeat % 2 == 0 else list(runs)[::-1]
        for name in order:
            result = time_to_threshold(
                name,
                runs[name],
                train_set,
                test_loader,
                args.eval_every,
                repeat > 0,
            )
            results[name].append(result)

    load_after = os.getloadavg()[0]
    print(f"load average after: {load_after:.2f}")
    best, rows = {}, []
    for name, repeats in results.items():
        times = [r["time_to_threshold_s"] for r in repeats]
        reached = [t for t in times if not math.isnan(t)]
        best[name] = min(reached) if reached else float("nan")
        whole = repeats[0]
        steps = (
            whole["steps_to_threshold"]
            if whole["steps_to_threshold"] > 0
            else "not reached"
        )
        print(
            f"{name:>10}: time to {THRESHOLD:.1%}: best {_seconds(best[name])} s of "
            f"[{', '.join(_seconds(t) for t in times)}] "
            f"({steps} steps); whole schedule {whole['train_s']:.1f} s "
            f"({whole['steps']} steps, {1000 * whole['train_s'] / whole['steps']:.1f} ms/step), "
            f"final test accuracy {whole['final_accuracy']:.5f}"
        )
        rows.append(
            {
                "Configuration": name,
                "Steps to 99.9%": steps,
                "Best time to 99.9% (s)": _seconds(best[name]),
                "Runs": len(repeats),
                "Whole schedule (steps)": whole["steps"],
                "Whole schedule (s)": f"{whole['train_s']:.1f}",
                "ms per step": f"{1000 * whole['train_s'] / whole['steps']:.1f}",
                "Final test accuracy": f"{whole['final_accuracy']:.5f}",
            }
        )
    if all(math.isnan(b) for b in best.values()) or any(
        math.isnan(b) for b in best.values()
    ):
        ratio_text = (
            "not available (a configuration never reached the threshold)"
        )
    else:
        ratio_text = f"{best['source 000'] / best['book']:.1f}x"
    print(
        f"speed-up (best source time / best book time, to {THRESHOLD:.1%}): {ratio_text}"
    )
    if args.record:
        for row in rows:
            row["Speed-up of book"] = (
                ratio_text if row["Configuration"] == "book" else ""
            )
            row["Machine"] = (
                f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                f"{torch.get_num_threads()} thread(s)"
            )
            row["Load average before/after"] = (
                f"{load_before:.2f}/{load_after:.2f}"
            )
        with open(args.record, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"recorded in {os.path.normpath(args.record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
