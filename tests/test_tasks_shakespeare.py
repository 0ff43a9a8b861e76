"""The Shakespeare text, its tokenizer and split, the n-gram baseline and the training run."""

import math
from collections import Counter

import pytest
import torch

from helpers.gpt import GPTConfig
from helpers.tasks import shipped_file, shipped_table
from helpers.tasks.shakespeare import (
    TEXT_FILE,
    CharTokenizer,
    KneserNeyModel,
    RandomWindows,
    ShakespeareConfig,
    attention_maps,
    held_out_loss,
    held_out_windows,
    known_word_fraction,
    load_text,
    split_text,
    train_shakespeare,
    words,
)


@pytest.fixture(scope="module")
def text():
    return load_text()


def test_the_shipped_text_is_the_eight_plays(text):
    import hashlib

    assert len(text) == 1_055_123
    assert len(set(text)) == 76
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert digest.startswith("cbf00ce004f5e570")  # helpers/tasks/shakespeare.md
    for title in (
        "HAMLET",
        "MACBETH",
        "KING LEAR",
        "OTHELLO",
        "ROMEO AND JULIET",
    ):
        assert title in text
    assert "Gutenberg" not in text and "\r" not in text


def test_tokenizer_round_trips_and_refuses_unknown_characters(text):
    tokenizer = CharTokenizer(text)
    assert tokenizer.vocab_size == 76
    line = "To be, or not to be,"
    ids = tokenizer.encode(line)
    assert ids.dtype == torch.long and tokenizer.decode(ids) == line
    with pytest.raises(ValueError, match=r"\['é'\] are not in the vocabulary"):
        tokenizer.encode("café")
    with pytest.raises(ValueError, match="empty"):
        CharTokenizer("")


def test_split_holds_out_the_last_tenth_by_position(text):
    train, held = split_text(text)
    assert train + held == text
    assert len(held) == pytest.approx(len(text) / 10, abs=1)


def test_random_windows_are_shifted_by_one_and_reproducible():
    ids = torch.arange(1000)
    batches = list(
        RandomWindows(ids, 8, 4, 3, torch.Generator().manual_seed(0))
    )
    again = list(RandomWindows(ids, 8, 4, 3, torch.Generator().manual_seed(0)))
    assert len(batches) == 3
    for (x, y), (x2, _) in zip(batches, again, strict=True):
        assert x.shape == y.shape == (4, 8)
        assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(
            y[:, -1], x[:, -1] + 1
        )
        assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="longer than context_length"):
        RandomWindows(torch.arange(5), 8, 4, 3, torch.Generator())


def test_held_out_windows_score_each_character_once():
    windows = held_out_windows(torch.arange(21), 4)
    inputs, targets = windows.tensors
    assert inputs.shape == targets.shape == (5, 4)
    assert targets.flatten().tolist() == list(range(1, 21))


def test_kneser_ney_is_a_distribution_and_orders_help(text):
    train, held = split_text(text[:200_000])
    vocab = sorted(set(text))
    losses = {}
    for order in (1, 3, 5):
        model = KneserNeyModel(train, order, vocab)
        for context in ("", "the ki", "zqzqzq", "Ham"):
            total = sum(model.probability(context, c) for c in vocab)
            assert total == pytest.approx(1.0, abs=1e-9)
        losses[order] = model.held_out_loss(held[:5000], 64)
    assert losses[1] > losses[3] > losses[5]
    # a uniform model would pay log V per character; unigram frequencies beat it
    assert losses[1] < math.log(len(vocab))


def test_kneser_ney_counts_continuations_at_lower_orders():
    # "b" follows "a" only, many times; "c" follows three different characters once each.
    model = KneserNeyModel("ab" * 20 + "xc yc zc", 2, sorted(set("abcxyz ")))
    assert model.counts[1][""]["b"] == 1  # one distinct left neighbour, not 20
    assert model.counts[1][""]["c"] == 3
    assert (
        model.counts[2]["a"]["b"] == 20
    )  # the highest order counts occurrences


@pytest.mark.parametrize("sample", ["abracadabra, cadabra!", "abc", "a"])
def test_kneser_ney_raw_tables_count_every_occurrence(sample):
    """The lower orders' raw tables are derived from the order-grams' counts plus
    the text's tail; they must equal a direct count of every k-gram, also for a
    text shorter than the order."""
    model = KneserNeyModel(sample, 5, sorted(set(sample)))
    for k in range(1, 5):
        direct = Counter(sample[i : i + k] for i in range(len(sample) - k + 1))
        derived = Counter(
            {
                h + c: n
                for h, row in model.raw[k].items()
                for c, n in row.items()
            }
        )
        assert derived == direct, k


def test_kneser_ney_with_a_short_context_is_the_lower_order_model(text):
    """At the start of a window fewer than order - 1 characters are known: the highest order
    used then counts occurrences, so a 6-gram model given 2 characters predicts exactly as a
    3-gram model does (with continuation counts at that order it would not)."""
    train = text[:100_000]
    vocab = sorted(set(text))
    six, three = (
        KneserNeyModel(train, 6, vocab),
        KneserNeyModel(train, 3, vocab),
    )
    for context in ("th", "Ro", "e "):
        for char in "ea ,\n":
            assert six.probability(context, char) == pytest.approx(
                three.probability(context, char), rel=1e-12
            )
    assert (
        six.raw[3]["th"]["e"] > six.counts[3]["th"]["e"]
    )  # raw, not continuations


