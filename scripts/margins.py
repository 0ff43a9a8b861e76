"""A chapter's asserted claims, measured over seeds: the margins behind its thresholds.

    python scripts/margins.py CHAPTER [--part PART] [--seeds N] [--first-seed S]
        [--workers W] [--out CSV] [the chapter's own options]

CHAPTER is ``encoder`` (6), ``reverse`` (7), ``shapes`` (8), ``encoder-decoder`` (9), ``lm``
(10), ``shakespeare`` (12) or ``long`` (13); ``python scripts/margins.py CHAPTER --help``
lists its parts and options. Each run uses one PyTorch thread per process (``--workers``
training processes side by side where a part trains several runs, ``helpers.parallel``) and
prints every quantity's min, median and max over the seeds; ``--out`` also writes the table,
one row per run, with the ``numerics`` (``machine default``, or ``scalar`` under
``ATEN_CPU_CAPABILITY=default``), the ``machine`` and the ``command`` that produced it. The
recipes are the chapters' (the same helpers, configurations and data); only the seed
(initialization and batch order) changes.

Run it under each numerics configuration of `make test-portability` (for example `env
ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 python
scripts/margins.py lm`) and take the worst value of each quantity over seeds and
configurations: a threshold in a chapter must sit clear of it (CONTRIBUTING.md, "Numerics").
`make margins CHAPTER=shapes ARGS="--part overfit --seeds 3"` runs it with the project's Python.

Files written before release 0.6.0 name the per-chapter scripts this one replaced,
``scripts/margins_<chapter>.py``, whose options carry over under ``scripts/margins.py
<chapter>`` (long's ``--parts`` and ``--csv`` are now ``--part`` and ``--out``; lm's seed list
is ``--seeds``/``--first-seed``, its ``--quick`` is ``--part quick``).

Chapter 6, encoder (``helpers.tasks.warmup.train_stack``: 12 blocks, Adam at a constant 0.005
after an optional 100-step linear warm-up, 300 steps)::

    python scripts/margins.py encoder --seeds 5 --out helpers/tasks/warmup_runs.csv

One row per run: the norm's place, the warm-up, the seed, the learning rate, the final
training loss and the test accuracy (``helpers.tasks.warmup.shipped_runs``; the chapter
asserts that its live runs fall among them). The shipped rows were written on the book's
Intel machine by ``scripts/warmup_runs.py``, the script this part replaced (same runs, same
options). Post-LN training is sensitive to float bits: on an AMD EPYC the same command ends 3
of the 20 runs differently (seed 4's post-LN run with warm-up, at 0.66 in the shipped file,
reaches 1.0 there).

Chapter 7, reverse (``helpers.tasks.reverse``; the chapter's ``BOOK_CONFIG`` and data)::

    python scripts/margins.py reverse --part chapter --seeds 5
    python scripts/margins.py reverse --part schedules --seeds 5 \\
        --out helpers/tasks/reverse_schedules.csv
    python scripts/margins.py reverse --part ablations --seeds 5 \\
        --out helpers/tasks/reverse_ablations.csv

``chapter``: the main run, its bare loop and its ablations' numbers. ``schedules``: every run
of ``SCHEDULE_EXPERIMENT``, cut after ``--max-steps`` steps as in the chapter: the steps to 99%
training accuracy and the accuracy over the last ten steps, one row per run and seed
(``schedule_results`` reads the shipped copy). ``ablations``: ``ABLATIONS`` (no positions,
dropout 0.1 as in source 000, dropout 0.3) next to the plain recipe, one row per run and seed,
with the best token accuracy at the lengths never seen (8, 12, 20 and 24), how many of the 16
queries the mirror head still routes to key 15 - t at lengths 20 and 24, and the accuracy with
attention dropout 0.3 switched on in the trained model (``ablation_results``).

Chapter 8, shapes (``helpers.tasks.shapes.train_shapes_model``, the chapter's epochs)::

    python scripts/margins.py shapes --seeds 5 --lstm-seeds 5 --epochs 3 --workers 1 \\
        --out helpers/tasks/shapes_seeds.csv
    python scripts/margins.py shapes --part overfit --seeds 3 \\
        --out helpers/tasks/shapes_overfit.csv

``seeds``: every model on every seed (the bidirectional LSTM on ``--lstm-seeds``), one row per
seed: each model's test MSE, the ratios and attention enrichments the chapter asserts, the
sanity check's final / first loss (``seed_results``). ``overfit``: source 004's single-batch
check as its code states it (Adam at 1e-3 for 5,000 steps on the first 20 training sequences,
the loss logged every 1,000) on the three proper models, one row per model, seed and logged
step (``overfit_results``).

Chapter 9, encoder-decoder (``helpers.tasks.corners`` and ``helpers.tasks.sorting``)::

    OMP_NUM_THREADS=1 python scripts/margins.py encoder-decoder --seeds 5 \\
        --out helpers/tasks/encoder_decoder_seeds.csv

One row per seed (``helpers.tasks.sorting.seed_results``; the chapter asserts that its own run
falls inside). Measured on the book's 2-core machine, seeds 0-4, default numerics, one thread
per run (the shipped file); the chapter's own runs are checked under scalar numerics too.

    quantity                              min      max      chapter's threshold
    corner test MSE (teacher forced)      0.0133   0.0147   < 0.025
    corner MSE on training points         0.0092   0.0108
    test MSE / training-points MSE        1.35     1.56     > 1.2
    corner free-running MSE               0.0128   0.0145   < 0.025
    free running - teacher forced         -0.0010  -0.0001  |gap| < 0.005
    plain (no residual, no norm) MSE      0.083    0.370    > 3 x the test MSE
    cross-attention focus                 0.570    0.869    min in (0.55, 0.6), max > 0.8
    reflection rule MSE (no parameters)   0.0101   0.0101   within 0.001 of 0.01
    model - rule MSE                      0.0032   0.0045   > 0.002
    follows the rule (p2 random)          0.760    0.896
    rule, point 2 adjacent                1.000    1.000    > 0.9 (untrained: ~0.15)
    rule, same + opposite                 1.03     1.60     each seed > 1.3 or < 1.15, both
                                                            kinds (point 2 alone: <= 1;
                                                            the rule: 2)
    sorting, teacher-forced accuracy      0.9965   1.0000
    sorting, generated accuracy           0.9965   1.0000   > 0.97
    full budget: token tf - generated     0.0000   0.0002   < 0.005
    full budget: tokens after a mistake   0        18       < 50
    full budget: |beam-4 - greedy|        0.0000   0.0005   < 0.005
    full budget: ECE, hard / smoothed     0.005-0.011 / 0.095-0.098   rise > 0.05
    permutation hits (best head)          0.930    0.999    > 0.8 (chance: 1/8)

The short budget (one epoch, 78 steps; 1,000 test sequences), hard targets (the chapter
asserts these) and label smoothing 0.1, per seed. Generated tokens are scored up to the
model's own end token against the sorted continuation of its own prefix
(``helpers.tasks.sorting.next_to_write``); ``after``: the tokens after the first mistake:

    quantity (hard / smoothed)            min            max            threshold (hard)
    after the mistake, generated          0.740 / 0.722  0.832 / 0.826  > 0.6 (untrained: 0)
    after it, tf - generated              0.063 / 0.063  0.138 / 0.143  in (0.04, 0.3)
    after it, scored by position          0.163 / 0.165  0.215 / 0.210  < 0.4
    loss after it, generated / tf         1.27 / 1.18    1.50 / 1.38    > 1.15 (untrained: 0.8)
    token accuracy, tf - generated        0.010 / 0.013  0.032 / 0.031  > 0

and, over the ten runs:

    greedy - beam-4 sequence accuracy     0.023    0.058    > 0.01 (full budget: ~0)
    beam_short - greedy_short             0.079    0.158    > 0
    normalized beam - beam                0.022    0.065    > 0
    normalized beam - greedy              -0.013   0.037    |diff| < 0.06
    beam at least as likely as greedy     1.000    1.000    > 0.99 of the sequences
    ECE smoothed - ECE hard               0.061    0.073    > 0.02
    confidence - accuracy (hard)          -0.108   -0.088   < 0
    token accuracy, smoothed - hard       -0.022   0.005    |diff| < 0.05

The least room: the cross-attention focus (0.570 on seed 4 against 0.55) and the two-case
sum of seed 3 (1.06 against 1.15).

Chapter 10, lm (``helpers.tasks.brackets``)::

    OMP_NUM_THREADS=1 python scripts/margins.py lm --seeds 4
    python scripts/margins.py lm --part quick --seeds 5

``all``: the chapter's recipe (data, model, training, sampling, the n-gram baseline, the
overfitting run), one row per seed: the validation loss and how far it is above the language's
floor (the generator's own loss on the same strings, the exact entropy rate, and the
generator's loss knowing how rows are packed), the validity of samples at temperatures 1, 0.7
and 1.5 and the share that are valid and not in the training set, beside the same share for
the generator's own strings; the valid samples' mean length and share longer than 32
characters (beside the generator's mean length); the closing-bracket accuracy, the baseline's
validity and accuracy, and the overfitting run's validation-loss rise and final gap.
``quick`` stops after the samples (no n-gram baseline, no overfitting run). The margins
measured (seeds 0-3 default numerics, 0-2 scalar) sit in comments beside the chapter's asserts.

Chapter 12, shakespeare (``helpers.tasks.shakespeare.train_shakespeare``, the chapter's
``ShakespeareConfig``)::

    python scripts/margins.py shakespeare --workers 3 --out helpers/tasks/shakespeare_runs.csv

``recipe``: the chapter's run on each seed, one row per held-out evaluation (``step``,
``train_loss``, ``val_loss`` in nats per character, and the run's length ``steps``), the last
with ``known_words``, the share of known words in the chapter's samples of the trained model;
``--steps`` stretches the schedule to another length. ``shipped_runs`` reads the shipped file;
the chapter asserts that every seed ends at 1.60 or below and that its own run falls among
them. The weights that ship with the book come from
``scripts/train_shakespeare_weights.py``.

Chapter 13, long (``helpers.efficient``, ``helpers.gpt``, ``helpers.tasks.retrieval``)::

    python scripts/margins.py long --part cost
    python scripts/margins.py long --part shapes --seeds 3
    python scripts/margins.py long --part retrieval --seeds 5 --workers 1 \\
        --out helpers/tasks/retrieval_seeds.csv
    env ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 \\
        python scripts/margins.py long --part retrieval --seeds 1 --workers 1 --runs alibi/- \\
        --out retrieval_scalar.csv  # its row is appended to the shipped file

``cost``: the memory ratio tiled / naive and the time ratio naive / fused at T = 4096, and the
speed-up of generation with a cache (timings: repeated three times, not seeded). ``shapes``:
chapter 8's attention model with a small and a full window, test MSE / local oracle.
``retrieval``: accuracy at 1, 2 and 4 times the training length for each kind of position, and
for sinusoidal positions with the two fixes of their scale (``train_retrieval(scale=)``;
``--runs`` keeps some of them), one row per run (``helpers.tasks.retrieval.seed_results``).
The margins measured sit in comments beside the chapter's asserts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from helpers.efficient import (
    kernel_costs,
    naive_attention,
    tiled_attention,
    tokens_per_second,
)
from helpers.gpt import GPT, GPTConfig
from helpers.parallel import machine_label, run_in_processes
from helpers.tasks.brackets import (
    BracketConfig,
    NGramModel,
    closing_accuracy,
    entropy_rate,
    generator_loss,
    gpt_probabilities,
    make_rows,
    make_strings,
    overfitting_run,
    packed_generator_loss,
    per_token_loss,
    sample_statistics,
    sample_strings,
    train_brackets,
    validity_rate,
)
from helpers.tasks.corners import (
    CornerConfig,
    cross_attention_focus,
    follows_the_rule,
    follows_the_rule_by_case,
    free_running_mse,
    make_corner_sequences,
    reflection_rule,
    teacher_forcing_split,
    train_corners,
)
from helpers.tasks.retrieval import RetrievalConfig, train_retrieval
from helpers.tasks.reverse import (
    ABLATIONS,
    BOOK_CONFIG,
    SCHEDULE_EXPERIMENT,
    attention_dropout_accuracy,
    bag_oracle_accuracy,
    bare_loop,
    final_train_accuracy,
    length_accuracies,
    make_reverse_dataset,
    mirror_routing,
    steps_to_accuracy,
    train_and_test,
    train_reverse,
    whole_sequence_accuracy,
)
from helpers.tasks.shakespeare import (
    CharTokenizer,
    ShakespeareConfig,
    known_word_fraction,
    load_text,
    split_text,
    train_shakespeare,
    words,
)
from helpers.tasks.shapes import (
    SHAPES_MODELS,
    attention_enrichment,
    local_oracle_mse,
    make_shapes_dataset,
    overfit_curve,
    standardize,
    train_shapes_model,
)
from helpers.tasks.sorting import (
    SortingConfig,
    calibration,
    exposure_bias,
    generated_accuracy,
    make_sorting_dataset,
    permutation_hits,
    train_and_measure,
    train_sorting,
)
from helpers.tasks.sorting import sequence_accuracy as sorting_accuracy
from helpers.tasks.warmup import train_stack

# ---------------------------------------------------------------------------------------------
# Chapter 7: reverse


def reverse_data():
    """The chapter's training, validation and test sets."""
    c = BOOK_CONFIG
    sizes = ((c.num_train, 0), (1_000, 1), (10_000, 2))
    return [
        make_reverse_dataset(
            n, c.seq_len, c.num_classes, torch.Generator().manual_seed(s)
        )
        for n, s in sizes
    ]


