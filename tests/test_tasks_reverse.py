"""Tests of helpers.tasks.reverse: chapter 7's data, model, metrics and training set-up.

The checker of chapter 7's exercise is tested in tests/test_checks.py.
"""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, glue_records
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import TensorDataset

from helpers.tasks.reverse import (
    ABLATIONS,
    BOOK_CONFIG,
    SCHEDULE_EXPERIMENT,
    SOURCE_000_CONFIG,
    ReverseConfig,
    ReversePredictor,
    ablation_results,
    attention_dropout_accuracy,
    bag_oracle_accuracy,
    bare_loop,
    build_reverse_training,
    final_train_accuracy,
    length_accuracies,
    make_reverse_dataset,
    mirror_routing,
    schedule_results,
    steps_to_accuracy,
    token_accuracy,
    train_and_test,
    train_reverse,
    whole_sequence_accuracy,
)
from helpers.training import token_cross_entropy
from helpers.transformer import TransformerConfig

# The command column records what produced a file: files written before release 0.6.0 name
# the per-chapter script that scripts/margins.py replaced.
MARGINS_COMMANDS = (
    "python scripts/margins_reverse.py",
    "python scripts/margins.py reverse",
    "python scripts/margins.py 7",
)


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- the data set -------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    num_sequences=st.integers(1, 50),
    seq_len=st.integers(1, 20),
    num_classes=st.integers(2, 30),
    seed=st.integers(0, 2**16),
)
def test_targets_are_the_reversed_inputs(
    num_sequences, seq_len, num_classes, seed
):
    data = make_reverse_dataset(
        num_sequences, seq_len, num_classes, generator(seed)
    )
    inputs, targets = data.tensors
    assert isinstance(data, TensorDataset)
    assert inputs.shape == targets.shape == (num_sequences, seq_len)
    assert inputs.dtype == targets.dtype == torch.long
    assert int(inputs.min()) >= 0 and int(inputs.max()) < num_classes
    for t in range(seq_len):
        assert torch.equal(targets[:, t], inputs[:, seq_len - 1 - t])


def test_same_seed_same_data_and_splits_differ():
    first = make_reverse_dataset(100, 16, 10, generator(0)).tensors[0]
    again = make_reverse_dataset(100, 16, 10, generator(0)).tensors[0]
    other = make_reverse_dataset(100, 16, 10, generator(1)).tensors[0]
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_tokens_are_roughly_uniform():
    inputs = make_reverse_dataset(20_000, 16, 10, generator(0)).tensors[0]
    frequencies = (
        torch.bincount(inputs.flatten(), minlength=10) / inputs.numel()
    )
    assert (frequencies - 0.1).abs().max() < 0.005


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0, 16, 10), ValueError, "num_sequences must be a positive"),
        ((10, 0, 10), ValueError, "seq_len must be a positive"),
        ((10, 16, 1), ValueError, "at least 2"),
        (
            (10.0, 16, 10),
            TypeError,
            "num_sequences must be a positive int, got float",
        ),
        ((10, True, 10), TypeError, "seq_len must be a positive int, got bool"),
        (
            (10, 16, 10.0),
            TypeError,
            "num_classes must be a positive int, got float",
        ),
    ],
)
def test_make_reverse_dataset_rejects_bad_sizes(args, error, message):
    with pytest.raises(error, match=message):
        make_reverse_dataset(*args, generator())


def test_make_reverse_dataset_needs_a_generator():
    with pytest.raises(TypeError, match="torch.Generator"):
        make_reverse_dataset(10, 16, 10, 0)


# --- the model ----------------------------------------------------------------------------------


def small_config(**changes) -> TransformerConfig:
    """The small models' encoder: D = 16, two heads, two blocks, F = 32."""
    sizes = dict(d_model=16, num_heads=2, num_layers=2, ffn_width=32)
    return TransformerConfig(max_len=64, **(sizes | changes))


def small_model(positions: str = "sinusoidal") -> ReversePredictor:
    torch.manual_seed(0)
    return ReversePredictor(10, small_config(), positions).eval()


