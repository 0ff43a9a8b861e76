"""Tests of helpers.tasks.sorting, chapter 9's token task, and of its exercise checker."""

from __future__ import annotations

import pytest
import torch
from conftest import seeded

from helpers import checks
from helpers.tasks.sorting import (
    BOS,
    EOS,
    PAD,
    VOCAB_SIZE,
    calibration,
    exposure_bias,
    generated_accuracy,
    make_sorting_dataset,
    next_to_write,
    permutation_hits,
    seed_results,
    sequence_accuracy,
    sequence_log_probs,
    sequence_loss,
)
from helpers.transformer import EncoderDecoderTransformer, TransformerConfig


def test_targets_are_the_sorted_digits_then_eos():
    source, decoder_input, target = make_sorting_dataset(
        300, 6, seeded()
    ).tensors
    assert source.shape == (300, 6) and target.shape == decoder_input.shape == (
        300,
        7,
    )
    for src, inp, tgt in zip(
        source.tolist(), decoder_input.tolist(), target.tolist(), strict=True
    ):
        digits = [t for t in src if t != PAD]
        assert src == digits + [PAD] * (
            6 - len(digits)
        )  # padding only at the end
        assert tgt == sorted(digits) + [EOS] + [PAD] * (6 - len(digits))
        assert inp == [BOS] + tgt[:-1]  # the target shifted right by one
    lengths = (source != PAD).sum(-1)
    assert lengths.min() == 1 and lengths.max() == 6
    assert source.max() < VOCAB_SIZE


def test_distinct_digits_and_fixed_lengths():
    source, _, _ = make_sorting_dataset(
        50, 8, seeded(), min_len=8, distinct=True
    ).tensors
    assert all(len(set(row)) == 8 for row in source.tolist())


def test_splits_are_seeded():
    first = make_sorting_dataset(20, 5, seeded(1)).tensors[0]
    assert torch.equal(first, make_sorting_dataset(20, 5, seeded(1)).tensors[0])
    assert not torch.equal(
        first, make_sorting_dataset(20, 5, seeded(2)).tensors[0]
    )


def test_loss_and_accuracy_ignore_padding():
    _, _, target = make_sorting_dataset(10, 5, seeded()).tensors
    perfect = 10.0 * torch.nn.functional.one_hot(target, VOCAB_SIZE).float()
    perfect[target == PAD] = 0.0  # anything at padded positions
    perfect[..., BOS][target == PAD] = 5.0
    assert sequence_accuracy(perfect, target) == 1.0
    assert sequence_loss(perfect, target) < 1e-3
    wrong = perfect.clone()
    wrong[0, 0] = wrong[0, 0].roll(1)
    assert sequence_accuracy(wrong, target) == pytest.approx(0.9)


def _untrained(seed=0):
    torch.manual_seed(seed)
    return EncoderDecoderTransformer(
        TransformerConfig(
            source_vocab=VOCAB_SIZE,
            target_vocab=VOCAB_SIZE,
            d_model=16,
            num_heads=2,
            num_layers=1,
            pad_id=PAD,
        )
    ).eval()


def test_generated_accuracy_of_an_untrained_model_is_low():
    model = _untrained()
    assert (
        generated_accuracy(model, make_sorting_dataset(50, 5, seeded())) < 0.2
    )


def test_label_smoothing_is_the_mixture_of_two_cross_entropies():
    _, _, target = make_sorting_dataset(10, 5, seeded()).tensors
    logits = torch.randn(*target.shape, VOCAB_SIZE, generator=seeded(1))
    real = target != PAD
    log_probs = logits[real].log_softmax(-1)
    hard = -log_probs.gather(-1, target[real][:, None]).mean()
    uniform = -log_probs.mean()
    expected = 0.9 * hard + 0.1 * uniform
    assert sequence_loss(
        logits, target, label_smoothing=0.1
    ).item() == pytest.approx(expected.item(), rel=1e-5)
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        sequence_loss(logits, target, label_smoothing=1.0)


def test_exposure_bias_of_an_untrained_model():
    """Greedy decoding makes the sequence accuracies equal; an untrained model is as lost
    after its first mistake with the true prefix as with its own (the chapter's failing case
    for its exposure-bias threshold of 0.3)."""
    data = make_sorting_dataset(200, 6, seeded())
    result = exposure_bias(_untrained(), data)
    assert result["sequence_tf"] == result["sequence_generated"]
    assert result["num_after"] > 0
    assert abs(result["after_tf"] - result["after_generated"]) < 0.3


def test_next_to_write_is_the_target_after_the_true_prefix():
    source, _, target = make_sorting_dataset(300, 6, seeded(3)).tensors
    real = target != PAD
    assert torch.equal(next_to_write(source, target)[real], target[real])