OTHER_LENGTHS = (8, 12, 20, 24)  # the chapter's lengths never seen in training


def best_other_length_accuracy(model) -> float:
    """The best token accuracy at the chapter's lengths never seen in training."""
    return max(length_accuracies(model, OTHER_LENGTHS).values())


def reverse_chapter(args, seeds) -> pd.DataFrame:
    """The chapter's main run, its bare loop and its ablations' numbers: one row per seed."""
    train_set, val_set, test_set = reverse_data()
    test_loader = DataLoader(test_set, batch_size=2000)
    inputs, targets = test_set.tensors
    rows = []
    for seed in seeds:
        config = BOOK_CONFIG.replace(seed=seed)
        losses, bare_accuracy = bare_loop(config, train_set, val_set)
        row = {
            "seed": seed,
            "bare first loss": losses[0],
            "bare val accuracy": bare_accuracy,
        }
        model, history, test = train_and_test(config, train_set, test_loader)
        logged = history.set_index("step")
        _, _, mass, _ = mirror_routing(model, inputs[:500], config.seq_len)
        row |= {
            "test accuracy": test["accuracy"],
            "test sequence accuracy": whole_sequence_accuracy(
                model, inputs, targets
            ),
            "loss@10": logged["train_loss"][10],
            "loss@100": logged["train_loss"][100],
            "accuracy@10": logged["train_accuracy"][10],
            "accuracy@30": logged["train_accuracy"][30],
            "steps to 99%": steps_to_accuracy(history),
            "max anti-diagonal mass": mass.max().item(),
            "attention-dropout accuracy": attention_dropout_accuracy(
                model, inputs, targets, 0.3
            ),
            "best other-length accuracy": best_other_length_accuracy(model),
        }
        _, _, blind = train_and_test(
            config.replace(positions="none"), train_set, test_loader
        )
        row["blind - oracle"] = blind["accuracy"] - bag_oracle_accuracy(
            inputs, config.num_classes
        )
        dropout_model, dropout_history, dropout = train_and_test(
            config.replace(dropout=0.3), train_set, test_loader
        )
        row["dropout train accuracy"] = final_train_accuracy(dropout_history)
        row["dropout test accuracy"] = dropout["accuracy"]
        row["plain - dropout test accuracy"] = (
            test["accuracy"] - dropout["accuracy"]
        )
        row["dropout sequence accuracy"] = whole_sequence_accuracy(
            dropout_model, inputs, targets
        )
        row["plain - dropout sequence accuracy"] = (
            row["test sequence accuracy"] - row["dropout sequence accuracy"]
        )
        rows.append(row)
        print(pd.Series(row).round(4).to_dict(), flush=True)
    return pd.DataFrame(rows)