def test_model_shapes_and_attention_maps():
    model = small_model()
    tokens = make_reverse_dataset(3, 12, 10, generator()).tensors[0]
    assert model(tokens).shape == (3, 12, 10)
    maps = model.get_attention_maps(tokens)
    assert [tuple(m.shape) for m in maps] == [(3, 2, 12, 12)] * 2


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_without_positions_the_model_is_permutation_equivariant(seed):
    """Why the no-positional-encoding ablation cannot learn to reverse."""
    tokens = make_reverse_dataset(2, 10, 10, generator(seed)).tensors[0]
    permutation = torch.randperm(10, generator=generator(seed))
    blind = small_model(positions="none")
    torch.testing.assert_close(
        blind(tokens[:, permutation]), blind(tokens)[:, permutation]
    )


def test_with_positions_the_model_is_not_permutation_equivariant():
    tokens = make_reverse_dataset(2, 10, 10, generator()).tensors[0]
    permutation = torch.arange(9, -1, -1)
    model = small_model(positions="sinusoidal")
    difference = model(tokens[:, permutation]) - model(tokens)[:, permutation]
    assert difference.abs().max() > 1e-3


@pytest.mark.parametrize(
    ("tokens", "error", "message"),
    [
        (torch.zeros(2, 5), TypeError, "int64"),
        ([[0, 1]], TypeError, "int64"),
        (torch.zeros(5, dtype=torch.long), ValueError, r"\(B, T\)"),
        (torch.full((1, 5), 10), ValueError, r"0 \.\. 9"),
        (torch.full((1, 5), -1), ValueError, r"0 \.\. 9"),
    ],
)
def test_model_rejects_bad_tokens(tokens, error, message):
    with pytest.raises(error, match=message):
        small_model()(tokens)


def test_model_rejects_bad_num_classes():
    with pytest.raises(ValueError, match="num_classes"):
        ReversePredictor(1, small_config())


# --- loss, accuracy and the position-blind ceiling ------------------------------------------


def test_token_accuracy_and_cross_entropy():
    targets = torch.tensor([[0, 1], [2, 2]])
    logits = (
        torch.nn.functional.one_hot(torch.tensor([[0, 1], [2, 0]]), 3).float()
        * 5
    )
    assert token_accuracy(logits, targets).item() == pytest.approx(0.75)
    expected = torch.nn.functional.cross_entropy(
        logits.reshape(4, 3), targets.reshape(4)
    )
    torch.testing.assert_close(token_cross_entropy(logits, targets), expected)
    with pytest.raises(ValueError, match=r"\(B, T, C\)"):
        token_accuracy(logits[0], targets)
    with pytest.raises(TypeError, match="tensors"):
        token_cross_entropy(logits, [[0, 1], [2, 2]])


def brute_force_oracle(inputs: torch.Tensor) -> float:
    total = 0.0
    for row in inputs.tolist():
        for t in range(len(row)):
            others = row[:t] + row[t + 1 :]
            total += max(others.count(c) for c in set(others)) / len(others)
    return total / inputs.numel()


@settings(max_examples=25, deadline=None)
@given(
    seq_len=st.integers(2, 8),
    num_classes=st.integers(2, 5),
    seed=st.integers(0, 2**16),
)
def test_bag_oracle_matches_brute_force(seq_len, num_classes, seed):
    inputs = make_reverse_dataset(
        6, seq_len, num_classes, generator(seed)
    ).tensors[0]
    assert bag_oracle_accuracy(inputs, num_classes) == pytest.approx(
        brute_force_oracle(inputs)
    )


