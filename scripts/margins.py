"""A chapter's asserted claims, measured over seeds: the margins behind its thresholds.

    python scripts/margins.py CHAPTER [--part PART] [--seeds N] [--first-seed S]
        [--workers W] [--out CSV] [the chapter's own options]

CHAPTER is ``encoder`` (6), ``reverse`` (7), ``shapes`` (8), ``encoder-decoder`` (9), ``lm``
(10), ``shakespeare`` (12), ``long`` (13) or ``digits`` (14); ``python scripts/margins.py
CHAPTER --help`` lists its parts and options. Each run uses one PyTorch thread per process
(``--workers`` training processes side by side where a part trains several runs,
``helpers.parallel``) and prints every quantity's min, median and max over the seeds; ``--out``
also writes the table, one row per run, with the ``numerics`` (``machine default``, or
``scalar`` under ``ATEN_CPU_CAPABILITY=default``), the ``machine`` (the GPU where a part trains
on ``--device cuda``) and the ``command`` that produced it. The recipes are the chapters' (the
same helpers, configurations and data); only the seed (initialization and batch order) changes.

Run it under each numerics configuration of `make test-portability` (for example `env
ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 python
scripts/margins.py lm`) and take the worst value of each quantity over seeds and
configurations: a threshold in a chapter must sit clear of it (CONTRIBUTING.md, "Numerics").
`make margins CHAPTER=shapes ARGS="--part overfit --seeds 3"` runs it with the project's Python.

Files written before release 0.6.0 name the per-chapter scripts this one replaced,
``scripts/margins_<chapter>.py``, whose options carry over under ``scripts/margins.py
<chapter>`` (long's ``--parts`` and ``--csv`` are now ``--part`` and ``--out``; lm's seed list
is ``--seeds``/``--first-seed``, its ``--quick`` is ``--part quick``). The shipped
``digits_seeds.csv``, ``digits_attention.csv`` and ``shapes_full.csv`` record the commands of
``scripts/reproduce_digits.py``, ``scripts/reproduce_digits_attention.py`` and
``scripts/reproduce_shapes.py``, the scripts that ``digits``, ``digits --part attention`` and
``shapes --part full`` replaced (same runs, same options: the commands below rebuild them).

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
    python scripts/margins.py shapes --part full --out helpers/tasks/shapes_full.csv

``seeds``: every model on every seed (the bidirectional LSTM on ``--lstm-seeds``), one row per
seed: each model's test MSE, the ratios and attention enrichments the chapter asserts, the
sanity check's final / first loss (``seed_results``). ``overfit``: source 004's single-batch
check as its code states it (Adam at 1e-3 for 5,000 steps on the first 20 training sequences,
the loss logged every 1,000) on the three proper models, one row per model, seed and logged
step (``overfit_results``).

``full``: chapter 8 at the blog post's scale, outside CI (3 seeds and 50 epochs unless
``--seeds`` and ``--epochs`` say). ``--protocol source`` (the default) is source 004's training
as its code states it: 25,000 sequences (``--num-train``), normalized with their own mean and
standard deviation, split at random 80/20 (fastai's ``RandomSplitter(valid_pct=0.2)``: 20,000
to train on, 5,000 to validate), batches of 128 (``--batch-size``; the last, incomplete
training batch dropped, as fastai's training loader does), 50 epochs at a flat learning rate
of 1e-3 (``--lr``; ``Learner.fit(50, 1e-3)``) with fastai's default optimizer, Adam with
decoupled weight decay 0.01, betas (0.9, 0.99) and eps 1e-5 (here ``torch.optim.AdamW`` with
those values), and the batch-axis LSTM's state cleared before each epoch and each evaluation
(fastai's ``ModelReseter``). ``--protocol book`` is the part's first protocol: plain
``torch.optim.Adam`` on all 25,000 sequences, no validation split. The source states no error
per epoch; the part measures the MSE on the validation split (``source`` only) and on the
book's test set after every epoch, for the book's data (noise-free targets, both kinds with
distinct heights) and models (``--models``, all four unless it says), one row per model, seed
and epoch with the seconds so far (``full_scale_results`` reads the shipped file). On a 2-core
CPU the protocol takes hours, on a GPU (``--workers 1 --device cuda``) minutes. Each run's
rows are saved after every epoch in a ``.partial`` folder beside ``--out`` (which the part
requires); ``--collect`` merges them after an interruption, and the same command run again
skips every run it finished before, so that the CPU protocol can be run in parts, a few runs
per sitting (the command a row records leaves out ``--models`` and ``--collect``, which pick
among the same runs). The shipped file is the whole ``--protocol source`` run (four models,
three seeds, fifty epochs), made in three sittings on a 2-core CPU; its ``seconds`` column
says how long each run trained (on a machine that was not always quiet).

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

Chapter 14, digits (``helpers.tasks.digits.train_digits``, the chapter's recipe and split)::

    python scripts/margins.py digits --out helpers/tasks/digits_seeds.csv
    python scripts/margins.py digits --part attention --out helpers/tasks/digits_attention.csv

``seeds``: the ViT and the CNN over seeds, outside the page's budget, one row per run (test
and training accuracy, training seconds, tokens, parameters;
``helpers.tasks.digits.seed_results`` reads the shipped file), four experiments on every seed:

* ``models``: the ViT (class token, learned positions, patches of 2 pixels) and the CNN on
  the whole training set;
* ``size``: both on the first ``--sizes`` images (50, 100 and 300) of the balanced training
  order, and the ViT with patches of 4 pixels too;
* ``variant``: the ViT with mean pooling, with 2-D sinusoidal positions, with no positions;
* ``patch``: the ViT with patches of 1 and 4 pixels.

With ``--resume``, the rows of ``--out`` that the same command wrote on the same machine are
kept and only the missing runs are trained (a run is deterministic given its seed and machine;
the command a row records leaves out ``--resume``); the file is written whole, in the order of
``digits_jobs``. ``attention``: the chapter's attention readings with the shuffled-label
control; for each seed, three ViTs of the chapter (class token, learned positions, patches of
2 pixels): ``trained``, with the chapter's recipe and split; ``shuffled labels``, trained the
same way on the training labels permuted at random (the control: a claim about what learning
the digits does to attention must not hold for it too); ``untrained``, the trained one's
initialization. Each is read by ``helpers.tasks.digits.attention_readings`` on the test
images, one row per ViT (``helpers.tasks.digits.attention_results`` reads the shipped file).
Both parts train on ``--device`` (a GPU: ``--workers 1 --device cuda``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.analysis import count_parameters
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
from helpers.tasks.digits import (
    attention_readings,
    make_digits_data,
    make_digits_model,
    train_digits,
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
    source_split,
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
from helpers.training import evaluate
from helpers.vit import ViTConfig

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
SEEDS_EPOCHS = 3  # the chapter's, for --part seeds


def shapes_seeds(args, seeds) -> pd.DataFrame:
    """Every model on every seed: one row per seed."""
    train_set, val_set, test_set, test_data, oracle, copy = shapes_data()
    lstm_seeds = range(args.first_seed, args.first_seed + args.lstm_seeds)
    jobs = [dict(name="bidirectional LSTM", seed=s) for s in lstm_seeds]
    jobs += [
        dict(name=n, seed=s) for s in seeds for n in ("CNN + attention", "CNN")
    ]
    jobs += [dict(name="batch-axis LSTM", seed=s) for s in seeds]
    epochs = SEEDS_EPOCHS if args.epochs is None else args.epochs
    trained = run_in_processes(train_shapes_model, jobs, workers=args.workers,
                               train_set=train_set, val_set=val_set, test_set=test_set,
                               epochs=epochs)  # fmt: skip
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
# Chapter 8 at full scale: shapes --part full

FULL_EPOCHS = 50  # the blog post's, for --part full
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


def shapes_full_run(
    name,
    seed,
    protocol,
    train_set,
    valid_set,
    test_set,
    epochs,
    batch_size,
    lr,
    device,
    partial_dir,
    label,
):
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
            dict(
                model=name,
                seed=seed,
                epoch=epoch,
                valid_mse=valid_mse,
                test_mse=test_mse,
                seconds=seconds,
                **label,
            )
        )
        pd.DataFrame(rows).to_csv(partial, index=False)
        print(
            f"{name:20} seed {seed} epoch {epoch:3}: valid {valid_mse:.5f} test {test_mse:.5f}",
            flush=True,
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


def shapes_full_datasets(protocol: str, num_train: int):
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


def shapes_full(args, seeds) -> pd.DataFrame:
    """Every model of ``--models`` on every seed under ``--protocol``: one row per model, seed
    and epoch, each run saved beside ``--out`` as it goes (``--collect`` only merges those)."""
    epochs = FULL_EPOCHS if args.epochs is None else args.epochs
    train_set, valid_set, test_set = shapes_full_datasets(
        args.protocol, args.num_train
    )
    # The slowest run first (one LSTM seed), then every seed of the models the chapter's claim
    # is about, then the LSTMs' other seeds: an interrupted run still has whole seeds of those.
    lstms = [m for m in args.models if "LSTM" in m]
    others = [m for m in args.models if m not in lstms]
    jobs = (
        [dict(name=m, seed=s) for s in seeds[:1] for m in lstms]
        + [dict(name=m, seed=s) for m in reversed(others) for s in seeds]
        + [dict(name=m, seed=s) for s in seeds[1:] for m in lstms]
    )
    label = run_label(args)
    partial_dir = Path(args.out).with_suffix(".partial")
    done = [
        job for job in jobs if run_is_complete(partial_dir, job, epochs, label)
    ]
    for job in done:
        print(
            f"{job['name']} seed {job['seed']}: complete in {partial_dir}, not trained again"
        )
    jobs = [job for job in jobs if job not in done]
    if not args.collect and jobs:
        partial_dir.mkdir(parents=True, exist_ok=True)
        run_in_processes(
            shapes_full_run,
            jobs,
            workers=args.workers,
            protocol=args.protocol,
            train_set=train_set,
            valid_set=valid_set,
            test_set=test_set,
            epochs=epochs,
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
    table = table.sort_values(["model", "seed", "epoch"], ignore_index=True)
    print(
        table.pivot_table(
            index="epoch", columns="model", values="test_mse"
        ).round(5)
    )
    return table


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
# Chapter 14: digits

BASE = ViTConfig()
KEYS = [
    "experiment",
    "model",
    "pool",
    "positions",
    "patch_size",
    "num_train",
    "seed",
]
ATTENTION_KINDS = ("trained", "shuffled labels", "untrained")


def digits_run(
    experiment: str,
    model: str,
    seed: int,
    num_train,
    vit: dict,
    device: str,
    label: dict,
) -> dict:
    """One run of the chapter's recipe and split: its row, with ``label``."""
    config = dataclasses.replace(BASE, **vit)
    run = train_digits(
        model, seed, num_train=num_train, vit=config, device=device
    )
    return dict(
        experiment=experiment,
        model=model,
        pool=config.pool,
        positions=config.positions,
        patch_size=config.patch_size,
        num_train=run.num_train,
        seed=seed,
        test_accuracy=run.test_accuracy,
        train_accuracy=run.train_accuracy,
        seconds=round(run.seconds, 3),
        tokens=config.num_tokens if model == "ViT" else 0,
        parameters=count_parameters(run.model),
        **label,
    )