def reverse_schedules(args, seeds) -> pd.DataFrame:
    """Every run of the schedule experiment, cut after ``--max-steps``: one row per run and seed."""
    train_set = reverse_data()[0]
    rows = []
    for seed in seeds:
        for name, changes in SCHEDULE_EXPERIMENT.items():
            config = BOOK_CONFIG.replace(seed=seed, **changes)
            row = {"run": name, "seed": seed}
            try:
                _, history = train_reverse(
                    config, train_set, max_steps=args.max_steps
                )
            except (
                FloatingPointError
            ):  # a diverged run: fit stops on a non-finite loss
                rows.append(row | {"steps to 99%": None, "final": float("nan")})
                continue
            accuracies = history.set_index("step")["train_accuracy"]
            row["steps to 99%"] = steps_to_accuracy(history)
            row["accuracy@100"] = accuracies[100]
            row["final"] = accuracies.iloc[-1]
            rows.append(row)
            print(row, flush=True)
    return pd.DataFrame(rows).round(6)


def reverse_ablations(args, seeds) -> pd.DataFrame:
    """The plain recipe and every ablation of ``ABLATIONS``: one row per run and seed."""
    train_set, _, test_set = reverse_data()
    inputs, targets = test_set.tensors
    test_loader = DataLoader(test_set, batch_size=2000)
    rows = []
    for seed in seeds:
        for name, changes in ABLATIONS.items():
            config = BOOK_CONFIG.replace(seed=seed, **changes)
            model, history, test = train_and_test(
                config, train_set, test_loader
            )
            # the chapter's routing check: the mirror head still reads key 15 - t at 20, 24
            _, _, mass, reads = mirror_routing(
                model, inputs[:500], config.seq_len
            )
            routing = {
                f"mirror reads at {length}": reads(
                    make_reverse_dataset(
                        500,
                        length,
                        config.num_classes,
                        torch.Generator().manual_seed(3),
                    ).tensors[0]
                )
                for length in (20, 24)
            }
            train_accuracy = history["train_accuracy"]
            row = {
                "run": name,
                "seed": seed,
                "train accuracy": final_train_accuracy(history),  # dropout on
                "train accuracy std": train_accuracy.tail(
                    10
                ).std(),  # noise of the curve
                "test accuracy": test["accuracy"],
                "test sequence accuracy": whole_sequence_accuracy(
                    model, inputs, targets
                ),
                "bag oracle": bag_oracle_accuracy(inputs, config.num_classes),
                "best other-length accuracy": best_other_length_accuracy(model),
                "max anti-diagonal mass": mass.max().item(),
                **routing,
                "attention-dropout 0.3 accuracy": attention_dropout_accuracy(
                    model, inputs, targets, 0.3
                ),
            }
            rows.append(row)
            print(row, flush=True)
    return pd.DataFrame(rows).round(6)