def test_bag_oracle_bounds_every_position_blind_rule():
    """Exhaustively: no rule f(own token, bag) beats the oracle on all sequences of 4 bits.

    With 2 classes and T = 4 the bag is the number of ones (0 to 4), so a position-blind rule
    is a function of (own token, count of ones): 2 * 5 = 10 inputs, 2**10 = 1024 rules. The
    best of them scores exactly the oracle, 0.75.
    """
    inputs = torch.tensor(list(itertools.product(range(2), repeat=4)))
    targets = inputs.flip(-1)
    oracle = bag_oracle_accuracy(inputs, 2)
    cell = inputs * 5 + inputs.sum(
        dim=1, keepdim=True
    )  # (own, count) as one index 0..9
    scores = []
    for rule in itertools.product(range(2), repeat=10):
        predictions = torch.tensor(rule)[cell]
        scores.append((predictions == targets).float().mean().item())
    assert len(scores) == 1024
    assert max(scores) <= oracle + 1e-9
    assert max(scores) == pytest.approx(oracle) == pytest.approx(0.75)
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        bag_oracle_accuracy(inputs[:, :1], 2)


# --- configurations and the training set-up ---------------------------------------------------


def test_source_configuration_is_source_000s():
    config = SOURCE_000_CONFIG
    model = config.model
    assert (model.d_model, model.num_heads, model.num_layers) == (32, 2, 2)
    assert (
        config.batch_size,
        config.lr,
        config.warmup_steps,
        config.epochs,
    ) == (32, 1e-3, 100, 3)
    assert config.model.dropout == 0.1
    assert config.total_steps() == 4686  # "about 4,700 optimizer steps"


def test_build_reverse_training_is_seeded():
    config = BOOK_CONFIG.replace(num_train=1024, warmup_steps=2)
    data = make_reverse_dataset(1024, 16, 10, generator())
    first, *_ = build_reverse_training(config, data)
    second, *_ = build_reverse_training(config, data)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)


def test_build_reverse_training_rejects_bad_arguments():
    data = make_reverse_dataset(100, 16, 10, generator())
    with pytest.raises(ValueError, match="num_train=50000"):
        build_reverse_training(BOOK_CONFIG, data)
    with pytest.raises(TypeError, match="ReverseConfig"):
        build_reverse_training({"lr": 1e-3}, data)


def test_a_few_steps_reduce_the_loss():
    config = ReverseConfig(
        num_train=1024, batch_size=128, lr=1e-2, warmup_steps=2, epochs=3
    )
    data = make_reverse_dataset(1024, 16, 10, generator())
    _, history = train_reverse(config, data)  # 3 epochs of 8 steps
    assert list(history["step"]) == [8, 10, 16, 20, 24]  # every 10, each epoch
    assert history["train_loss"].iloc[-1] < history["train_loss"].iloc[0] - 0.05


def test_train_reverse_is_build_then_fit():
    config = ReverseConfig(
        num_train=512, batch_size=128, lr=1e-2, warmup_steps=2, epochs=1
    )
    data = make_reverse_dataset(512, 16, 10, generator())
    model, history = train_reverse(config, data)
    assert isinstance(model, ReversePredictor)
    assert list(history["step"]) == [4] and "train_accuracy" in history


# --- the schedule experiment ------------------------------------------------------------------


def test_schedule_experiment_changes_only_known_fields():
    fields = set(vars(BOOK_CONFIG)) | set(vars(BOOK_CONFIG.model))
    assert (
        SCHEDULE_EXPERIMENT[next(iter(SCHEDULE_EXPERIMENT))] == {}
    )  # the book's run first
    for changes in SCHEDULE_EXPERIMENT.values():
        assert set(changes) <= fields - {"seed", "epochs", "num_train"}
        BOOK_CONFIG.replace(**changes)  # a valid configuration


def test_constant_schedule_and_warmup():
    config = BOOK_CONFIG.replace(
        num_train=1024, warmup_steps=4, cosine_decay=False
    )
    data = make_reverse_dataset(1024, 16, 10, generator())
    _, optimizer, scheduler, _ = build_reverse_training(config, data)
    rates = []
    for _ in range(config.total_steps()):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    peak = config.lr
    assert rates[:4] == pytest.approx([peak / 4, peak / 2, 3 * peak / 4, peak])
    assert rates[4:] == pytest.approx([peak] * (len(rates) - 4))  # no decay
    _, optimizer, scheduler, _ = build_reverse_training(
        config.replace(warmup_steps=0), data
    )
    assert optimizer.param_groups[0]["lr"] == pytest.approx(
        peak
    )  # no warm-up: full rate