def _ids(*digits):
    return [digit + 3 for digit in digits]


def test_next_to_write_continues_the_sort_after_a_skip_or_a_repeat():
    source = torch.tensor([_ids(1, 1, 2, 3), _ids(1, 2, 3, 9)])
    written = torch.tensor(
        [
            [*_ids(1, 2, 3), EOS, PAD],  # a 1 skipped
            [*_ids(1, 1, 2, 3), EOS],  # a 1 repeated (9 then lost)
        ]
    )
    assert next_to_write(source, written).tolist() == [
        [*_ids(1, 1, 3), EOS, EOS],
        _ids(1, 2, 2, 3, 9),
    ]


class _Continues:
    """A stand-in that generates fixed tokens and whose logits name the sorted continuation
    of whatever prefix it reads (so teacher forcing is always right)."""

    def __init__(self, written):
        self.written = written

    def generate(self, source, start_id, num_steps, end_id=None):
        start = torch.full((len(source), 1), start_id)
        return torch.cat([start, self.written], dim=1)

    def __call__(self, source, decoder_input):
        read = torch.cat([decoder_input[:, 1:], decoder_input[:, :1]], dim=1)
        wanted = next_to_write(source, read)  # position t: after read[:, :t]
        return torch.nn.functional.one_hot(wanted, VOCAB_SIZE).float() * 10


def test_exposure_bias_aligns_after_a_skip_and_stops_at_the_model_end():
    source = torch.tensor([_ids(1, 1, 2, 3), [*_ids(1, 2), PAD, PAD]])
    target = torch.tensor(
        [[*_ids(1, 1, 2, 3), EOS], [*_ids(1, 2), EOS, PAD, PAD]]
    )
    decoder_input = torch.cat([torch.full((2, 1), BOS), target[:, :-1]], dim=1)
    data = torch.utils.data.TensorDataset(source, decoder_input, target)
    written = torch.tensor(
        [
            [*_ids(1, 2, 3), EOS, PAD],  # skips a 1, then sorts on
            [
                _ids(1)[0],
                EOS,
                *_ids(7, 7, 7),
            ],  # ends early: the 7s are not read
        ]
    )
    result = exposure_bias(_Continues(written), data)
    # after the first mistakes: the 3 and EOS of the first row, which continue the sort,
    # and nothing of the second (the 7s come after its own end)
    assert result["num_after"] == 2 and result["after_generated"] == 1.0
    # position by position, each would be compared with a shifted slot
    assert result["after_by_position"] == 0.0
    assert result["token_tf"] == result["after_tf"] == 1.0
    assert result["sequence_tf"] == 1.0 and result["sequence_generated"] == 0.0
    # of the six tokens written up to each row's end, the skip and the early end are wrong
    assert result["token_generated"] == pytest.approx(4 / 6)


def test_calibration_of_hand_built_predictions():
    _, _, target = make_sorting_dataset(50, 5, seeded()).tensors
    # probability 0.9 on the right token for every real token: confidence 0.9, accuracy 1
    logits = torch.full((*target.shape, VOCAB_SIZE), -10.0)
    logits.scatter_(-1, target[..., None], 0.0)
    logits[..., PAD] = 0.0  # pad ties at the padded positions, ignored
    logits += torch.nn.functional.one_hot(target, VOCAB_SIZE) * torch.log(
        torch.tensor(9.0)
    )
    ece, table = calibration(logits, target)
    confidence = (
        9 / (10 + (VOCAB_SIZE - 2) * torch.exp(torch.tensor(-10.0)))
    ).item()
    assert ece == pytest.approx(1 - confidence, abs=1e-6)
    assert table[:, 2].sum() == (target != PAD).sum() and table[8, 1] == 1.0
    with pytest.raises(TypeError, match="num_bins"):
        calibration(logits, target, num_bins=2.5)


def test_sequence_log_probs_stop_at_the_end_token():
    data = make_sorting_dataset(20, 5, seeded())
    source, decoder_input, target = data.tensors
    model = _untrained()
    written = torch.cat([decoder_input[:, :1], target], dim=1)
    with torch.no_grad():
        log_probs = model(source, decoder_input).log_softmax(-1)
    per_token = log_probs.gather(-1, target[..., None])[..., 0]
    expected = per_token.masked_fill(target == PAD, 0.0).sum(-1)
    torch.testing.assert_close(
        sequence_log_probs(model, source, written), expected
    )


