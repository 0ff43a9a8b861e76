"""The book's version is one number everywhere a reader or a tool meets it.

A release is tagged ``v<version>`` (CHANGELOG.md). Every notebook installs ``helpers`` from that
tag, so a page opened on Colab, or a notebook downloaded from the site, gets the package it was
executed with, not whatever the branch tip holds by then. These checks fail until pyproject.toml,
``helpers.__version__``, each notebook's setup cell, CHANGELOG.md, CITATION.cff and the site's
footer all name the same version. They read files only (no import of torch).
"""

import ast
import re
import subprocess

import pytest
import yaml
from conftest import CONFIG, NOTEBOOKS, REPOSITORY, ROOT, read_notebook

PYPROJECT = (ROOT / "pyproject.toml").read_text()
VERSION = re.search(r'^version = "([^"]+)"', PYPROJECT, flags=re.M)[1]
TAG = f"v{VERSION}"
INSTALL = f"attention-book-helpers @ git+{REPOSITORY}@{TAG}"


def package_version():
    """``helpers.__version__``, read from helpers/__init__.py without importing the package."""
    tree = ast.parse((ROOT / "helpers" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__"
            for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("helpers/__init__.py defines no __version__")


def setup_source(path):
    cells = [
        c for c in read_notebook(path)["cells"] if c["cell_type"] == "code"
    ]
    return "".join(cells[0]["source"])


def test_package_version_is_pyprojects():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), (
        f"pyproject version {VERSION!r}"
    )
    assert package_version() == VERSION, (
        "helpers.__version__ differs from pyproject.toml"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_setup_cell_installs_helpers_at_the_release_tag(path):
    source = setup_source(path)
    pinned = re.findall(r'HELPERS = "([^"]+)"', source)
    assert pinned == [INSTALL], (
        f"{path.name}: the setup cell must define HELPERS = {INSTALL!r} (the release tag "
        f"{TAG} of pyproject's version), found {pinned}; see CHANGELOG.md for how to release"
    )
    twin = path.with_suffix(".py").read_text()
    assert f'HELPERS = "{INSTALL}"' in twin, (
        f"{path.with_suffix('.py').name}: twin not updated"
    )


def test_changelog_newest_entry_is_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    entries = re.findall(r"^## \[?v?(\d+\.\d+\.\d+)\]?", text, flags=re.M)
    assert entries, "CHANGELOG.md has no '## <version>' entry"
    assert entries[0] == VERSION, (
        f"CHANGELOG.md's newest entry is {entries[0]}, not {VERSION}"
    )
    assert "v<version>" in text, "CHANGELOG.md must say how releases are tagged"


def test_citation_names_this_version():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert str(citation["version"]) == VERSION
    assert str(citation["preferred-citation"]["version"]) == VERSION
    assert citation["repository-code"] == REPOSITORY
    assert citation["title"] == CONFIG["title"]


def test_site_footer_shows_this_version():
    footer = CONFIG["html"]["extra_footer"]
    assert f"Version {VERSION} (release tag {TAG})" in footer, footer


@pytest.mark.parametrize(
    "page", ["README.md", "book/intro.md", "book/helpers.md"]
)
def test_local_install_lines_are_this_release(page):
    text = (ROOT / page).read_text()
    assert f"pip install '{INSTALL}'" in text, (
        f"{page}'s local install line is not this release's"
    )
    if page != "book/helpers.md":  # the package page installs helpers alone
        assert "--index-url https://download.pytorch.org/whl/cpu" in text


READER_PAGES = [
    "README.md",
    "CONTRIBUTING.md",
    *sorted(
        p.relative_to(ROOT).as_posix() for p in (ROOT / "book").glob("*.md")
    ),
]


@pytest.mark.parametrize("page", READER_PAGES)
def test_every_version_a_reader_sees_is_this_release(page):
    """A page that names an older tag (``@v0.6.0``, a header ``(v0.6.0)``) sends a reader to
    a package that cannot run today's chapters; only CHANGELOG.md names past releases."""
    named = set(
        re.findall(r"(?<![\w.])v(\d+\.\d+\.\d+)", (ROOT / page).read_text())
    )
    assert named <= {VERSION}, (
        f"{page} names versions {sorted(named - {VERSION})}, not {VERSION}"
    )


def test_licence_files_match_the_package_metadata():
    assert re.search(r'^license = "MIT"$', PYPROJECT, flags=re.M)
    assert re.search(
        r'^license-files = \["LICENSE"\]', PYPROJECT, flags=re.M
    ), "ship LICENSE"
    text = (ROOT / "LICENSE").read_text()
    assert "MIT License" in text and "CC BY 4.0" in text


# Other projects' repositories that tracked text files link to (references, acknowledgements).
THIRD_PARTY = {"karpathy/nanoGPT", "openai/gpt-2", "google-research/bert"}


def test_the_repository_url_has_one_home():
    """_config.yml's repository URL is the only one naming this project: every install line,
    clone command, citation and setup cell uses exactly that value, so that moving the
    repository is one edit there (and the failures here list every copy to update)."""
    tracked = subprocess.run(
        ["git", "ls-files"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    texts = [ROOT / name for name in tracked if name.endswith((".py", ".md", ".ipynb", ".cff",
             ".yml", ".yaml", ".toml", ".cfg", ".txt", ".bib", "Makefile"))]  # fmt: skip
    own = REPOSITORY.removeprefix("https://github.com/")
    stray = {}
    for path in texts:
        if not path.is_file():
            continue
        for found in re.findall(
            r"github\.com/([\w.-]+/[\w-]+(?:\.[\w-]+)*)", path.read_text()
        ):
            if found.removesuffix(".git") not in (own, *THIRD_PARTY):
                stray.setdefault(found, []).append(str(path.relative_to(ROOT)))
    assert (
        REPOSITORY.startswith("https://github.com/") and own.count("/") == 1
    ), REPOSITORY
    assert not stray, (
        f"repositories other than _config.yml's {REPOSITORY}: {stray}; use that URL (or, for "
        "another project's repository, add it to THIRD_PARTY)"
    )
