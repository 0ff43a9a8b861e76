"""Move the book to a new version in every file that names it; tag it once it is committed.

    python scripts/release.py 0.5.0          # bump: rewrite the version everywhere
    python scripts/release.py 0.5.0 --tag    # the bump is committed: tag it v0.5.0

(``make release VERSION=0.5.0`` and ``make release-tag VERSION=0.5.0``.)

The version lives in ``pyproject.toml`` and ``helpers.__version__``; every notebook's setup
cell installs ``helpers`` from the tag ``v<version>`` (both the ``.py`` twin and the stored
``.ipynb``: the install line is source, not output, so nothing is re-executed), and the README,
CONTRIBUTING.md, the introduction, the site's footer and CITATION.cff quote it. The bump
refuses to run unless CHANGELOG.md's newest entry is ``## <version>: ...`` (write it first), and
unless the new version is above the current one. ``--tag`` refuses unless the working tree is
clean and ``HEAD`` is the bump (pyproject.toml at that version), so that a tag never names a
commit whose setup cells install another version; ``tests/test_release.py`` then checks that
every file agrees. Pushing the tag is the maintainers' step: a setup cell names a tag that
must exist on the repository readers install from.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.compile(r"\d+\.\d+\.\d+")


def current_version(root: Path = ROOT) -> str:
    return re.search(
        r'^version = "([^"]+)"', (root / "pyproject.toml").read_text(), re.M
    )[1]


def files_naming_the_version(root: Path = ROOT) -> list[Path]:
    """Every file whose text names the release, by rule, not by search."""
    fixed = [
        *(
            "pyproject.toml",
            "helpers/__init__.py",
            "README.md",
            "CONTRIBUTING.md",
        ),
        *("book/intro.md", "book/helpers.md", "_config.yml", "CITATION.cff"),
    ]
    notebooks = sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))
    notebooks += [path.with_suffix(".ipynb") for path in notebooks]
    return [root / name for name in fixed] + notebooks


def bump(new: str, root: Path = ROOT) -> list[Path]:
    """Rewrite ``old`` to ``new`` where it names the release; return the files changed."""
    if not VERSION.fullmatch(new):
        raise SystemExit(
            f"version {new!r} is not of the form MAJOR.MINOR.PATCH"
        )
    old = current_version(root)
    if tuple(map(int, new.split("."))) <= tuple(map(int, old.split("."))):
        raise SystemExit(f"version {new} is not above the current {old}")
    changelog = (root / "CHANGELOG.md").read_text()
    newest = re.search(r"^## \[?v?(\d+\.\d+\.\d+)", changelog, re.M)
    if not newest or newest[1] != new:
        raise SystemExit(
            f"CHANGELOG.md's newest entry is {newest[1] if newest else 'missing'}: write the "
            f"entry '## {new}: <what changed>' first"
        )
    # Only the places that name the release: the tag v<old>, and version fields.
    patterns = [
        (re.escape(f"@v{old}"), f"@v{new}"),
        (re.escape(f"`v{old}`"), f"`v{new}`"),
        (re.escape(f"(v{old})"), f"(v{new})"),
        (re.escape(f"release tag v{old}"), f"release tag v{new}"),
        (rf'^version = "{re.escape(old)}"', f'version = "{new}"'),
        (rf'^__version__ = "{re.escape(old)}"', f'__version__ = "{new}"'),
        (rf"^(\s*)version: {re.escape(old)}$", rf"\g<1>version: {new}"),
        (rf"Version {re.escape(old)} ", f"Version {new} "),
    ]
    changed = []
    for path in files_naming_the_version(root):
        text = path.read_text()
        updated = text
        for pattern, replacement in patterns:
            updated = re.sub(pattern, replacement, updated, flags=re.M)
        if updated != text:
            path.write_text(updated)
            changed.append(path)
    return changed


def git(*args: str, root: Path = ROOT) -> str:
    done = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def tag(version: str, root: Path = ROOT) -> str:
    """Tag HEAD ``v<version>`` if HEAD is the committed bump to ``version``."""
    if current_version(root) != version:
        raise SystemExit(
            f"pyproject.toml is at {current_version(root)}, not {version}: run the bump "
            f"(python scripts/release.py {version}), make test, commit, then tag"
        )
    if git("status", "--porcelain", "--untracked-files=no", root=root):
        raise SystemExit(
            "the working tree has uncommitted changes: commit the bump first"
        )
    name = f"v{version}"
    if name in git("tag", "--list", name, root=root).split():
        raise SystemExit(f"tag {name} exists already")
    git("tag", "-a", name, "-m", f"Release {version}", root=root)
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument(
        "--tag", action="store_true", help="tag the committed bump"
    )
    args = parser.parse_args()
    if args.tag:
        name = tag(args.version)
        print(f"tagged {name}; the maintainers push it: git push origin {name}")
        return
    changed = bump(args.version)
    for path in changed:
        print("updated", path.relative_to(ROOT))
    print(
        "now: make test, commit, then make release-tag VERSION=" + args.version
    )


if __name__ == "__main__":
    sys.exit(main())
