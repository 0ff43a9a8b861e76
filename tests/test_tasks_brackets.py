"""Tests of helpers.tasks.brackets: chapter 10's language, its data, baseline and measures."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import seeded

from helpers.gpt import GPT, GPTConfig
from helpers.tasks.brackets import (
    ALPHABET,
    CLOSERS,
    IGNORE,
    BracketConfig,
    NGramModel,
    closing_accuracy,
    decode,
    encode,
    entropy_rate,
    expected_closer,
    generator_loss,
    gpt_probabilities,
    is_balanced,
    make_rows,
    make_strings,
    packed_generator_loss,
    per_token_loss,
    sample_strings,
    string_log_probability,
    train_brackets,
    validity_rate,
)


def _depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        depth += 1 if char in "([{" else -1
        deepest = max(deepest, depth)
    return deepest


def test_generated_strings_are_balanced_seeded_and_bounded():
    strings = make_strings(500, seeded(1), max_pairs=12, max_depth=5)
    assert strings == make_strings(500, seeded(1), max_pairs=12, max_depth=5)
    assert all(is_balanced(s) for s in strings)
    assert all(2 <= len(s) <= 24 for s in strings)
    assert max(map(_depth, strings)) == 5
    assert {len(s) for s in strings} == set(
        range(2, 25, 2)
    )  # every length occurs
    assert set("".join(strings)) == set("()[]{}")


@pytest.mark.parametrize(
    "text, valid",
    [("()", True), ("([]{})", True), ("{[()]}()", True), ("", False), ("(", False),
     (")(", False), ("([)]", False), ("(]", False), ("()\n", False), ("(()", False),
     ("())", False)],
)  # fmt: skip
def test_is_balanced(text, valid):
    assert is_balanced(text) is valid


def test_expected_closer_follows_the_stack():
    assert expected_closer("") is None
    assert expected_closer("([") == "]"
    assert expected_closer("([]") == ")"
    assert expected_closer("([]{") == "}"
    assert expected_closer("()") is None


def test_encode_and_decode_round_trip_and_refuse_other_characters():
    assert decode(encode("\n([]{})\n")) == "\n([]{})\n"
    assert encode("\n()") == [0, 1, 2]
    with pytest.raises(ValueError, match="not in the alphabet"):
        encode("(a)")


def test_rows_pack_whole_strings_and_shift_targets():
    strings = ["()", "[[]]", "{}", "(" * 7 + ")" * 7]
    inputs, targets = make_rows(strings, 16).tensors
    assert inputs.shape == targets.shape == (2, 16)
    assert decode(inputs[0][:11]) == "\n()\n[[]]\n{}"
    assert decode(targets[0][:11]) == "()\n[[]]\n{}\n"
    assert (targets[0][11:] == IGNORE).all()
    row = decode(inputs[1][:15])
    assert (
        row == "\n" + strings[3]
    )  # a string that does not fit starts a new row
    counted = (targets != IGNORE).sum().item()
    assert counted == sum(
        len(s) + 1 for s in strings
    )  # every character and every end
    with pytest.raises(ValueError, match="context_length >= 15"):
        make_rows(strings, 14)


def test_ngram_model_counts_and_normalizes():
    model = NGramModel(2, alpha=1e-9).fit(["()", "()", "[]"])
    after_newline = model.probabilities("")
    assert math.isclose(after_newline.sum().item(), 1.0)
    # after a newline: "(" twice, "[" once (the newline that ends a row starts no new one)
    assert math.isclose(
        after_newline[ALPHABET.index("(")].item(), 2 / 3, rel_tol=1e-6
    )
    assert math.isclose(
        model.probabilities("(")[ALPHABET.index(")")].item(), 1.0, rel_tol=1e-6
    )
    assert model.loss(["()"]) < 0.5
    samples = (
        NGramModel(3)
        .fit(make_strings(200, seeded(2)))
        .sample(50, seeded(3), 40)
    )
    assert len(samples) == 50 and 0 < validity_rate(samples) < 1


def test_validity_rate_counts_unfinished_samples_as_invalid():
    assert validity_rate(["()", "(]", None, "[]"]) == 0.5
    with pytest.raises(ValueError, match="no strings"):
        validity_rate([])


def test_closing_accuracy_scores_the_forced_closing_bracket():
    strings = ["([]{})", "[[()]]"]

    def oracle(prefix: str) -> torch.Tensor:
        probabilities = torch.full((len(ALPHABET),), 0.01)
        closer = expected_closer(prefix)
        if closer is not None:
            probabilities[ALPHABET.index(closer)] = 1.0
        return probabilities

    def always_round(prefix: str) -> torch.Tensor:
        probabilities = torch.zeros(len(ALPHABET))
        probabilities[ALPHABET.index(")")] = 1.0
        return probabilities

    assert closing_accuracy(oracle, strings) == 1.0
    closers = [c for s in strings for c in s if c in CLOSERS]
    assert closing_accuracy(always_round, strings) == closers.count(")") / len(
        closers
    )


def test_model_measures_run_on_an_untrained_model():
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(
            vocab_size=len(ALPHABET), context_length=20, d_model=16, num_heads=2
        )
    )
    model.eval()
    strings = make_strings(20, seeded(4), max_pairs=8)
    loss = per_token_loss(model, make_rows(strings, 20))
    assert abs(loss - math.log(len(ALPHABET))) < 0.1
    table = gpt_probabilities(model, strings[:3])
    assert all(
        math.isclose(p.sum().item(), 1.0, rel_tol=1e-9) for p in table.values()
    )
    samples = sample_strings(model, 10, seeded(5))
    assert len(samples) == 10 and all(
        s is None or "\n" not in s for s in samples
    )
    assert len(set(sample_strings(model, 5, seeded(5), greedy=True))) == 1


def test_a_short_training_run_learns_something():
    strings = make_strings(400, seeded(6), max_pairs=6)
    rows = make_rows(strings, 32)
    model = GPTConfig(vocab_size=len(ALPHABET), context_length=32, d_model=32)
    config = BracketConfig(model=model, batch_size=16, epochs=6, warmup_steps=5)
    model, history = train_brackets(config, rows, rows)
    assert history["val_loss"].notna().sum() == 6
    assert per_token_loss(model, rows) < math.log(len(ALPHABET)) - 0.3
    with pytest.raises(TypeError, match="BracketConfig"):
        train_brackets({"epochs": 1}, rows)


def test_closing_accuracy_by_distance_to_the_opening_bracket():
    strings = ["([]{})"]  # closers: ] (1 back), } (1 back), ) (5 back)

    def wrong_for_far(prefix: str) -> torch.Tensor:
        probabilities = torch.zeros(len(ALPHABET))
        closer = expected_closer(prefix)
        probabilities[
            ALPHABET.index(closer if prefix[-1] in "([{" else "]")
        ] = 1.0
        return probabilities

    assert closing_accuracy(wrong_for_far, strings, (1, 1)) == 1.0
    assert closing_accuracy(wrong_for_far, strings, (2, 10)) == 0.0
    assert closing_accuracy(wrong_for_far, strings) == 2 / 3
    with pytest.raises(ValueError, match="no closing bracket"):
        closing_accuracy(wrong_for_far, strings, (2, 4))


# --------------------------------------------------------------------------- the entropy floor


def test_entropy_rate_of_tiny_grammars_computed_by_hand():
    # one pair: "()", "[]" or "{}", each 1/3, and 3 tokens with the end: log 3 / 3
    assert math.isclose(entropy_rate(1), math.log(3) / 3)
    # up to two pairs, depth 1: n (1 bit), then one kind per pair; E[tokens] = (3 + 5) / 2
    assert math.isclose(
        entropy_rate(2, 1), (math.log(2) + 1.5 * math.log(3)) / 4
    )
    # depth 2 adds, for n = 2, the choice "()()" or "(())" (one more bit, half the time)
    assert math.isclose(
        entropy_rate(2, 2), (1.5 * math.log(2) + 1.5 * math.log(3)) / 4
    )


def test_string_probabilities_sum_to_one_and_match_frequencies():
    texts = [""]
    for _ in range(6):  # every string of up to 6 brackets
        texts += [
            t + c for t in texts if len(t) == len(texts[-1]) for c in "()[]{}"
        ]
    total = sum(
        math.exp(string_log_probability(t, max_pairs=3, max_depth=2))
        for t in texts
    )
    assert math.isclose(total, 1.0, rel_tol=1e-12)
    assert (
        string_log_probability("((()))", max_pairs=3, max_depth=2) == -math.inf
    )  # too deep
    assert string_log_probability("(()", max_pairs=3) == -math.inf
    assert (
        string_log_probability("()" * 4, max_pairs=3) == -math.inf
    )  # too many pairs
    drawn = make_strings(20_000, seeded(8), max_pairs=3, max_depth=2)
    frequency = drawn.count("(())") / len(drawn)
    expected = math.exp(
        string_log_probability("(())", max_pairs=3, max_depth=2)
    )
    assert abs(frequency - expected) < 4 * math.sqrt(expected / len(drawn))


def test_entropy_rate_matches_a_monte_carlo_estimate():
    # the generator's loss on its own strings estimates the rate; its standard error over
    # 20,000 strings is about 0.002 nats
    drawn = make_strings(20_000, seeded(9))
    assert abs(generator_loss(drawn) - entropy_rate()) < 0.01
    small = make_strings(20_000, seeded(10), max_pairs=5, max_depth=3)
    assert abs(generator_loss(small, 5, 3) - entropy_rate(5, 3)) < 0.01
    # a uniform guess over the 7 tokens is far above the floor
    assert entropy_rate() < math.log(len(ALPHABET)) - 0.5


def test_generator_loss_is_the_per_token_loss_of_the_true_probabilities():
    strings = make_strings(50, seeded(11), max_pairs=4)
    counted = (make_rows(strings, 10).tensors[1] != IGNORE).sum().item()
    total = -sum(string_log_probability(s, 4) for s in strings)
    assert math.isclose(generator_loss(strings, 4), total / counted)


def test_packed_generator_loss_conditions_on_the_packing():
    # context 6: a row is "\n" + strings; after a first "()" there is room for 2 more
    # characters, so the next string is "()"-long: log 2 saved; after "(())", no room
    strings = ["()", "()", "(())", "[]", "{}"]  # rows: "()()", "(())", "[]{}"
    assert len(make_rows(strings, 6)) == 3
    base = -sum(string_log_probability(s, max_pairs=2) for s in strings)
    first = {
        2: 2 / 3,
        4: 1 / 3,
    }  # lengths of the first strings of the three rows
    gain = math.log(first[2] * 2) * 2 + math.log(first[4] * 2) + 2 * math.log(2)
    expected = (base - gain) / sum(len(s) + 1 for s in strings)
    got = packed_generator_loss(strings, strings, 6, max_pairs=2)
    assert math.isclose(got, expected)
    # one pair only: nothing to learn from the packing
    ones = make_strings(200, seeded(12), max_pairs=1)
    assert math.isclose(
        packed_generator_loss(ones, ones, 16, 1), generator_loss(ones, 1)
    )
    # the chapter's setting: the packing is worth about 0.01 nats per token
    train, val = (
        make_strings(5_000, seeded(13)),
        make_strings(1_000, seeded(14)),
    )
    assert (
        0.005
        < generator_loss(val) - packed_generator_loss(val, train, 64)
        < 0.02
    )
    with pytest.raises(ValueError, match="starts with a string of length"):
        packed_generator_loss(["()" * 3], ["()"], 64, max_pairs=3)


def test_sample_statistics_by_hand():
    from helpers.tasks.brackets import sample_statistics

    known = {"()", "[]"}
    samples = ["()", "([])", "([])", "(]", None, "[" * 17 + "]" * 17]
    stats = sample_statistics(samples, known)
    assert stats["valid"] == 4 / 6  # (), ([]) twice, the long one
    assert stats["distinct"] == 4 / 6  # (), ([]), (], the long one
    assert stats["new"] == 4 / 6  # every finished one but ()
    assert stats["valid and new"] == 3 / 6
    assert stats["mean length"] == (2 + 4 + 4 + 2 + 34) / 5
    assert stats["valid mean length"] == (2 + 4 + 4 + 34) / 4
    assert stats["valid over 32"] == 1 / 4
    with pytest.raises(ValueError, match="no strings"):
        sample_statistics([], known)


def test_the_overfitting_run_measures_its_end_of_epoch_rows(monkeypatch):
    import pandas as pd

    import helpers.tasks.brackets as brackets

    seen = {}

    def fake_train(config, train_rows, val_rows):
        seen["config"] = config
        history = pd.DataFrame(
            {
                "epoch": [1, 1, 2, 2, 3, 3],
                "train_loss": [2.0, 1.8, 1.5, 1.2, 1.0, 0.6],
                # the rows between epochs have no validation loss
                "val_loss": [None, 1.9, None, 1.4, None, 1.7],
            }
        )
        return "model", history

    monkeypatch.setattr(brackets, "train_brackets", fake_train)
    model, epochs, measures = brackets.overfitting_run(seed=5)
    assert model == "model" and list(epochs["epoch"]) == [1, 2, 3]
    assert measures["best_epoch"] == 2
    assert measures["rise"] == pytest.approx(1.7 - 1.4)
    assert measures["gap"] == pytest.approx(1.7 - 0.6)
    config = seen["config"]
    assert config.seed == 5 and config.epochs == brackets.OVERFIT["epochs"]
    assert config.weight_decay == 0.0
