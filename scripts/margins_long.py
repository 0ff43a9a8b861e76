"""Chapter 11's asserted claims, measured over seeds: the margins behind its thresholds.

    python scripts/margins_long.py [--parts cost shapes retrieval] [--seeds 3]
    python scripts/margins_long.py --parts retrieval --seeds 5 --workers 1 \
        --csv helpers/tasks/retrieval_seeds.csv

Run it under each numerics configuration of `make test-portability` (for example
`env ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41
python scripts/margins_long.py`) and take the worst value of each quantity over seeds and
configurations: a threshold in the chapter must sit clear of it (CONTRIBUTING.md, "Numerics").
The recipes are the chapter's (the same helpers, configurations and data); only the seed
changes. Training runs go two side by side (`helpers.parallel`).

- cost: the memory ratio tiled / naive and the time ratio naive / fused at T = 4096, and the
  speed-up of generation with a cache (timings: repeated three times, not seeded);
- shapes: chapter 8's attention model with a small and a full window, test MSE / local oracle;
- retrieval: accuracy at 1, 2 and 4 times the training length for each kind of position,
  and for sinusoidal positions with the two fixes of their scale (`train_retrieval(scale=)`);
  `--csv` writes the table (one row per run), which chapter 11 ships and draws as
  `helpers/tasks/retrieval_seeds.csv`.
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from helpers.analysis import peak_cpu_bytes
from helpers.attention import scaled_dot_product_attention
from helpers.efficient import median_seconds, tiled_attention
from helpers.gpt import GPT, GPTConfig
from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.retrieval import RetrievalConfig, train_retrieval
from helpers.tasks.shapes import local_oracle, make_shapes_dataset, train_shapes_model

# The chapter's settings (notebooks/11_long_sequences.py): keep them in step.
NUM_HEADS, D_HEAD, T_LONG, BLOCK = 2, 64, 4096, 256
SHAPES_TRAIN, SHAPES_EPOCHS, WINDOWS = 16_000, 1, (3, 100)
KINDS = ("learned", "sinusoidal", "rope", "alibi", "none")
GEN = {"vocab": 512, "width": 256, "layers": 4, "heads": 8, "prompt": 64, "new": 64}


def cost() -> pd.DataFrame:
    rows = []
    for repeat in range(3):
        with torch.inference_mode():
            q, k, v = (torch.randn(1, NUM_HEADS, T_LONG, D_HEAD) for _ in range(3))
            naive = lambda q, k, v: scaled_dot_product_attention(q, k, v, validate=False)[0]  # noqa: E731
            tiled = lambda q, k, v: tiled_attention(q, k, v, block_size=BLOCK)  # noqa: E731
            memory = peak_cpu_bytes(tiled, q, k, v) / peak_cpu_bytes(naive, q, k, v)
            speed = median_seconds(naive, q, k, v, repeats=3) / median_seconds(
                F.scaled_dot_product_attention, q, k, v, repeats=3
            )
        torch.manual_seed(0)
        config = GPTConfig(vocab_size=GEN["vocab"], context_length=GEN["prompt"] + GEN["new"],
                           d_model=GEN["width"], num_layers=GEN["layers"], num_heads=GEN["heads"],
                           positions="rope")  # fmt: skip
        model = GPT(config).eval()
        prompt = torch.randint(GEN["vocab"], (1, GEN["prompt"]))
        cached = median_seconds(model.generate, prompt, GEN["new"], greedy=True, repeats=3)
        recomputed = median_seconds(
            model.generate, prompt, GEN["new"], greedy=True, use_cache=False, repeats=3
        )
        rows.append({"repeat": repeat, "tiled/naive memory": memory, "naive/fused time": speed,
                     "cache speed-up": recomputed / cached})  # fmt: skip
    return pd.DataFrame(rows)


def shapes(seeds: int) -> pd.DataFrame:
    train, val, test = (make_shapes_dataset(n, seed=s)
                        for n, s in ((SHAPES_TRAIN, 1), (1000, 2), (1000, 3)))  # fmt: skip
    values = torch.cat([train.inputs, train.targets])
    mean, std = values.mean().item(), values.std().item()
    sets = [
        TensorDataset((d.inputs - mean) / std, (d.targets - mean) / std) for d in (train, val, test)
    ]
    oracle = (((local_oracle(test) - test.targets) / std) ** 2).mean().item()
    jobs = [dict(window=w, seed=s) for s in range(seeds) for w in WINDOWS]
    trained = run_in_processes(train_shapes_model, jobs, name="CNN + attention",
                               epochs=SHAPES_EPOCHS, train_set=sets[0], val_set=sets[1],
                               test_set=sets[2])  # fmt: skip
    return pd.DataFrame([{**job, "mse / oracle": mse / oracle}
                         for job, (_, _, mse) in zip(jobs, trained, strict=True)])  # fmt: skip


RETRIEVAL_RUNS = [(kind, None) for kind in KINDS] + [
    ("sinusoidal", "tokens"),
    ("sinusoidal", "encoding"),
]


def retrieval(seeds: int, workers: int, only: list[str] | None = None) -> pd.DataFrame:
    config = RetrievalConfig()
    runs = [(kind, scale) for kind, scale in RETRIEVAL_RUNS
            if only is None or f"{kind}/{scale or '-'}" in only]  # fmt: skip
    jobs = [dict(positions=kind, scale=scale, seed=s)
            for s in range(seeds) for kind, scale in runs]  # fmt: skip
    trained = run_in_processes(train_retrieval, jobs, workers=workers, config=config)
    return pd.DataFrame([{**job, **accuracy}
                         for job, (_, accuracy) in zip(jobs, trained, strict=True)])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["cost", "shapes", "retrieval"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="training processes at once")
    parser.add_argument("--csv", help="write the retrieval table (one row per run) here")
    parser.add_argument("--runs", nargs="+", help="retrieval runs only, as kind/scale: alibi/-")
    args = parser.parse_args()
    torch.set_num_threads(1)
    capability = os.environ.get("ATEN_CPU_CAPABILITY")  # "default" is the scalar code
    numerics = {None: "machine default", "default": "scalar"}.get(capability, capability)
    pd.set_option("display.width", 200)
    if "cost" in args.parts:
        table = cost()
        print(f"cost ({numerics}):\n{table.round(4)}\nworst: {table.agg(['min', 'max']).round(4)}")
    if "shapes" in args.parts:
        table = shapes(args.seeds)
        print(f"shapes ({numerics}):\n{table.round(3)}")
        print(table.groupby("window")["mse / oracle"].agg(["min", "max"]).round(3))
    if "retrieval" in args.parts:
        table = retrieval(args.seeds, args.workers, args.runs)
        print(f"retrieval ({numerics}):\n{table.round(3)}")
        spread = table.drop(columns="seed").groupby(["positions", "scale"], dropna=False)
        print(spread.agg(["min", "median", "max"]).round(3))
        if args.csv:
            table = table.fillna({"scale": "-"}).round(4).assign(
                numerics=numerics, machine=machine_label("cpu", args.workers),
                command="python scripts/margins_long.py " + " ".join(sys.argv[1:]),
            )  # fmt: skip
            table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