def test_beam_accuracy_of_an_untrained_model_is_low_too():
    data = make_sorting_dataset(50, 5, seeded())
    assert generated_accuracy(_untrained(), data, beam_size=3) < 0.2


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
    arguments = {
        "num_sequences": 5,
        "max_len": 5,
        "generator": seeded(),
    } | kwargs
    with pytest.raises(error):
        make_sorting_dataset(**arguments)


# --------------------------------------------------------------------------- the checker


def test_check_decoder_input():
    def right(target, start_id):
        start = torch.full((target.shape[0], 1), start_id)
        return torch.cat([start, target[:, :-1]], dim=1)

    assert checks.check_decoder_input(right).startswith("Correct")
    with pytest.raises(AssertionError, match="shifted left"):
        checks.check_decoder_input(
            lambda t, s: torch.cat([t[:, 1:], t[:, :1]], dim=1)
        )
    with pytest.raises(AssertionError, match="drop the target's last token"):
        checks.check_decoder_input(
            lambda t, s: torch.cat([torch.full((4, 1), s), t], dim=1)
        )
    with pytest.raises(AssertionError, match="target itself"):
        checks.check_decoder_input(lambda t, s: t)
    with pytest.raises(AssertionError, match="return a tensor"):
        checks.check_decoder_input(lambda t, s: t.tolist())


class _PlantedCross:
    """A stand-in model whose decoder blocks have the given cross-attention
    weights, one ``(B, H, Tt, Ts)`` tensor per block, whatever the tokens."""

    def __init__(self, *blocks: torch.Tensor) -> None:
        self.blocks = blocks

    def get_attention_maps(self, source, decoder_input):
        return {"cross": list(self.blocks)}


def _one_hot_queries(positions) -> torch.Tensor:
    """Weights ``(B, Tt, Ts)`` with all of query ``t``'s weight on key
    ``positions[b][t]``."""
    return torch.nn.functional.one_hot(torch.tensor(positions), 3).float()


def test_permutation_hits_of_planted_heads():
    # digits 2, 0, 1 and 0, 2, 1 (tokens are digits + 3): the t-th smallest
    # sits at positions 1, 2, 0 and at 0, 2, 1
    source = torch.tensor([[5, 3, 4], [3, 5, 4]])
    decoder_input = torch.full((2, 4), BOS)  # 3 digits and the end token
    distinct = torch.utils.data.TensorDataset(
        source, decoder_input, decoder_input
    )
    # query 3 writes EOS: its weight (on key 1) does not count
    exact = _one_hot_queries([[1, 2, 0, 1], [0, 2, 1, 1]])
    first_key = _one_hot_queries([[0, 0, 0, 1], [0, 0, 0, 1]])
    backwards = _one_hot_queries([[0, 2, 1, 1], [1, 2, 0, 1]])
    half = _one_hot_queries([[1, 2, 0, 1], [1, 0, 2, 1]])
    model = _PlantedCross(
        torch.stack([exact, first_key], dim=1),  # block 0: heads 0, 1
        torch.stack([backwards, half], dim=1),  # block 1
    )
    # Slips this table catches: the ranks (argsort of argsort) in place of the
    # positions give 1/2 for the exact head, key t in place of the position of
    # the t-th smallest 1/6; the shares of one block or head for another
    # change the order of the entries.
    torch.testing.assert_close(
        permutation_hits(model, distinct),
        torch.tensor([[1, 1 / 3], [1 / 3, 1 / 2]]),
    )


def test_permutation_hits_refuses_repeated_digits_or_padding():
    model = _PlantedCross(torch.zeros(1, 1, 4, 3))
    for source in ([[4, 4, 5]], [[4, 5, PAD]]):
        tokens = torch.tensor(source)
        distinct = torch.utils.data.TensorDataset(tokens, tokens, tokens)
        with pytest.raises(ValueError, match="distinct digits"):
            permutation_hits(model, distinct)


def test_permutation_hits_of_an_untrained_model_is_a_table_of_shares():
    distinct = make_sorting_dataset(40, 6, seeded(3), min_len=6, distinct=True)
    hits = permutation_hits(_untrained(), distinct)
    assert hits.shape == (1, 2)  # decoder blocks x heads
    assert ((hits >= 0) & (hits <= 1)).all()


def test_the_shipped_seed_results_hold_what_chapter_9_reads():
    table = seed_results()
    assert list(table["seed"]) == [0, 1, 2, 3, 4]
    for column in [
        "model - rule mse",
        "follows the rule",
        "rule, point 2 adjacent",
        "rule, same + opposite",
        "cross-attention focus",
        "full: ece",
        "full ls=0.1: ece",
        "full ls=0.1: confidence",
    ]:
        assert table[column].notna().all(), column
    assert (
        table["machine"].nunique() == 1
        and table["command"].str.contains("margins").all()
    )