# ---------------------------------------------------------------------------------------------
# Chapter 8: shapes (and chapter 13's shapes part)


def shapes_data(num_train: int = 20_000):
    """The chapter's sets, standardized by the training set's statistics.

    Returns ``(train, val, test, test_data, oracle, copy)``: three ``TensorDataset``, the raw
    test set, and the local oracle's and the copy-the-input rule's test MSE on the same scale.
    """
    sizes_and_seeds = ((num_train, 1), (1000, 2), (1000, 3))
    train, val, test = (
        make_shapes_dataset(n, seed=s) for n, s in sizes_and_seeds
    )
    sets, std = standardize(train, train, val, test)
    oracle = local_oracle_mse(test, std)
    copy = (((test.inputs - test.targets) / std) ** 2).mean().item()
    return *sets, test, oracle, copy


def overfit_ratio(name, seed, train_set, steps=200) -> float:
    """The chapter's sanity check: the last / the first of ``overfit_curve``'s losses."""
    curve = list(overfit_curve(name, seed, train_set, steps).values())
    return curve[-1] / curve[0]


SOURCE_OVERFIT = {"steps": 5001, "lr": 1e-3, "log_every": 1000}
"""Source 004's single-batch check: ``for epoch in range(5001)`` with Adam at lr 1e-3."""

PROPER_MODELS = ("CNN", "CNN + attention", "bidirectional LSTM")


