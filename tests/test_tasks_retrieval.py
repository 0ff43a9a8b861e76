"""Tests of helpers.tasks.retrieval, chapter 13's length-generalization task."""

from __future__ import annotations

import pytest
import torch

from helpers.gpt import GPTConfig
from helpers.tasks.retrieval import (
    IGNORE,
    RetrievalConfig,
    make_retrieval_data,
    retrieval_accuracy,
    retrieval_targets,
    seed_results,
    train_retrieval,
)


def _targets_by_loop(sequence: list[int]) -> list[int]:
    targets = []
    for t, token in enumerate(sequence):
        earlier = [j for j in range(t) if sequence[j] == token]
        targets.append(sequence[earlier[-1] + 1] if earlier else IGNORE)
    return targets


def test_targets_follow_the_latest_earlier_occurrence():
    assert retrieval_targets(torch.tensor([[3, 1, 3, 2, 3, 3]])).tolist() == [
        [IGNORE, IGNORE, 1, IGNORE, 2, 3]
    ]
    tokens, targets = make_retrieval_data(20, 30, 5, seed=0)
    for row, expected in zip(tokens.tolist(), targets.tolist(), strict=True):
        assert _targets_by_loop(row) == expected


def test_the_rule_does_not_depend_on_the_length():
    tokens, targets = make_retrieval_data(4, 64, 8, seed=1)
    # the first half of a long sequence has the targets it would have on its own
    assert torch.equal(retrieval_targets(tokens[:, :32]), targets[:, :32])


def test_repeated_sequences_have_one_answer_at_varying_distances():
    tokens, targets = make_retrieval_data(200, 16, 20, seed=5, repeated=True)
    first, second = tokens[:, :8], tokens[:, 8:]
    assert all(
        len(set(row)) == 8 for row in first.tolist()
    )  # distinct in each half
    assert torch.equal(
        first.sort(dim=1).values, second.sort(dim=1).values
    )  # same tokens
    assert (targets[:, :8] == IGNORE).all() and (targets[:, 8:] != IGNORE).all()
    # where each second-half token occurred first: the distance varies across sequences
    where = (second[:, :1] == first).float().argmax(dim=1)
    assert len(set((8 - where).tolist())) > 4


def test_repeated_sequences_need_an_even_length_and_enough_tokens():
    with pytest.raises(ValueError, match="even seq_len"):
        make_retrieval_data(2, 9, 20, seed=0, repeated=True)
    with pytest.raises(ValueError, match="vocab_size >= seq_len / 2"):
        make_retrieval_data(2, 16, 5, seed=0, repeated=True)


def test_data_are_seeded():
    first, second = (
        make_retrieval_data(3, 10, 6, seed=2),
        make_retrieval_data(3, 10, 6, seed=2),
    )
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not torch.equal(first[0], make_retrieval_data(3, 10, 6, seed=3)[0])


def test_a_model_that_knows_the_rule_scores_one():
    tokens, targets = make_retrieval_data(5, 20, 6, seed=4)

    class Oracle(torch.nn.Module):
        def forward(self, tokens):
            answer = retrieval_targets(tokens).clamp(min=0)
            return torch.nn.functional.one_hot(answer, 6).float()

    assert retrieval_accuracy(Oracle(), tokens, targets) == 1.0


def tiny_config(context_length, **fields):
    """A retrieval run small enough for a unit test: 64 tokens, trained on length 8."""
    return RetrievalConfig(
        model=GPTConfig(vocab_size=64, context_length=context_length),
        train_len=8,
        **fields,
    )


def test_training_returns_a_model_and_an_accuracy_per_length():
    config = tiny_config(
        context_length=16,
        steps=3,
        batch_size=4,
        test_lengths=(8, 16),
        num_test=5,
    )
    model, accuracy = train_retrieval("alibi", 0, config)
    assert set(accuracy) == {8, 16} and all(
        0 <= a <= 1 for a in accuracy.values()
    )
    assert model.context_length == 16 and not model.training


def test_scale_brings_the_embeddings_to_one_size():
    config = tiny_config(
        context_length=8, steps=1, batch_size=2, test_lengths=(8,), num_test=2
    )
    tokens = torch.arange(8)[None]

    def sizes(
        scale,
    ):  # root-mean-square of the tokens and of the positions, as the model adds them
        model, _ = train_retrieval("sinusoidal", 0, config, scale=scale)
        token_rms = model.token_embedding(tokens).pow(2).mean().sqrt().item()
        return token_rms, model.position_embedding.pe.pow(
            2
        ).mean().sqrt().item()

    token_rms, position_rms = sizes(None)
    assert position_rms / token_rms > 20  # the mismatch chapter 13 shows
    token_rms, position_rms = sizes("encoding")
    assert 0.5 < position_rms / token_rms < 2
    token_rms, position_rms = sizes("tokens")
    assert 2 < position_rms / token_rms < 8  # x sqrt(64) = 8 narrows the gap
    with pytest.raises(ValueError, match="scale must be one of"):
        train_retrieval("sinusoidal", 0, config, scale="both")
    with pytest.raises(ValueError, match="needs positions='sinusoidal'"):
        train_retrieval("rope", 0, config, scale="encoding")


def test_shipped_seed_results_cover_every_run_on_five_seeds():
    table = seed_results()
    assert {
        "positions",
        "scale",
        "seed",
        "32",
        "64",
        "128",
        "machine",
        "command",
    } <= set(table)
    runs = table.groupby(["numerics", "positions", "scale"])["seed"].nunique()
    assert (
        runs.loc["machine default"].min() >= 5
        and len(runs.loc["machine default"]) == 7
    )
    assert table[["32", "64", "128"]].stack().between(0, 1).all()


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="positions must be one of"):
        train_retrieval("relative", 0)
    with pytest.raises(TypeError, match="RetrievalConfig"):
        train_retrieval("rope", 0, {"steps": 3})
    with pytest.raises(ValueError, match="vocab_size"):
        make_retrieval_data(2, 5, 1, seed=0)
    with pytest.raises(TypeError, match="int64"):
        retrieval_targets(torch.zeros(2, 5))
