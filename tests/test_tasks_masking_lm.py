"""Tests of helpers.tasks.masking_lm: chapter 2's sequences that repeat their
first half."""

import math

import pytest
import torch

from helpers.tasks.masking_lm import (
    HALF,
    VOCAB_SIZE,
    copy_sequences,
    loss_floor,
)


def test_the_second_half_repeats_the_first():
    tokens = copy_sequences(50, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (50, 2 * HALF) and tokens.dtype == torch.long
    assert torch.equal(tokens[:, :HALF], tokens[:, HALF:])
    assert int(tokens.min()) >= 0 and int(tokens.max()) < VOCAB_SIZE


def test_sequences_are_seeded_and_the_first_half_is_random():
    first = copy_sequences(400, 5, 7, torch.Generator().manual_seed(3))
    again = copy_sequences(400, 5, 7, torch.Generator().manual_seed(3))
    assert torch.equal(first, again)
    counts = torch.bincount(first[:, :5].flatten(), minlength=7)
    assert (counts > 200).all()  # each of 7 symbols about 2000 / 7 times


def test_the_floor_is_the_cost_of_guessing_the_random_half():
    # 2 * half - 1 targets; the half - 1 random ones cost log(vocab) each
    assert loss_floor(8, 16) == pytest.approx(7 / 15 * math.log(16))
    assert loss_floor(1, 16) == 0.0  # nothing to guess
    # a model that predicts uniformly on the random half and perfectly on the copy
    tokens = copy_sequences(64, generator=torch.Generator().manual_seed(1))
    targets = tokens[:, 1:]
    logits = torch.zeros(64, 2 * HALF - 1, VOCAB_SIZE)
    copied = torch.arange(2 * HALF - 1) >= HALF - 1
    logits[:, copied] = (
        100
        * torch.nn.functional.one_hot(targets[:, copied], VOCAB_SIZE).float()
    )
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets)
    assert loss.item() == pytest.approx(loss_floor(), abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"num_sequences": 0}, ValueError),
        ({"num_sequences": 2.0}, TypeError),
        ({"num_sequences": 2, "half": 0}, ValueError),
        ({"num_sequences": 2, "vocab_size": -1}, ValueError),
        ({"num_sequences": 2, "generator": 0}, TypeError),
    ],
)
def test_bad_arguments_say_what_was_wrong(kwargs, error):
    with pytest.raises(error):
        copy_sequences(**kwargs)