def shapes_seeds(args, seeds) -> pd.DataFrame:
    """Every model on every seed: one row per seed."""
    train_set, val_set, test_set, test_data, oracle, copy = shapes_data()
    lstm_seeds = range(args.first_seed, args.first_seed + args.lstm_seeds)
    jobs = [dict(name="bidirectional LSTM", seed=s) for s in lstm_seeds]
    jobs += [
        dict(name=n, seed=s) for s in seeds for n in ("CNN + attention", "CNN")
    ]
    jobs += [dict(name="batch-axis LSTM", seed=s) for s in seeds]
    trained = run_in_processes(train_shapes_model, jobs, workers=args.workers,
                               train_set=train_set, val_set=val_set, test_set=test_set,
                               epochs=args.epochs)  # fmt: skip
    results = {
        (job["name"], job["seed"]): out
        for job, out in zip(jobs, trained, strict=True)
    }
    print(f"oracle {oracle:.4f} copy {copy:.4f}")
    rows = []
    for seed in seeds:
        row = {"seed": seed}
        for name in PROPER_MODELS:
            row[f"overfit {name}"] = overfit_ratio(name, seed, train_set)
        for name in SHAPES_MODELS:
            if (name, seed) in results:
                row[f"mse {name}"] = results[name, seed][2]
        row["ratio CNN / attention"] = (
            row["mse CNN"] / row["mse CNN + attention"]
        )
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
    return pd.DataFrame(rows)


def shapes_overfit(args, seeds) -> pd.DataFrame:
    """Source 004's single-batch check on the book's models: one row per model, seed and step."""
    train_set = shapes_data()[0]
    jobs = [dict(name=n, seed=s) for s in seeds for n in PROPER_MODELS]
    curves = run_in_processes(
        overfit_curve,
        jobs,
        workers=args.workers,
        train_set=train_set,
        **SOURCE_OVERFIT,
    )
    return pd.DataFrame(
        {"model": job["name"], "seed": job["seed"], "step": step, "loss": loss}
        for job, curve in zip(jobs, curves, strict=True)
        for step, loss in curve.items()
    )


# ---------------------------------------------------------------------------------------------
# Chapter 9: encoder-decoder

WEAK_EPOCHS = 1  # the chapter's short budget for exposure bias, beam search, label smoothing


def corner_data():
    """The chapter's split: source 001's sizes and seeds, 1,000 held-out test sequences."""
    train, _ = make_corner_sequences(128, torch.Generator().manual_seed(13))
    test, _ = make_corner_sequences(1000, torch.Generator().manual_seed(19))
    return train, test


def sorting_data():
    config = SortingConfig()
    train = make_sorting_dataset(
        config.num_train, config.max_len, torch.Generator().manual_seed(1)
    )
    test = make_sorting_dataset(
        2000, config.max_len, torch.Generator().manual_seed(2)
    )
    distinct = make_sorting_dataset(
        500,
        config.max_len,
        torch.Generator().manual_seed(3),
        min_len=config.max_len,
        distinct=True,
    )
    return train, test, distinct


def encoder_decoder_seed(seed, corners, sorting) -> dict:
    """Both tasks of chapter 9 for one seed: one row."""
    train, test = corners
    model, _ = train_corners(CornerConfig(seed=seed), train, test)
    train_mse, _ = free_running_mse(model, train)
    test_mse, free_mse = free_running_mse(model, test)
    plain, _ = train_corners(
        CornerConfig(seed=seed, residual=False), train, test
    )
    split = teacher_forcing_split(test).tensors
    row = {
        "seed": seed,
        "corner test mse": test_mse,
        "corner mse on training points": train_mse,
        "test / train mse": test_mse / train_mse,
        "corner free-running mse": free_mse,
        "free-running - teacher-forced": free_mse - test_mse,
        "plain (source 001) test mse": free_running_mse(plain, test)[0],
        "cross-attention focus": cross_attention_focus(model, test),
        "corner rule mse": F.mse_loss(
            reflection_rule(split[0]), split[2]
        ).item(),
        "follows the rule": follows_the_rule(
            model, test, torch.Generator().manual_seed(5)
        ),
    }
    by_case = follows_the_rule_by_case(
        model, test, torch.Generator().manual_seed(5)
    )
    row |= {f"rule, point 2 {case}": hits for case, hits in by_case.items()}
    row["rule, same + opposite"] = by_case["same"] + by_case["opposite"]
    row["model - rule mse"] = test_mse - row["corner rule mse"]
    config = SortingConfig(seed=seed)
    sort_train, sort_test, distinct = sorting
    model, _ = train_sorting(config, sort_train)
    source, decoder_input, target = sort_test.tensors
    with torch.no_grad():
        teacher_forced = sorting_accuracy(
            model(source, decoder_input), target
        ).item()
    generated = generated_accuracy(model, sort_test)
    full = exposure_bias(model, sort_test)
    row |= {
        "full: token tf - generated": full["token_tf"]
        - full["token_generated"],
        "full: positions after a mistake": full["num_after"],
        "full: beam-4 accuracy": generated_accuracy(model, sort_test, 4),
        "full: ece": calibration(model(source, decoder_input).detach(), target)[
            0
        ],
        "sorting teacher-forced accuracy": teacher_forced,
        "sorting generated accuracy": generated,
        "sorting gap": teacher_forced - generated,
        "permutation hits": permutation_hits(model, distinct).max().item(),
    }
    study_test = make_sorting_dataset(
        1000, config.max_len, torch.Generator().manual_seed(4)
    )
    for epsilon in (0.0, 0.1):
        for label, epochs in (("weak", WEAK_EPOCHS), ("full", config.epochs)):
            if label == "full" and epsilon == 0.0:
                continue  # measured above on the same model
            run_config = SortingConfig(
                seed=seed, epochs=epochs, label_smoothing=epsilon
            )
            result = train_and_measure(run_config, sort_train, study_test)
            result.pop("reliability")
            row |= {
                f"{label} ls={epsilon}: {key}": value
                for key, value in result.items()
            }
    return row


