"""helpers.tasks.warmup: the encoder chapter's deep stacks with and without warm-up."""

import torch

from helpers.tasks.warmup import (
    ReversalStack,
    reversal_batch,
    shipped_runs,
    train_stack,
)


def test_the_batch_is_a_sequence_and_its_reversal():
    inputs, targets = reversal_batch(4, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (4, 12)
    assert torch.equal(targets, inputs.flip(1)) and int(inputs.max()) < 10


def test_the_stack_reads_tokens_and_writes_logits_per_position():
    for norm_first in (False, True):
        model = ReversalStack(norm_first, num_layers=2)
        assert model(torch.zeros(3, 12, dtype=torch.long)).shape == (3, 12, 10)
        assert model.encoder.config.norm_first is norm_first


def test_training_is_seeded_and_reports_every_step():
    first = train_stack(norm_first=True, warmup_steps=2, seed=0, steps=4)
    again = train_stack(norm_first=True, warmup_steps=2, seed=0, steps=4)
    assert len(first["losses"]) == 4 and 0 <= first["accuracy"] <= 1
    assert first == again


def test_the_shipped_grid_holds_the_chapters_claims():
    """Pre-LN learns on every seed with or without warm-up; post-LN never without it, and
    with it on most seeds, each above every run without."""
    grid = shipped_runs()
    assert grid["seed"].nunique() >= 3
    assert set(grid["machine"]) and set(grid["command"])
    accuracy = grid.pivot_table(
        index="seed", columns=["norm", "warmup"], values="accuracy"
    )
    assert (accuracy[("pre-LN", 0)] > 0.95).all()
    assert (accuracy[("pre-LN", 100)] > 0.95).all()
    assert accuracy[("post-LN", 0)].max() < 0.5
    assert accuracy[("post-LN", 100)].median() > 0.95
    assert (
        accuracy[("post-LN", 100)].min() > accuracy[("post-LN", 0)].max() + 0.2
    )