def test_post_ln_config_builds_a_post_ln_model():
    config = BOOK_CONFIG.replace(
        num_train=256, warmup_steps=1, norm_first=False
    )
    data = make_reverse_dataset(256, 16, 10, generator())
    model, *_ = build_reverse_training(config, data)
    assert all(not block.norm_first for block in model.encoder.blocks)
    assert isinstance(model.encoder.final_norm, torch.nn.Identity)
    pre, *_ = build_reverse_training(config.replace(norm_first=True), data)
    assert all(block.norm_first for block in pre.encoder.blocks)


def test_max_steps_cuts_the_run_without_changing_its_start():
    config = ReverseConfig(
        num_train=1024, batch_size=64, lr=1e-2, warmup_steps=2, epochs=1
    )
    data = make_reverse_dataset(1024, 16, 10, generator())
    _, full = train_reverse(config, data)
    _, cut = train_reverse(config, data, max_steps=10)
    assert list(cut["step"]) == [10] and list(full["step"]) == [10, 16]
    assert cut["train_loss"].iloc[0] == pytest.approx(
        full["train_loss"].iloc[0], rel=1e-5
    )
    assert cut["lr"].iloc[0] == full["lr"].iloc[0]  # the full run's schedule


@pytest.mark.parametrize(
    ("max_steps", "changes", "error", "message"),
    [
        (0, {}, ValueError, "max_steps must be a positive int"),
        (2.0, {}, TypeError, "max_steps must be a positive int"),
        (17, {}, ValueError, "total_steps"),
        (4, {"epochs": 2}, ValueError, "one-epoch"),
    ],
)
def test_max_steps_rejects_bad_values(max_steps, changes, error, message):
    config = ReverseConfig(
        num_train=256, batch_size=16, warmup_steps=2, epochs=1
    )
    config = config.replace(**changes)
    data = make_reverse_dataset(256, 16, 10, generator())
    with pytest.raises(error, match=message):
        train_reverse(config, data, max_steps=max_steps)


def test_steps_to_accuracy():
    history = pd.DataFrame(
        {"step": [10, 20, 30, 40], "train_accuracy": [0.1, 0.98, 0.99, 1.0]}
    )
    assert steps_to_accuracy(history) == 30
    assert steps_to_accuracy(history, target=0.5) == 20
    assert steps_to_accuracy(history.iloc[:2]) is None


def assert_every_run_on_the_same_seeds(table, runs, min_seeds):
    """A shipped results file of scripts/margins.py: every run of ``runs`` in order, each on
    the same number of seeds (``min_seeds`` or more), all written on one machine."""
    assert list(table["run"].unique()) == list(runs)
    seeds = table.groupby("run")["seed"].nunique()
    assert (seeds >= min_seeds).all() and seeds.nunique() == 1
    assert table["command"].str.startswith(MARGINS_COMMANDS).all()
    assert table["machine"].nunique() == 1


def test_the_shipped_ablation_results_cover_every_ablation_on_three_seeds_or_more():
    """Chapter 7 asserts its ablations on this file: every run, >= 3 seeds, labelled."""
    table = ablation_results()
    assert_every_run_on_the_same_seeds(table, ABLATIONS, min_seeds=3)
    assert table["machine"].iloc[0]
    measured = ["train accuracy", "test accuracy", "test sequence accuracy"]
    measured += [
        "bag oracle",
        "best other-length accuracy",
        "max anti-diagonal mass",
    ]
    measured += [
        "mirror reads at 20",
        "mirror reads at 24",
        "attention-dropout 0.3 accuracy",
    ]
    assert not table[measured].isna().any().any()


def test_the_shipped_schedule_results_cover_every_run_on_five_seeds():
    """Chapter 7 asserts its schedule experiment on this file: every run, the same seeds."""
    table = schedule_results()
    assert_every_run_on_the_same_seeds(table, SCHEDULE_EXPERIMENT, min_seeds=5)
    assert table["final"].between(0, 1).all()
    reached = table["steps to 99%"].dropna()
    assert (reached % 10 == 0).all() and (reached <= 250).all()