def encoder_decoder_seeds(args, seeds) -> pd.DataFrame:
    """Both tasks on every seed, seeds side by side: one row per seed."""
    jobs = [{"seed": seed} for seed in seeds]
    return pd.DataFrame(
        run_in_processes(
            encoder_decoder_seed,
            jobs,
            workers=args.workers,
            corners=corner_data(),
            sorting=sorting_data(),
        )  # fmt: skip
    )


# ---------------------------------------------------------------------------------------------
# Chapter 10: lm

NUM_TRAIN, NUM_VAL, NUM_SAMPLES = 10_000, 1_000, 1_000
ORDERS = range(2, 11)


def lm_seed(seed: int, quick: bool = False) -> dict:
    """The chapter's recipe for one seed; ``quick`` stops after the samples."""
    seeded = lambda offset: torch.Generator().manual_seed(offset)  # noqa: E731
    train, val = (
        make_strings(NUM_TRAIN, seeded(1)),
        make_strings(NUM_VAL, seeded(2)),
    )
    config = BracketConfig(seed=seed)
    train_rows = make_rows(train, config.model.context_length)
    val_rows = make_rows(val, config.model.context_length)
    start = time.perf_counter()
    model, _ = train_brackets(config, train_rows, val_rows)
    seconds = time.perf_counter() - start
    row = {
        "seed": seed,
        "seconds": round(seconds),
        "val_loss": per_token_loss(model, val_rows),
    }
    row["above_floor"] = row["val_loss"] - generator_loss(
        val
    )  # the same strings' floor
    row["above_rate"] = row["val_loss"] - entropy_rate()
    row["above_packed"] = row["val_loss"] - packed_generator_loss(
        val, train, 64
    )
    known = set(train)
    for temperature in (1.0, 0.7, 1.5):
        samples = sample_strings(
            model, NUM_SAMPLES, seeded(3 + seed), temperature
        )
        stats = sample_statistics(samples, known)
        row[f"valid_T{temperature}"] = stats["valid"]
        row[f"valid_new_T{temperature}"] = stats["valid and new"]
        if temperature == 1.0:
            row["new"] = stats["new"]
            row["valid_mean_len"] = stats["valid mean length"]
            row["valid_over_32"] = stats["valid over 32"]
    # the generator's own baseline
    drawn = sample_statistics(
        make_strings(NUM_SAMPLES, seeded(3 + seed)), known
    )
    row["generator_new"] = drawn["new"]
    row["generator_mean_len"] = drawn["mean length"]
    if quick:
        return row
    probabilities = gpt_probabilities(model, val)
    row["closing"] = closing_accuracy(lambda prefix: probabilities[prefix], val)
    losses = {n: NGramModel(n).fit(train).loss(val) for n in ORDERS}
    best = min(losses, key=losses.get)
    ngram = NGramModel(best).fit(train)
    row |= {"ngram_n": best, "ngram_loss": losses[best]}
    row["ngram_valid"] = validity_rate(
        ngram.sample(NUM_SAMPLES, seeded(3 + seed), 64)
    )
    row["ngram_closing"] = closing_accuracy(ngram.probabilities, val)
    far = (best, 10**6)  # the opening bracket out of the n-gram model's sight
    row["closing_far"] = closing_accuracy(
        lambda prefix: probabilities[prefix], val, far
    )
    row["ngram_closing_far"] = closing_accuracy(ngram.probabilities, val, far)
    row["ngram_closing_near"] = closing_accuracy(
        ngram.probabilities, val, (1, best - 1)
    )
    _, _, overfit = overfitting_run(seed)
    row["overfit_rise"] = overfit["rise"]
    row["overfit_gap"] = overfit["gap"]
    return row


def lm_rows(seeds, quick: bool) -> pd.DataFrame:
    rows = []
    for seed in seeds:
        rows.append(lm_seed(seed, quick))
        print(pd.Series(rows[-1]).round(4).to_dict(), flush=True)
    return pd.DataFrame(rows)


def lm_all(args, seeds) -> pd.DataFrame:
    """Everything above, one row per seed."""
    return lm_rows(seeds, quick=False)


def lm_quick(args, seeds) -> pd.DataFrame:
    """Up to the samples (no n-gram baseline, no overfitting run), one row per seed."""
    return lm_rows(seeds, quick=True)


# ---------------------------------------------------------------------------------------------
# Chapter 13: long

# The chapter's settings (notebooks/13_long_sequences.py): keep them in step.
NUM_HEADS, D_HEAD, T_LONG, BLOCK = 2, 64, 4096, 256
SHAPES_TRAIN, SHAPES_EPOCHS, WINDOWS = 16_000, 1, (3, 100)
KINDS = ("learned", "sinusoidal", "rope", "alibi", "none")
GEN = {
    "vocab": 512,
    "width": 256,
    "layers": 4,
    "heads": 8,
    "prompt": 64,
    "new": 64,
}
RETRIEVAL_RUNS = [(kind, None) for kind in KINDS] + [
    ("sinusoidal", "tokens"),
    ("sinusoidal", "encoding"),
]