def digits_jobs(seeds, sizes: list[int]) -> list[dict]:
    """Every run on every seed, the slowest experiment (patches of 1 pixel: 65 tokens) first."""
    runs = []
    for patch in (1, 4):
        runs += [
            dict(experiment="patch", model="ViT", vit=dict(patch_size=patch))
        ]
    for model in ("ViT", "CNN"):
        runs += [dict(experiment="models", model=model, vit={})]
        runs += [
            dict(experiment="size", model=model, vit={}, num_train=n)
            for n in sizes
        ]
    runs += [
        dict(
            experiment="size", model="ViT", vit=dict(patch_size=4), num_train=n
        )
        for n in sizes
    ]
    variants = (
        dict(pool="mean"),
        dict(positions="sinusoidal"),
        dict(positions="none"),
    )
    runs += [dict(experiment="variant", model="ViT", vit=v) for v in variants]
    return [
        {"num_train": None, **run, "seed": seed}
        for run in runs
        for seed in seeds
    ]


def digits_job_key(job: dict, full: int) -> tuple:
    """The values of :data:`KEYS` that a job's row will have (``full``: all training images)."""
    config = dataclasses.replace(BASE, **job["vit"])
    return (
        job["experiment"],
        job["model"],
        config.pool,
        config.positions,
        config.patch_size,
        job["num_train"] or full,
        job["seed"],
    )


