"""Private input checks shared by :mod:`helpers.attention`, :mod:`helpers.positional` and
:mod:`helpers.transformer`, so that the same mistake gets the same message everywhere."""

from __future__ import annotations


def check_positive_int(name: str, value) -> int:
    """Raise TypeError unless ``value`` is an int (not a bool), ValueError unless it is >= 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        kind = type(value).__name__
        raise TypeError(
            f"{name} must be a positive int, got {kind} ({value!r}): {name} must be an int, "
            f"not a {kind}"
        )
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}; pass a value >= 1")
    return value


def check_probability(name: str, value, hint: str = "use 0.0 to switch it off") -> float:
    """Raise TypeError unless ``value`` is a real number, ValueError unless it is in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} ({value!r})")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}; {hint}")
    return float(value)