def long_cost(args, seeds) -> pd.DataFrame:
    """Memory and time ratios at T = 4096 and the cache's speed-up, three repeats (no seeds)."""
    kernels = {
        "naive": naive_attention,
        "fused": F.scaled_dot_product_attention,
        "tiled": lambda q, k, v: tiled_attention(q, k, v, block_size=BLOCK),
    }
    rows = []
    for repeat in range(3):
        cost = kernel_costs(kernels, [T_LONG], NUM_HEADS, D_HEAD)
        cost = cost.set_index("kernel")
        memory = cost.loc["tiled", "peak MiB"] / cost.loc["naive", "peak MiB"]
        speed = cost.loc["naive", "ms"] / cost.loc["fused", "ms"]
        torch.manual_seed(0)
        config = GPTConfig(vocab_size=GEN["vocab"], context_length=GEN["prompt"] + GEN["new"],
                           d_model=GEN["width"], num_layers=GEN["layers"], num_heads=GEN["heads"],
                           positions="rope")  # fmt: skip
        model = GPT(config).eval()
        prompt = torch.randint(GEN["vocab"], (1, GEN["prompt"]))
        cached = tokens_per_second(model, prompt, GEN["new"])
        recomputed = tokens_per_second(
            model, prompt, GEN["new"], use_cache=False
        )
        rows.append({"repeat": repeat, "tiled/naive memory": memory, "naive/fused time": speed,
                     "cache speed-up": cached / recomputed})  # fmt: skip
    return pd.DataFrame(rows)


def long_shapes(args, seeds) -> pd.DataFrame:
    """Chapter 8's attention model with a small and a full window: one row per window and seed."""
    train, val, test, _, oracle, _ = shapes_data(SHAPES_TRAIN)
    jobs = [dict(window=w, seed=s) for s in seeds for w in WINDOWS]
    trained = run_in_processes(train_shapes_model, jobs, workers=args.workers,
                               name="CNN + attention", epochs=SHAPES_EPOCHS, train_set=train,
                               val_set=val, test_set=test)  # fmt: skip
    return pd.DataFrame([{**job, "mse / oracle": mse / oracle}
                         for job, (_, _, mse) in zip(jobs, trained, strict=True)])  # fmt: skip


def long_retrieval(args, seeds) -> pd.DataFrame:
    """Accuracy at 1, 2 and 4 times the training length: one row per run and seed."""
    runs = [(kind, scale) for kind, scale in RETRIEVAL_RUNS
            if args.runs is None or f"{kind}/{scale or '-'}" in args.runs]  # fmt: skip
    jobs = [
        dict(positions=kind, scale=scale, seed=s)
        for s in seeds
        for kind, scale in runs
    ]
    trained = run_in_processes(train_retrieval, jobs, workers=args.workers,
                               config=RetrievalConfig())  # fmt: skip
    table = pd.DataFrame([{**job, **accuracy}
                          for job, (_, accuracy) in zip(jobs, trained, strict=True)])  # fmt: skip
    return table.fillna({"scale": "-"}).round(4)


# ---------------------------------------------------------------------------------------------
# Chapter 6: encoder


def encoder_warmup(args, seeds) -> pd.DataFrame:
    """The deep stacks, post-LN and pre-LN, with and without warm-up: one row per run."""
    jobs = [
        dict(norm_first=norm_first, warmup_steps=warmup, seed=seed, lr=args.lr)
        for seed in seeds
        for norm_first in (False, True)
        for warmup in (0, 100)
    ]
    results = run_in_processes(train_stack, jobs, workers=args.workers)
    return pd.DataFrame(
        {
            "norm": "pre-LN" if job["norm_first"] else "post-LN",
            "warmup": job["warmup_steps"],
            "seed": job["seed"],
            "lr": job["lr"],
            "final_loss": round(result["losses"][-1], 4),
            "accuracy": round(result["accuracy"], 4),
        }
        for job, result in zip(jobs, results, strict=True)
    )


# ---------------------------------------------------------------------------------------------
# Chapter 12: shakespeare


def shakespeare_run(seed: int, steps: int, evaluations: int) -> pd.DataFrame:
    """The chapter's recipe stretched to ``steps``: a row per held-out evaluation; the last
    also has the share of known words in the chapter's samples (four of 500 characters at
    temperature 1, sampling seed 2)."""
    text = load_text()
    tokenizer = CharTokenizer(text)
    train_text, held_text = split_text(text)
    config = ShakespeareConfig(steps=steps, seed=seed, evaluations=evaluations)
    model, history = train_shakespeare(
        config, tokenizer.encode(train_text), tokenizer.encode(held_text)
    )
    rows = history[history["val_loss"].notna()]
    rows = rows[["step", "train_loss", "val_loss"]].assign(
        steps=steps, seed=seed
    )
    samples = model.generate(
        tokenizer.encode("\n")[None].repeat(4, 1),
        500,
        generator=torch.Generator().manual_seed(2),
    )
    written = "".join(tokenizer.decode(sample) for sample in samples)
    share = known_word_fraction(written, set(words(train_text)))
    return rows.assign(known_words=[None] * (len(rows) - 1) + [share])