def digits_seeds(args, seeds) -> pd.DataFrame:
    """Every run of the four experiments: one row per run, in the order of :func:`digits_jobs`.

    With ``--resume``, the rows of ``--out`` that the same command wrote on the same machine
    are kept and only the missing runs are trained (a run is deterministic given its seed and
    machine).
    """
    label = run_label(args)
    todo, full = (
        digits_jobs(seeds, args.sizes),
        len(make_digits_data().train_labels),
    )
    kept = {}
    if args.resume and Path(args.out).is_file():
        old = pd.read_csv(args.out)
        old = old[
            (old["machine"] == label["machine"])
            & (old["command"] == label["command"])
        ]
        kept = {tuple(row[KEYS]): row.to_dict() for _, row in old.iterrows()}
    missing = [job for job in todo if digits_job_key(job, full) not in kept]
    print(
        f"{len(todo) - len(missing)} runs kept from {args.out}, {len(missing)} to train",
        flush=True,
    )
    new = run_in_processes(
        digits_run,
        missing,
        workers=args.workers,
        device=args.device,
        label=label,
    )
    made = {
        digits_job_key(job, full): row
        for job, row in zip(missing, new, strict=True)
    }
    rows = [
        kept.get(digits_job_key(job, full)) or made[digits_job_key(job, full)]
        for job in todo
    ]
    return pd.DataFrame(rows)


