"""Tests of helpers._validate: one rule for the exception type, for every kind of check.

TypeError: the value is of the wrong kind (a float where an int is needed, a string where a
number is, a bool where a number is, a class where an instance is, an integer tensor where a
float one is). ValueError: the right kind with a wrong value. The public functions and classes
are tested with these errors in their own test modules; this one pins the rule itself on the
checks of numbers and tensors. (The checks of fit's arguments are tested through fit and
evaluate, in tests/test_training.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from helpers import _validate as check
from helpers.positional import angular_speeds

# --------------------------------------------------------------------------- numbers

RIGHT = [
    (check.positive_int, 3),
    (check.positive_int, np.int64(3)),
    (check.non_negative_int, 0),
    (check.real, 2),
    (check.real, np.float32(0.5)),
    (check.positive_number, 1e-3),
    (check.non_negative_number, 0),
    (check.probability, 0.0),
    (check.boolean, False),
]


@pytest.mark.parametrize(("validate", "value"), RIGHT)
def test_a_right_value_passes_and_the_check_returns_nothing(validate, value):
    """A check only checks: the caller keeps its own value
    (tests/test_structure.py holds every check of helpers._validate to it)."""
    assert validate("x", value) is None


WRONG_KIND = [
    (
        check.positive_int,
        8.0,
        r"x must be a positive int, got float \(8.0\); pass e.g. x=8",
    ),
    (check.positive_int, "8", "x must be a positive int, got str"),
    (check.positive_int, True, "x must be a positive int, got bool"),
    (check.positive_int, None, "x must be a positive int, got NoneType"),
    (check.non_negative_int, 1.0, "x must be a non-negative int, got float"),
    (check.real, "0.1", "x must be a number, got str.*not a str"),
    (check.real, True, "x must be a number, got bool"),
    (check.real, torch.tensor(0.1), "x must be a number, got Tensor"),
    (check.positive_number, "1", "x must be a number, got str"),
    (check.non_negative_number, [1.0], "x must be a number, got list"),
    (check.probability, "0.1", "x must be a number, got str"),
    (check.boolean, 1, r"x must be True or False, got int \(1\)"),
    (check.boolean, "yes", "x must be True or False, got str"),
]


@pytest.mark.parametrize(("validate", "value", "message"), WRONG_KIND)
def test_the_wrong_kind_of_number_is_a_type_error(validate, value, message):
    with pytest.raises(TypeError, match=message):
        validate("x", value)


WRONG_VALUE = [
    (
        check.positive_int,
        0,
        "x must be a positive int, got 0; pass a value >= 1",
    ),
    (check.positive_int, -3, "x must be a positive int, got -3"),
    (check.non_negative_int, -1, "x must be >= 0, got -1"),
    (check.real, float("nan"), "x must be finite, got nan"),
    (check.real, float("inf"), "x must be finite, got inf"),
    (check.positive_number, 0.0, "x must be > 0, got 0.0"),
    (check.non_negative_number, -0.5, "x must be >= 0, got -0.5"),
    (
        check.probability,
        1.0,
        r"x must be in \[0, 1\), got 1.0; use 0.0 to switch it off",
    ),
    (check.probability, -0.1, r"x must be in \[0, 1\)"),
]


@pytest.mark.parametrize(("validate", "value", "message"), WRONG_VALUE)
def test_a_wrong_value_of_the_right_kind_is_a_value_error(
    validate, value, message
):
    with pytest.raises(ValueError, match=message):
        validate("x", value)


def test_hints_are_appended_to_the_message():
    with pytest.raises(ValueError, match="x must be > 0, got -1.0; a width"):
        check.positive_number("x", -1, "a width")
    with pytest.raises(
        ValueError, match=r"x must be in \[0, 1\), got 2.0; a hint"
    ):
        check.probability("x", 2, "a hint")


@pytest.mark.parametrize(
    ("d_model", "num_heads", "error", "message"),
    [
        (
            12,
            5,
            ValueError,
            r"d_model=12 is not divisible by num_heads=5.*\[1, 2, 3, 4, 6, 12\]",
        ),
        (12.0, 3, TypeError, "d_model must be a positive int"),
        (12, 3.0, TypeError, "num_heads must be a positive int"),
        (12, 0, ValueError, "num_heads must be a positive int, got 0"),
    ],
)
def test_head_width(d_model, num_heads, error, message):
    assert check.head_width(12, 3) is None
    with pytest.raises(error, match=message):
        check.head_width(d_model, num_heads)


def test_even_width_and_encoding_base():
    # helpers.positional's own checks, through the function that has them
    assert angular_speeds(8, 10000.0).shape == (4,)
    with pytest.raises(
        ValueError, match="d_model must be even.*use d_model=8 \\(or 6\\)"
    ):
        angular_speeds(7)
    with pytest.raises(
        TypeError, match="d_model must be a positive int, got float"
    ):
        angular_speeds(8.0)
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        angular_speeds(8, 1)
    with pytest.raises(TypeError, match="base must be a number, got str"):
        angular_speeds(8, "10000")


# --------------------------------------------------------------------------- tensors


def test_tensor_kind_dtype_and_dimensions():
    x = torch.zeros(2, 3)
    assert check.tensor("x", x, floating=True, min_ndim=2) is None
    with pytest.raises(
        TypeError, match="x must be a torch.Tensor, got ndarray"
    ):
        check.tensor("x", np.zeros((2, 3)))
    with pytest.raises(
        TypeError,
        match=r"x must be a floating-point tensor, got dtype torch\.int64",
    ):
        check.tensor("x", torch.zeros(2, 3, dtype=torch.long), floating=True)
    with pytest.raises(
        ValueError, match=r"at least 3 dimensions, got shape \(2, 3\)"
    ):
        check.tensor("x", x, min_ndim=3)


def test_dtypes_must_agree():
    check.same_dtype(a=torch.zeros(1), b=torch.ones(2))
    with pytest.raises(
        TypeError,
        match=r"a, b must share a dtype, got torch\.float32, torch\.float64",
    ):
        check.same_dtype(
            a=torch.zeros(1), b=torch.zeros(1, dtype=torch.float64)
        )
    with pytest.raises(
        TypeError, match=r"x has dtype torch\.float64 but Linear's parameters"
    ):
        check.module_dtype(
            "x", torch.zeros(1, dtype=torch.float64), nn.Linear(1, 1)
        )
    check.module_dtype(
        "x", torch.zeros(1, dtype=torch.float64), nn.ReLU()
    )  # no parameters


def test_sequence_checks_kind_then_shape():
    who = "Layer"
    check.sequence("x", torch.zeros(2, 3, 4), 4, who, max_len=3)
    with pytest.raises(
        TypeError, match=r"Layer expects a torch\.Tensor of shape \(B, T, D\)"
    ):
        check.sequence("x", [[0.0] * 4], 4, who)
    with pytest.raises(
        TypeError, match=r"floating-point x, got dtype torch\.int64"
    ):
        check.sequence("x", torch.zeros(2, 3, 4, dtype=torch.long), 4, who)
    with pytest.raises(ValueError, match=r"shape \(B, T, D=4\), got \(3, 4\)"):
        check.sequence("x", torch.zeros(3, 4), 4, who)
    with pytest.raises(
        ValueError, match="built for d_model=4 but x has width 5"
    ):
        check.sequence("x", torch.zeros(2, 3, 5), 4, who)
    with pytest.raises(ValueError, match="T=3 exceeds max_len=2"):
        check.sequence("x", torch.zeros(2, 3, 4), 4, who, max_len=2)


def test_masks_must_be_boolean_tensors():
    mask = torch.ones(2, 2, dtype=torch.bool)
    assert check.bool_mask(mask) is None
    with pytest.raises(
        TypeError,
        match=r"mask must be boolean \(True = may attend\).*mask == 0",
    ):
        check.bool_mask(torch.zeros(2, 2))
    with pytest.raises(
        TypeError, match="mask must be a boolean torch.Tensor or None, got list"
    ):
        check.bool_mask([[True]])


def test_token_ids():
    check.tokens(torch.zeros(2, 3, dtype=torch.long), 5)
    with pytest.raises(
        TypeError, match=r"int64 tensor of shape \(B, T\), got torch\.int32"
    ):
        check.tokens(torch.zeros(2, 3, dtype=torch.int32), 5)
    with pytest.raises(ValueError, match=r"0 \.\. 4, got values from 0 to 5"):
        check.tokens(torch.tensor([[0, 5]]), 5)
    with pytest.raises(
        ValueError, match="T=3 tokens, more than the model's context of 2"
    ):
        check.tokens(torch.zeros(1, 3, dtype=torch.long), 5, max_len=2)
