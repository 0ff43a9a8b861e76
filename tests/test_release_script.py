"""scripts/release.py (``make release``, ``make release-tag``) on a copy of the repository's files.

The bump must reach every place tests/test_release.py checks, refuse a version that is not
above the current one or has no CHANGELOG entry, and the tag must refuse anything but a
committed bump.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from conftest import ROOT, load_script

release = load_script("release.py")


@pytest.fixture
def copy(tmp_path):
    """The files that name the version, and CHANGELOG.md, at their places under tmp_path."""
    for path in [
        *release.files_naming_the_version(ROOT),
        ROOT / "CHANGELOG.md",
    ]:
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


def _next_version():
    major, minor, _ = map(int, release.current_version(ROOT).split("."))
    return f"{major}.{minor + 1}.0"


def _add_changelog_entry(root, version):
    path = root / "CHANGELOG.md"
    text = path.read_text()
    first = re.search(r"^## ", text, re.M).start()
    path.write_text(
        text[:first] + f"## {version}: a test release\n\n" + text[first:]
    )


def test_the_bump_reaches_every_place_that_names_the_release(copy):
    old, new = release.current_version(ROOT), _next_version()
    _add_changelog_entry(copy, new)
    changed = release.bump(new, copy)
    assert release.current_version(copy) == new
    notebooks = sorted((copy / "notebooks").glob("*.ipynb"))
    assert notebooks and set(notebooks) <= set(changed)
    for path in release.files_naming_the_version(copy):
        text = path.read_text()
        assert f"@v{old}" not in text and f'version = "{old}"' not in text, (
            path.name
        )
    for path in notebooks + sorted((copy / "notebooks").glob("*.py")):
        # the setup cell's install line (in the .ipynb's JSON, its quote is escaped)
        assert re.search(rf'@v{re.escape(new)}\\?"', path.read_text()), (
            path.name
        )
    assert (
        f'__version__ = "{new}"'
        in (copy / "helpers" / "__init__.py").read_text()
    )
    assert f"version: {new}" in (copy / "CITATION.cff").read_text()
    assert (
        f"Version {new} (release tag v{new})"
        in (copy / "_config.yml").read_text()
    )


def test_the_bump_refuses_without_a_changelog_entry_or_going_back(copy):
    with pytest.raises(SystemExit, match="CHANGELOG.md's newest entry"):
        release.bump(_next_version(), copy)
    with pytest.raises(SystemExit, match="not above the current"):
        release.bump(release.current_version(ROOT), copy)
    with pytest.raises(SystemExit, match="MAJOR.MINOR.PATCH"):
        release.bump("1.0", copy)


def test_the_tag_names_only_a_committed_bump(copy):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args):
        subprocess.run(
            ["git", *args], cwd=copy, check=True, capture_output=True
        )

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before")
    new = _next_version()
    with pytest.raises(SystemExit, match="run the bump"):
        release.tag(new, copy)  # not bumped yet
    _add_changelog_entry(copy, new)
    release.bump(new, copy)
    with pytest.raises(SystemExit, match="uncommitted changes"):
        release.tag(new, copy)  # bumped, not committed
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "bump")
    env = {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        assert release.tag(new, copy) == f"v{new}"
        with pytest.raises(SystemExit, match="exists already"):
            release.tag(new, copy)