def test_mirror_routing_finds_a_planted_mirror_head_and_counts_its_reads():
    """A model whose head reads exactly key T-1-t is found, and counts 16 reads at any length."""
    torch.manual_seed(0)
    model = ReversePredictor(10, small_config(num_layers=1)).eval()
    seq_len = 16
    mirror = torch.arange(seq_len - 1, -1, -1)

    def planted(
        x,
    ):  # block 0, head 1 reads the mirror key of the training length
        maps = torch.full(
            (x.shape[0], 2, x.shape[1], x.shape[1]), 1.0 / x.shape[1]
        )
        maps[:, 1, :seq_len] = 0.0
        maps[:, 1, torch.arange(seq_len), mirror] = 1.0
        return [maps]

    model.get_attention_maps = planted
    inputs = make_reverse_dataset(8, seq_len, 10, generator()).tensors[0]
    block, head, mass, reads = mirror_routing(model, inputs, seq_len)
    assert (block, head) == (0, 1)
    # the mass table: head 1 all on the mirror key, head 0 uniform (1/16)
    torch.testing.assert_close(mass, torch.tensor([[1 / seq_len, 1.0]]))
    longer = make_reverse_dataset(8, 24, 10, generator()).tensors[0]
    assert reads(longer) == seq_len
    model.get_attention_maps = lambda x: [
        torch.full((len(x), 2, x.shape[1], x.shape[1]), 0.5)
    ]
    assert (
        mirror_routing(model, inputs, seq_len)[3](longer) <= 1
    )  # uniform: argmax is key 0
    with pytest.raises(ValueError, match="training length"):
        mirror_routing(model, longer, seq_len)


class _Fixed(torch.nn.Module):
    """A stand-in model whose logits are one-hot on ``rule(tokens)``."""

    def __init__(self, rule, num_classes: int = 10) -> None:
        super().__init__()
        self.rule, self.num_classes = rule, num_classes
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # a device to run on

    def forward(self, tokens):
        predicted = self.rule(tokens)
        one_hot = F.one_hot(predicted, self.num_classes).float()
        return one_hot + self.anchor


def test_whole_sequence_accuracy_counts_sequences_with_every_token_right():
    inputs = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 0, 1, 2]])
    targets = inputs.flip(-1)
    wrong_once = targets.clone()
    wrong_once[1, 2] = 0  # one wrong token in sequence 1
    model = _Fixed(lambda tokens: wrong_once)
    # 2 of 3 sequences; the token accuracy (11/12) or "some token right" (1)
    # would be other numbers
    assert whole_sequence_accuracy(model, inputs, targets) == pytest.approx(
        2 / 3
    )
    assert whole_sequence_accuracy(
        _Fixed(lambda tokens: tokens.flip(-1)), inputs, targets
    ) == pytest.approx(1.0)


def test_length_accuracies_draw_the_chapters_sequences():
    lengths = (8, 16, 24)
    reverser = _Fixed(lambda tokens: tokens.flip(-1))
    assert length_accuracies(reverser, lengths) == {8: 1.0, 16: 1.0, 24: 1.0}
    # always class 0: the share of zeros among the targets of the chapter's
    # sequences (2,000 of each length, generator seed 3); another seed or
    # number of sequences would give other shares
    zeros = length_accuracies(_Fixed(torch.zeros_like), lengths)
    for length in lengths:
        data = make_reverse_dataset(2000, length, 10, generator(3))
        targets = data.tensors[1]
        expected = (targets == 0).float().mean().item()
        assert zeros[length] == pytest.approx(expected), length
    assert len(set(zeros.values())) == len(lengths)