def test_a_short_run_learns_and_reports_the_held_out_loss(text):
    tokenizer = CharTokenizer(text)
    train, held = split_text(text[:100_000])
    model_config = GPTConfig(
        vocab_size=76, context_length=16, d_model=32, num_layers=1, num_heads=2
    )
    config = ShakespeareConfig(
        model=model_config,
        batch_size=16,
        steps=60,
        evaluations=2,
        warmup_steps=5,
    )
    held_ids = tokenizer.encode(held)
    model, history = train_shakespeare(
        config, tokenizer.encode(train), held_ids
    )
    val = history["val_loss"].dropna()
    assert len(val) == 2 and val.iloc[-1] < val.iloc[0] < math.log(76) + 0.5
    assert held_out_loss(model, held_ids) == pytest.approx(
        val.iloc[-1], rel=1e-5
    )
    with pytest.raises(ValueError, match="multiple of"):
        train_shakespeare(
            ShakespeareConfig(steps=10, evaluations=3), held_ids, held_ids
        )


def test_ngram_samples_and_known_words(text):
    train, _ = split_text(text[:50_000])
    model = KneserNeyModel(train, 4, sorted(set(text)))
    sample = model.sample("KING.\n", 300, torch.Generator().manual_seed(0))
    assert sample.startswith("KING.\n") and len(sample) == 306
    vocabulary = set(words(train))
    assert words("To be, or NOT to be: that's it") == [
        "to", "be", "or", "not", "to", "be", "that's", "it",
    ]  # fmt: skip
    assert known_word_fraction("to be or xqzzy", {"to", "be", "or"}) == 0.75
    # a 4-gram spells most words right; characters drawn uniformly do not
    assert known_word_fraction(sample[6:], vocabulary) > 0.5
    noise = "".join(
        sorted(set(text))[i]
        for i in torch.randint(76, (300,), generator=torch.Generator())
    )
    assert known_word_fraction(noise + " a", vocabulary) < 0.3
    with pytest.raises(ValueError, match="no words"):
        known_word_fraction("?!", vocabulary)


def test_attention_maps_are_causal_distributions():
    from helpers.gpt import GPT

    model = GPT(GPTConfig(vocab_size=10, context_length=8, num_layers=2))
    maps = attention_maps(model, torch.arange(6))
    assert maps.shape == (2, 4, 6, 6)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 4, 6))
    assert torch.all(maps.triu(1) == 0)  # no query reads a later key
    with pytest.raises(ValueError, match="1 to 8 tokens"):
        attention_maps(model, torch.arange(9))


def test_a_missing_shipped_file_says_how_to_get_it():
    with pytest.raises(
        FileNotFoundError, match="no_such.csv is not in .*: run `x`"
    ):
        shipped_file("no_such.csv", "run `x`")
    with pytest.raises(FileNotFoundError, match="run `make it`, or reinstall"):
        shipped_table("no_such.csv", "make it")
    assert (
        shipped_file(TEXT_FILE, "unused").read_text(encoding="utf-8")
        == load_text()
    )


def test_the_shipped_weights_score_the_recorded_held_out_loss():
    """pretrained() loads the weights that scripts/train_shakespeare_weights.py wrote; their
    held-out loss, recomputed here, is the one recorded beside them, and meets the book's
    goal (at most 1.47 nats per character). The same model with fresh weights scores far
    worse, so the comparison can fail."""
    from helpers.gpt import GPT
    from helpers.tasks.shakespeare import pretrained, pretrained_record

    record = pretrained_record()
    model, tokenizer = pretrained()
    assert not model.training
    held = tokenizer.encode(split_text(load_text())[1])
    loss = held_out_loss(model, held)
    assert abs(loss - record["held_out_loss"]) < 2e-3, (loss, record)
    assert record["held_out_loss"] <= 1.47
    torch.manual_seed(0)
    fresh = GPT(model.config).eval()
    assert held_out_loss(fresh, held[:20_000]) > 3.0


def test_the_shipped_record_names_its_recipe_and_machine():
    from helpers.tasks.shakespeare import ShakespeareConfig, pretrained_record

    record = pretrained_record()
    for key in ("commit", "machine", "command", "train_seconds", "recipe"):
        assert record[key], key
    chapter = ShakespeareConfig()
    # the chapter's model, deeper: only the depth differs
    shipped_model = record["recipe"]["model"]
    assert shipped_model["num_layers"] > chapter.model.num_layers
    assert {**shipped_model, "num_layers": chapter.model.num_layers} == vars(
        chapter.model
    )
    assert record["recipe"]["batch_size"] == chapter.batch_size
    assert (
        record["recipe"]["steps"] > chapter.steps
    )  # longer than the chapter's


def test_the_weights_script_rebuilds_the_recorded_recipe_from_its_command():
    """The shipped weights' command, run today, trains the recipe their record names (the
    chapter's live model is shallower; the script's defaults keep the shipped depth)."""
    import dataclasses
    import shlex

    from conftest import load_script

    from helpers.tasks.shakespeare import pretrained_record

    record = pretrained_record()
    script = load_script("train_shakespeare_weights.py")
    python, path, *argv = shlex.split(record["command"])
    assert (python, path) == ("python", "scripts/train_shakespeare_weights.py")
    config = script.recipe(script.build_parser().parse_args(argv))
    assert dataclasses.asdict(config) == record["recipe"]
