"""Margins of chapter 10's training claims, over seeds and numerics configurations.

Runs the chapter's recipe (data, model, training, sampling, the n-gram baseline, the
overfitting run) for several seeds and prints one row per seed: the validation loss and how
far it is above the language's floor (the generator's own loss on the same strings, the
exact entropy rate, and the generator's loss knowing how rows are packed), the validity of
samples at temperatures 1, 0.7 and 1.5 and the share that are valid and not in the training
set, beside the same share for the generator's own strings; the valid samples' mean length
and share longer than 32 characters (beside the generator's mean length); the
closing-bracket accuracy, the baseline's validity and accuracy, and the overfitting run's
validation-loss rise and final gap. ``--quick`` stops after the samples (no n-gram baseline,
no overfitting run). Run it once under the default numerics and once under the scalar ones
the test command uses::

    OMP_NUM_THREADS=1 python scripts/margins_lm.py 0 1 2 3
    ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 \\
        OMP_NUM_THREADS=1 python scripts/margins_lm.py 0 1 2 3

The thresholds asserted in ``notebooks/10_decoder_only_lm`` sit below the worst value seen.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from helpers.tasks.brackets import (
    BracketConfig,
    NGramModel,
    closing_accuracy,
    entropy_rate,
    generator_loss,
    gpt_probabilities,
    is_balanced,
    make_rows,
    make_strings,
    packed_generator_loss,
    per_token_loss,
    sample_strings,
    train_brackets,
    validity_rate,
)

NUM_TRAIN, NUM_VAL, NUM_SAMPLES = 10_000, 1_000, 1_000
ORDERS = range(2, 11)
QUICK = "--quick" in sys.argv  # skip the n-gram baseline and the overfitting run
OVERFIT = dict(batch_size=16, epochs=60, lr=3e-3, weight_decay=0.0, warmup_steps=20)


def one_seed(seed: int) -> dict:
    seeded = lambda offset: torch.Generator().manual_seed(offset)  # noqa: E731
    train, val = make_strings(NUM_TRAIN, seeded(1)), make_strings(NUM_VAL, seeded(2))
    config = BracketConfig(seed=seed)
    train_rows = make_rows(train, config.context_length)
    val_rows = make_rows(val, config.context_length)
    start = time.perf_counter()
    model, _ = train_brackets(config, train_rows, val_rows)
    seconds = time.perf_counter() - start
    row = {"seed": seed, "seconds": round(seconds), "val_loss": per_token_loss(model, val_rows)}
    row["above_floor"] = row["val_loss"] - generator_loss(val)  # the same strings' floor
    row["above_rate"] = row["val_loss"] - entropy_rate()
    row["above_packed"] = row["val_loss"] - packed_generator_loss(val, train, 64)
    known = set(train)
    for temperature in (1.0, 0.7, 1.5):
        samples = sample_strings(model, NUM_SAMPLES, seeded(3 + seed), temperature)
        row[f"valid_T{temperature}"] = validity_rate(samples)
        new = [s is not None and is_balanced(s) and s not in known for s in samples]
        row[f"valid_new_T{temperature}"] = sum(new) / NUM_SAMPLES
        if temperature == 1.0:
            row["new"] = sum(s is not None and s not in known for s in samples) / NUM_SAMPLES
            valid = [s for s in samples if s is not None and is_balanced(s)]
            row["valid_mean_len"] = sum(map(len, valid)) / len(valid)
            row["valid_over_32"] = sum(len(s) > 32 for s in valid) / len(valid)
    drawn = make_strings(NUM_SAMPLES, seeded(3 + seed))  # the generator's own baseline
    row["generator_new"] = sum(s not in known for s in drawn) / NUM_SAMPLES
    row["generator_mean_len"] = sum(map(len, drawn)) / NUM_SAMPLES
    if QUICK:
        return row
    probabilities = gpt_probabilities(model, val)
    row["closing"] = closing_accuracy(lambda prefix: probabilities[prefix], val)
    losses = {n: NGramModel(n).fit(train).loss(val) for n in ORDERS}
    best = min(losses, key=losses.get)
    ngram = NGramModel(best).fit(train)
    row |= {"ngram_n": best, "ngram_loss": losses[best]}
    row["ngram_valid"] = validity_rate(ngram.sample(NUM_SAMPLES, seeded(3 + seed), 64))
    row["ngram_closing"] = closing_accuracy(ngram.probabilities, val)
    far = (best, 10**6)  # the opening bracket out of the n-gram model's sight
    row["closing_far"] = closing_accuracy(lambda prefix: probabilities[prefix], val, far)
    row["ngram_closing_far"] = closing_accuracy(ngram.probabilities, val, far)
    row["ngram_closing_near"] = closing_accuracy(ngram.probabilities, val, (1, best - 1))
    small_train = make_strings(300, seeded(11))
    small_val = make_strings(300, seeded(12))
    _, history = train_brackets(
        BracketConfig(seed=seed, **OVERFIT),
        make_rows(small_train, config.context_length),
        make_rows(small_val, config.context_length),
    )
    val_losses = history["val_loss"].dropna()
    row["overfit_rise"] = val_losses.iloc[-1] - val_losses.min()
    row["overfit_gap"] = val_losses.iloc[-1] - history["train_loss"].iloc[-1]
    return row


def main(seeds: list[int]) -> None:
    torch.set_num_threads(1)
    numerics = "scalar" if os.environ.get("ATEN_CPU_CAPABILITY") == "default" else "default"
    print(f"# {numerics} numerics", flush=True)
    for seed in seeds:
        row = one_seed(seed)
        print(", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in row.items()), flush=True)  # fmt: skip


if __name__ == "__main__":
    main([int(seed) for seed in sys.argv[1:] if seed != "--quick"] or [0, 1, 2])