def test_attention_dropout_accuracy_switches_it_on_and_puts_it_back():
    torch.manual_seed(0)
    model = ReversePredictor(10, small_config(dropout=0.1)).eval()
    inputs = make_reverse_dataset(64, 16, 10, generator(4)).tensors[0]
    targets = inputs.flip(-1)
    plain = ReversePredictor(10, small_config()).eval()
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        eval_accuracy = token_accuracy(plain(inputs), targets).item()
    # p = 0 on a model without other dropout: the plain accuracy, exactly
    assert attention_dropout_accuracy(
        plain, inputs, targets, 0.0
    ) == pytest.approx(eval_accuracy)
    dropped = attention_dropout_accuracy(plain, inputs, targets, 0.9)
    assert dropped != pytest.approx(eval_accuracy)  # the dropout was on
    # seeded: the same drops every time
    assert attention_dropout_accuracy(plain, inputs, targets, 0.9) == dropped
    # each block's attention dropout is put back, and the model in eval mode
    attention_dropout_accuracy(model, inputs, targets, 0.3)
    assert not model.training
    assert all(block.self_attn.dropout == 0.1 for block in model.encoder.blocks)


def test_final_train_accuracy_is_the_mean_of_the_last_five_rows():
    history = pd.DataFrame(
        {
            "step": range(10, 110, 10),
            "train_accuracy": [i / 10 for i in range(1, 11)],
        }
    )
    # the last five rows: 0.6 to 1.0 (the last row alone: 1.0; ten rows: 0.55)
    assert final_train_accuracy(history) == pytest.approx(0.8)


def test_chapter_7_writes_its_loop_and_checks_it_against_bare_loop():
    """The chapter writes the bare loop on the page (issue 49), and a hidden cell checks it,
    float for float, against the package's bare_loop, which scripts/margins.py runs over
    seeds: two copies, held equal."""
    notebook = json.loads(
        (ROOT / "notebooks/07_reverse_prediction.ipynb").read_text()
    )
    visible, hidden = [], []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            tags = cell["metadata"].get("tags", [])
            kind = hidden if "remove-cell" in tags else visible
            kind.append("".join(cell["source"]))
    loop = [c for c in visible if "optimizer.step()" in c and "for inputs" in c]
    assert len(loop) == 1 and "loss.backward()" in loop[0]
    assert not any("bare_loop" in c for c in visible)
    checks = [c for c in hidden if "bare_loop(config, train_set, val_set)" in c]
    assert len(checks) == 1 and "reference_losses == losses" in checks[0]


def test_bare_loop_gives_the_numbers_the_chapter_glued():
    """The chapter's stored glue values (its last execution) are bare_loop's."""
    config = BOOK_CONFIG
    train_set = make_reverse_dataset(
        config.num_train, config.seq_len, config.num_classes, generator(0)
    )
    val_set = make_reverse_dataset(
        1_000, config.seq_len, config.num_classes, generator(1)
    )
    losses, accuracy = bare_loop(config, train_set, val_set)
    notebook = json.loads(
        (ROOT / "notebooks/07_reverse_prediction.ipynb").read_text()
    )
    glued = dict(glue_records(notebook))
    assert len(losses) == 100
    assert losses[0] == pytest.approx(
        float(glued["ch7_bare_first_loss"]), abs=0.01
    )
    assert accuracy == pytest.approx(
        float(glued["ch7_bare_accuracy"]), abs=0.01
    )


def test_train_and_test_scores_the_trained_model_in_eval_mode():
    config = ReverseConfig(
        num_train=64,
        batch_size=32,
        seq_len=6,
        num_classes=5,
        warmup_steps=1,
        epochs=1,
    ).replace(d_model=16)
    train_set = make_reverse_dataset(64, 6, 5, generator(0))
    test_set = make_reverse_dataset(40, 6, 5, generator(1))
    loader = torch.utils.data.DataLoader(test_set, batch_size=16)
    model, history, scores = train_and_test(config, train_set, loader)
    assert not model.training and len(history) >= 1
    with torch.no_grad():
        expected = token_accuracy(
            model(test_set.tensors[0]), test_set.tensors[1]
        ).item()
    assert scores["accuracy"] == pytest.approx(expected)
    assert set(scores) == {"loss", "accuracy"}
