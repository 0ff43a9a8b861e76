"""Print pip constraints pinning every dependency of pyproject.toml at its lower bound.

    python scripts/oldest_constraints.py > constraints.txt

``make test-oldest`` installs the package with these constraints and runs the unit tests and
chapters 1-4 on them, so that each ``>=`` in pyproject.toml is a version the book runs on,
not a guess. A dependency without a lower bound is an error: say what the book needs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def lower_bounds(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    dependencies = tomllib.loads(pyproject.read_text())["project"][
        "dependencies"
    ]
    bounds = {}
    for requirement in dependencies:
        match = re.fullmatch(
            r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)(,.*)?", requirement
        )
        if not match:
            raise SystemExit(
                f"{requirement!r} in pyproject.toml has no lower bound (name>=x.y)"
            )
        bounds[match[1]] = match[2]
    return bounds


if __name__ == "__main__":
    sys.stdout.write(
        "".join(
            f"{name}=={version}\n" for name, version in lower_bounds().items()
        )
    )