def digits_attention_seed(
    seed: int, shuffled: bool, device: str, label: dict
) -> list[dict]:
    """The readings of one training (and, for the true labels, of its initialization)."""
    data = make_digits_data()
    run = train_digits("ViT", seed, shuffled_labels=shuffled, device=device)
    kind = "shuffled labels" if shuffled else "trained"
    rows = [
        dict(
            kind=kind,
            seed=seed,
            train_accuracy=run.train_accuracy,
            **attention_readings(run.model, data),
            **label,
        )
    ]
    if not shuffled:
        torch.manual_seed(
            seed
        )  # as train_digits does before it builds the model
        untrained = make_digits_model("ViT").eval()
        rows.append(
            dict(
                kind="untrained",
                seed=seed,
                train_accuracy=float("nan"),
                **attention_readings(untrained, data),
                **label,
            )
        )
    return rows


def digits_attention(args, seeds) -> pd.DataFrame:
    """A trained, a shuffled-label and an untrained ViT per seed: one row per ViT, by kind."""
    jobs = [
        dict(seed=seed, shuffled=shuffled)
        for seed in seeds
        for shuffled in (False, True)
    ]
    made = run_in_processes(
        digits_attention_seed,
        jobs,
        workers=args.workers,
        device=args.device,
        label=run_label(args),
    )
    table = pd.DataFrame([row for rows in made for row in rows])
    table["kind"] = pd.Categorical(table["kind"], ATTENTION_KINDS, ordered=True)
    table = table.sort_values(["kind", "seed"], ignore_index=True)
    return table.astype({"kind": str})


# ---------------------------------------------------------------------------------------------
# The command line, shared by every chapter

CHAPTERS = {
    # name: (chapter number, default number of seeds, {part: (function, columns naming a run)
    # [, the part's own default number of seeds]})
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
            "full": (shapes_full, ["model", "epoch"], 3),
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
    "digits": (
        14,
        10,
        {
            "seeds": (digits_seeds, KEYS[:-1]),
            "attention": (digits_attention, ["kind"]),
        },
    ),
}

USE_DEVICE = (("shapes", "full"), ("digits", "seeds"), ("digits", "attention"))
"""The parts that train on ``--device``; the others train on the CPU."""

