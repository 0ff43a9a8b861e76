"""Tests of helpers.masks: every mask rule of the package lives there, and what each returns.

The masks chapters 2 and 12 introduce (causal, padding, additive, position and sliding-window
masks) are tested against attention in tests/test_attention.py and tests/test_efficient.py;
here: one home, and the masks that other modules used to build by hand.
"""

from __future__ import annotations

import ast

import pytest
import torch
from conftest import ROOT

from helpers import attention, efficient, masks
from helpers.masks import (
    causal_mask,
    causal_padding_mask,
    earlier_mask,
    padding_mask,
    position_mask,
    token_padding_mask,
)

# Modules allowed to build a triangle outside masks.py, and why.
TRIANGLES_ELSEWHERE = {
    # recognizes PyTorch's own causal mask (True = blocked) to refuse it; masks imports
    # _validate, so _validate cannot import masks
    "_validate.py",
}


@pytest.mark.parametrize("module", [attention, efficient])
def test_masks_are_imported_from_masks_alone(module):
    """The modules that use masks take them from helpers.masks and export none: one
    import home."""
    assert not set(module.__all__) & set(masks.__all__)
    assert efficient.position_mask is masks.position_mask
    assert masks.position_mask.__module__ == "helpers.masks"


def test_every_mask_function_is_defined_in_masks():
    """No other module defines a ``*_mask`` function (exercise checkers and argument
    checks excepted: ``check_*``, ``_check_*`` and _validate's) or builds a triangle with
    tril/triu."""
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        if path.name == "masks.py":
            continue
        relative = path.relative_to(ROOT / "helpers").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.endswith(
                "_mask"
            ):
                assert (
                    node.name.removeprefix("_").startswith("check_")
                    or relative == "_validate.py"
                ), (
                    f"helpers/{relative} defines {node.name}: masks live in helpers/masks.py"
                )
            called = getattr(node, "func", None)
            if getattr(called, "attr", None) in ("tril", "triu"):
                assert relative in TRIANGLES_ELSEWHERE, (
                    f"helpers/{relative}:{node.lineno} builds a triangular mask: use "
                    "helpers.masks (causal_mask, earlier_mask, position_mask)"
                )


def test_every_public_mask_is_exported():
    public = {name for name in vars(masks) if name.endswith("_mask")}
    assert public == set(masks.__all__)


def test_earlier_mask_is_the_causal_mask_without_its_diagonal():
    T = 5
    assert torch.equal(
        earlier_mask(T), causal_mask(T) & ~torch.eye(T, dtype=torch.bool)
    )
    positions = torch.arange(T)
    assert torch.equal(
        earlier_mask(T),
        position_mask(positions, positions) & (positions[:, None] != positions),
    )
    assert not earlier_mask(1).any()  # the first token has nothing before it
    with pytest.raises(ValueError, match="T"):
        earlier_mask(0)


def test_token_padding_mask_marks_the_real_tokens():
    tokens = torch.tensor([[5, 6, 7, 0], [5, 0, 0, 0]])
    mask = token_padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 1, 4) and mask.dtype == torch.bool
    assert torch.equal(
        mask, padding_mask([3, 1], 4)
    )  # padding at the end: the lengths' mask
    assert (
        token_padding_mask(tokens, pad_id=None) is None
    )  # no padding token: every key is real


def test_causal_padding_mask_is_causal_and_never_a_padding_key():
    tokens = torch.tensor([[5, 6, 0], [5, 0, 0]])
    mask = causal_padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 3, 3)
    assert torch.equal(mask, causal_mask(3) & padding_mask([2, 1], 3))
    assert not mask[..., 2].any()  # the padding key, for every query
    assert torch.equal(causal_padding_mask(tokens, pad_id=None), causal_mask(3))
