"""Tests of helpers.tasks.sorting, chapter 9's token task, and of its exercise checker."""

from __future__ import annotations

import pytest
import torch

from helpers import checks
from helpers.tasks.sorting import (
    BOS,
    EOS,
    PAD,
    VOCAB_SIZE,
    generated_accuracy,
    make_sorting_dataset,
    sequence_accuracy,
    sequence_loss,
)
from helpers.transformer import EncoderDecoderTransformer


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_targets_are_the_sorted_digits_then_eos():
    source, decoder_input, target = make_sorting_dataset(300, 6, _generator()).tensors
    assert source.shape == (300, 6) and target.shape == decoder_input.shape == (300, 7)
    for src, inp, tgt in zip(source.tolist(), decoder_input.tolist(), target.tolist(), strict=True):
        digits = [t for t in src if t != PAD]
        assert src == digits + [PAD] * (6 - len(digits))  # padding only at the end
        assert tgt == sorted(digits) + [EOS] + [PAD] * (6 - len(digits))
        assert inp == [BOS] + tgt[:-1]  # the target shifted right by one
    lengths = (source != PAD).sum(-1)
    assert lengths.min() == 1 and lengths.max() == 6
    assert source.max() < VOCAB_SIZE


def test_distinct_digits_and_fixed_lengths():
    source, _, _ = make_sorting_dataset(50, 8, _generator(), min_len=8, distinct=True).tensors
    assert all(len(set(row)) == 8 for row in source.tolist())


def test_splits_are_seeded():
    first = make_sorting_dataset(20, 5, _generator(1)).tensors[0]
    assert torch.equal(first, make_sorting_dataset(20, 5, _generator(1)).tensors[0])
    assert not torch.equal(first, make_sorting_dataset(20, 5, _generator(2)).tensors[0])


def test_loss_and_accuracy_ignore_padding():
    _, _, target = make_sorting_dataset(10, 5, _generator()).tensors
    perfect = 10.0 * torch.nn.functional.one_hot(target, VOCAB_SIZE).float()
    perfect[target == PAD] = 0.0  # anything at padded positions
    perfect[..., BOS][target == PAD] = 5.0
    assert sequence_accuracy(perfect, target) == 1.0
    assert sequence_loss(perfect, target) < 1e-3
    wrong = perfect.clone()
    wrong[0, 0] = wrong[0, 0].roll(1)
    assert sequence_accuracy(wrong, target) == pytest.approx(0.9)


def test_generated_accuracy_of_an_untrained_model_is_low():
    torch.manual_seed(0)
    model = EncoderDecoderTransformer(VOCAB_SIZE, VOCAB_SIZE, 16, 2, 1, 1, pad_id=PAD).eval()
    assert generated_accuracy(model, make_sorting_dataset(50, 5, _generator())) < 0.2


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"num_sequences": 0}, ValueError),
        ({"max_len": 11, "distinct": True}, ValueError),
        ({"min_len": 6}, ValueError),
        ({"generator": None}, TypeError),
    ],
)
def test_make_sorting_dataset_rejects_bad_arguments(kwargs, error):
    arguments = {"num_sequences": 5, "max_len": 5, "generator": _generator()} | kwargs
    with pytest.raises(error):
        make_sorting_dataset(**arguments)


# --------------------------------------------------------------------------- the checker


def test_check_decoder_input():
    def right(target, start_id):
        start = torch.full((target.shape[0], 1), start_id)
        return torch.cat([start, target[:, :-1]], dim=1)

    assert checks.check_decoder_input(right).startswith("Correct")
    with pytest.raises(AssertionError, match="shifted left"):
        checks.check_decoder_input(lambda t, s: torch.cat([t[:, 1:], t[:, :1]], dim=1))
    with pytest.raises(AssertionError, match="drop the target's last token"):
        checks.check_decoder_input(lambda t, s: torch.cat([torch.full((4, 1), s), t], dim=1))
    with pytest.raises(AssertionError, match="target itself"):
        checks.check_decoder_input(lambda t, s: t)
    with pytest.raises(AssertionError, match="return a tensor"):
        checks.check_decoder_input(lambda t, s: t.tolist())