RUN_PICKERS = ("--models", "--resume", "--collect")
"""Options that pick which of a command's runs to train, or merge them, without changing a run:
a table's command leaves them out, so that the runs it names are the same with or without them
(``shapes --part full`` runs in parts, ``digits --resume`` trains only the runs it lacks)."""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--seeds",
        type=int,
        help="how many seeds (default: the part's, else the chapter's)",
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
        own = ", ".join(
            f"{part}: {spec[2]}"
            for part, spec in parts.items()
            if len(spec) > 2
        )
        own = f" ({own})" if own else ""
        sub = chapters.add_parser(
            name,
            aliases=[str(number)],
            parents=[common],
            help=f"chapter {number}",
            description=f"Chapter {number}'s margins; {seeds} seeds{own} unless --seeds says.",
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
                "--epochs",
                type=int,
                help=f"epochs per run (default: seeds {SEEDS_EPOCHS}, the chapter's; "
                f"full {FULL_EPOCHS}, the blog post's)",
            )
            full = sub.add_argument_group(
                "--part full", "chapter 8 at the blog post's scale"
            )
            full.add_argument(
                "--protocol",
                choices=PROTOCOLS,
                default="source",
                help="source 004's training (default) or the book's first",
            )
            full.add_argument(
                "--num-train",
                type=int,
                default=25_000,
                help="sequences, validation split included (default: 25000)",
            )
            full.add_argument(
                "--batch-size", type=int, default=128, help="default: 128"
            )
            full.add_argument(
                "--lr", type=float, default=1e-3, help="default: 0.001"
            )
            full.add_argument(
                "--models",
                nargs="+",
                default=list(SHAPES_MODELS),
                help="default: all four",
            )
            full.add_argument(
                "--collect",
                action="store_true",
                help="train nothing: merge the runs saved beside --out into it",
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
        if name == "digits":
            sub.add_argument(
                "--sizes",
                type=int,
                nargs="+",
                default=[50, 100, 300],
                help="seeds: the training-set sizes of the size experiment",
            )
            sub.add_argument(
                "--resume",
                action="store_true",
                help="seeds: keep the rows of --out that this command made here",
            )
        if name in ("shapes", "digits"):
            parts_on_device = [p for c, p in USE_DEVICE if c == name]
            sub.add_argument(
                "--device",
                default="cpu",
                help=f"{', '.join(parts_on_device)}: where to train (default: cpu)",
            )
    return parser


def check_options(parser: argparse.ArgumentParser, args) -> None:
    """Refuse the options a part cannot honour, with the parser's usage."""
    uses_device = (args.chapter, args.part) in USE_DEVICE
    if getattr(args, "device", "cpu") != "cpu" and not uses_device:
        parser.error(
            f"--device: {args.chapter} --part {args.part} trains on the CPU only"
        )
    if args.chapter == "shapes" and args.part == "full":
        if not args.out:
            parser.error(
                "--part full needs --out CSV: its runs are saved beside it as they go"
            )
        unknown = sorted(set(args.models) - set(SHAPES_MODELS))
        if unknown:
            parser.error(
                f"unknown models {unknown}: choose from {list(SHAPES_MODELS)}"
            )
    if getattr(args, "resume", False) and not args.out:
        parser.error("--resume needs --out: the file whose rows it keeps")


def numerics_label() -> str:
    """``scalar`` under ``ATEN_CPU_CAPABILITY=default``, else the capability or the default."""
    capability = os.environ.get("ATEN_CPU_CAPABILITY")
    return {
        None: "machine default",
        "": "machine default",
        "default": "scalar",
    }.get(capability, capability)


def command_line(argv: list[str]) -> str:
    """``python scripts/margins.py`` and ``argv``, less :data:`RUN_PICKERS` and their values."""
    words, picking = [], False
    for word in argv:
        if word.startswith("--"):
            picking = word.split("=", 1)[0] in RUN_PICKERS
        if not picking:
            words.append(word)
    return " ".join(["python scripts/margins.py", *words])


def label_columns(argv: list[str], workers: int, device: str = "cpu") -> dict:
    """The numerics, machine (``device``) and command of a run, as a table's columns name them."""
    return {
        "numerics": numerics_label(),
        "machine": machine_label(device, workers),
        "command": command_line(argv),
    }


def run_label(args) -> dict:
    """:func:`label_columns` of the command ``main`` parsed into ``args``, for rows a part writes
    itself (each run of ``shapes --part full`` saves its own as it goes)."""
    return label_columns(args.argv, args.workers, args.device)


def labelled(
    table: pd.DataFrame, argv: list[str], workers: int, device: str = "cpu"
) -> pd.DataFrame:
    """``table`` with the numerics, machine and command that produced it as columns.

    A column the table has already is kept: rows a part labels itself (runs kept from an
    earlier invocation, with ``--resume`` or ``--collect``) name the command that made them.
    """
    made = label_columns(argv, workers, device)
    return table.assign(
        **{
            column: value
            for column, value in made.items()
            if column not in table
        }
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
    parser = build_parser()
    args = parser.parse_args(argv)
    check_options(parser, args)
    args.argv, args.device = argv, getattr(args, "device", "cpu")
    torch.set_num_threads(1)  # one thread per run, as the chapters do
    number, default_seeds, parts = CHAPTERS[args.chapter]
    measure, keys, *part_seeds = parts[args.part]
    default_seeds = part_seeds[0] if part_seeds else default_seeds
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
        labelled(table, argv, args.workers, args.device).to_csv(
            args.out, index=False
        )
    return table


if __name__ == "__main__":
    main()