def shakespeare_recipe(args, seeds) -> pd.DataFrame:
    """Every seed of the recipe, seeds side by side."""
    runs = run_in_processes(
        shakespeare_run,
        [{"seed": seed} for seed in seeds],
        workers=args.workers,
        steps=args.steps or ShakespeareConfig().steps,
        evaluations=args.evaluations,
    )
    return pd.concat(runs, ignore_index=True).round(4)


# ---------------------------------------------------------------------------------------------
# The command line, shared by every chapter

CHAPTERS = {
    # name: (chapter number, default number of seeds, {part: (function, columns naming a run)})
    "reverse": (
        7,
        5,
        {
            "chapter": (reverse_chapter, []),
            "schedules": (reverse_schedules, ["run"]),
            "ablations": (reverse_ablations, ["run"]),
        },
    ),
    "shapes": (
        8,
        5,
        {
            "seeds": (shapes_seeds, []),
            "overfit": (shapes_overfit, ["model", "step"]),
        },
    ),
    "encoder": (6, 5, {"warmup": (encoder_warmup, ["norm", "warmup"])}),
    "encoder-decoder": (9, 5, {"seeds": (encoder_decoder_seeds, [])}),
    "lm": (10, 3, {"all": (lm_all, []), "quick": (lm_quick, [])}),
    "long": (
        13,
        3,
        {
            "cost": (long_cost, []),
            "shapes": (long_shapes, ["window"]),
            "retrieval": (long_retrieval, ["positions", "scale"]),
        },
    ),
    "shakespeare": (12, 3, {"recipe": (shakespeare_recipe, ["step"])}),
}


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--seeds", type=int, help="how many seeds (default: the chapter's)"
    )
    common.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed, ..."
    )
    common.add_argument(
        "--workers", type=int, default=2, help="training processes at once"
    )
    common.add_argument(
        "--out", help="write the table here (CSV, one row per run)"
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chapters = parser.add_subparsers(
        dest="chapter", required=True, metavar="CHAPTER"
    )
    for name, (number, seeds, parts) in CHAPTERS.items():
        sub = chapters.add_parser(
            name,
            aliases=[str(number)],
            parents=[common],
            help=f"chapter {number}",
            description=f"Chapter {number}'s margins; {seeds} seeds unless --seeds says.",
        )
        first = next(iter(parts))
        sub.add_argument(
            "--part",
            choices=list(parts),
            default=first,
            help=f"default: {first}",
        )
        sub.set_defaults(chapter=name)  # the name, also when given the number
        if name == "reverse":
            sub.add_argument(
                "--max-steps",
                type=int,
                default=250,
                help="schedules: steps per run",
            )
        if name == "shapes":
            sub.add_argument(
                "--lstm-seeds", type=int, default=5, help="seeds of the LSTM"
            )
            sub.add_argument(
                "--epochs", type=int, default=3, help="the chapter's epochs"
            )
        if name == "encoder":
            sub.add_argument(
                "--lr", type=float, default=0.005, help="the peak learning rate"
            )
        if name == "shakespeare":
            sub.add_argument(
                "--steps",
                type=int,
                help="default: the chapter's (the schedule stretched)",
            )
            sub.add_argument(
                "--evaluations",
                type=int,
                default=5,
                help="held-out losses per run",
            )
        if name == "long":
            sub.add_argument(
                "--runs",
                nargs="+",
                help="retrieval runs only, as kind/scale: alibi/-",
            )
    return parser


def numerics_label() -> str:
    """``scalar`` under ``ATEN_CPU_CAPABILITY=default``, else the capability or the default."""
    capability = os.environ.get("ATEN_CPU_CAPABILITY")
    return {
        None: "machine default",
        "": "machine default",
        "default": "scalar",
    }.get(capability, capability)


def labelled(
    table: pd.DataFrame, argv: list[str], workers: int
) -> pd.DataFrame:
    """``table`` with the numerics, machine and command that produced it as columns."""
    return table.assign(
        numerics=numerics_label(),
        machine=machine_label("cpu", workers),
        command=" ".join(["python scripts/margins.py", *argv]),
    )


def summary(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Min, median and max of every measured quantity (per run, where rows name one)."""
    measured = table.drop(columns=[*keys, "seed", "repeat"], errors="ignore")
    measured = measured.select_dtypes("number")
    stats = ["min", "median", "max"]
    if not keys:
        return measured.agg(stats).T
    return measured.groupby(
        [table[key] for key in keys], sort=False, dropna=False
    ).agg(stats)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)  # one thread per run, as the chapters do
    number, default_seeds, parts = CHAPTERS[args.chapter]
    measure, keys = parts[args.part]
    num_seeds = default_seeds if args.seeds is None else args.seeds
    seeds = range(args.first_seed, args.first_seed + num_seeds)
    print(
        f"chapter {number}, {args.part}: {numerics_label()} numerics",
        flush=True,
    )
    table = measure(args, seeds)
    pd.set_option("display.width", 200)
    spread = summary(table, keys).round(4)
    print(
        (spread.T if spread.shape[1] > spread.shape[0] else spread).to_string()
    )  # the long way
    if args.out:
        labelled(table, argv, args.workers).to_csv(args.out, index=False)
    return table


if __name__ == "__main__":
    main()
