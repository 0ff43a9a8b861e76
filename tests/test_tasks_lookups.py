"""Tests of helpers.tasks.lookups, the lookup tasks of chapters 3 and 4."""

from __future__ import annotations

import pytest
import torch

from helpers.tasks.lookups import (
    lookup_weights,
    recall_batch,
    recall_codes,
    two_lookup_batch,
)


def test_two_lookups_targets_are_the_symbols_at_the_two_addresses():
    generator = torch.Generator().manual_seed(0)
    request, memory, targets, addresses = two_lookup_batch(
        64, num_tokens=6, num_symbols=5, generator=generator
    )
    assert request.shape == (64, 1, 12)
    assert memory.shape == (64, 6, 11)
    assert targets.shape == addresses.shape == (64, 2)
    assert (addresses[:, 0] != addresses[:, 1]).all()
    # the memory's first features are the addresses, in order
    torch.testing.assert_close(
        memory[:, :, :6], torch.eye(6).expand(64, -1, -1)
    )
    symbols = memory[:, :, 6:].argmax(-1)
    assert (memory[:, :, 6:].sum(-1) == 1).all()
    for b in range(64):
        first, second = addresses[b].tolist()
        assert targets[b].tolist() == [symbols[b, first], symbols[b, second]]
        assert request[b, 0, first] == 1 and request[b, 0, 6 + second] == 1
        assert request[b].sum() == 2


def test_recall_target_is_the_symbol_at_the_address():
    generator = torch.Generator().manual_seed(1)
    codes = recall_codes(16, num_tokens=4, num_symbols=3, generator=generator)
    assert codes[0].shape == (4, 16) and codes[1].shape == (3, 16)
    request, memory, targets, addresses = recall_batch(32, codes, generator)
    assert request.shape == (32, 1, 16) and memory.shape == (32, 4, 16)
    torch.testing.assert_close(request[:, 0], codes[0][addresses])
    # what is left of each memory token once its address is taken away is
    # the code of its symbol, and the target is the symbol at the address
    rest = memory - codes[0]
    symbols = (rest[..., None, :] - codes[1]).abs().sum(-1).argmin(-1)
    torch.testing.assert_close(rest, codes[1][symbols])
    assert targets.tolist() == symbols[torch.arange(32), addresses].tolist()


def test_batches_are_seeded():
    first = two_lookup_batch(8, generator=torch.Generator().manual_seed(3))
    again = two_lookup_batch(8, generator=torch.Generator().manual_seed(3))
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)


def test_lookup_weights_reads_the_weight_on_each_address():
    weights = torch.zeros(2, 2, 1, 4)
    weights[0, 0, 0, 1] = weights[1, 0, 0, 2] = 1.0  # head 0: first address
    weights[0, 1, 0, 3] = weights[1, 1, 0, 0] = 1.0  # head 1: second address
    addresses = torch.tensor([[1, 3], [2, 0]])
    torch.testing.assert_close(lookup_weights(weights, addresses), torch.eye(2))


def test_bad_arguments_say_what_to_pass():
    codes = recall_codes(4)
    for make in (
        two_lookup_batch,
        lambda n, **kw: recall_batch(n, codes, **kw),
    ):
        with pytest.raises(ValueError, match="batch_size"):
            make(0)
        with pytest.raises(TypeError, match="generator"):
            make(4, generator=0)
    with pytest.raises(TypeError, match="recall_codes"):
        recall_batch(4, codes[0])
    with pytest.raises(ValueError, match="width"):
        recall_codes(0)


def test_two_lookups_need_two_tokens():
    with pytest.raises(ValueError, match="num_tokens >= 2"):
        two_lookup_batch(4, num_tokens=1)
