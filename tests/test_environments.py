"""The environments agree: the website's and Binder's pins are requirements.txt's, and the
Makefile's help lists every target.

requirements.txt is the one place a version is chosen (``make freeze``). The light environment
that builds the website (requirements-book.txt, ``make book``) and Binder's
(binder/requirements.txt) are subsets of it at the same versions, without PyTorch for the
website and without the build and test tools for Binder.
"""

import re
import subprocess

import pytest
from conftest import ROOT

READER_NEEDS = {"torch", "jupyterlab", "jupytext", "ipykernel"}
BUILD_AND_TEST_TOOLS = {
    "jupyter-book",
    "playwright",
    "pytest",
    "nbval",
    "ruff",
    "hypothesis",
}


def pins(path):
    """``{normalized name: version}`` of a pip requirements file's ``name==version`` lines."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if match := re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line):
            found[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return found


FULL = pins(ROOT / "requirements.txt")
BOOK = pins(ROOT / "requirements-book.txt")
BINDER = pins(ROOT / "binder" / "requirements.txt")


@pytest.mark.parametrize(
    "name", ["requirements-book.txt", "binder/requirements.txt"]
)
def test_pins_are_those_of_requirements_txt(name):
    subset = BOOK if name == "requirements-book.txt" else BINDER
    assert subset, f"{name} pins nothing"
    # notebook is not in the full environment: Binder moves its image's Notebook with JupyterLab
    differ = {
        n: (v, FULL.get(n))
        for n, v in subset.items()
        if FULL.get(n) != v and n != "notebook"
    }
    assert not differ, (
        f"{name} disagrees with requirements.txt (make freeze-book): {differ}"
    )


def test_the_website_builds_without_pytorch():
    assert "jupyter-book" in BOOK
    assert not {"torch", "numpy"} & BOOK.keys(), (
        "the website build executes nothing"
    )


def test_binder_has_what_a_reader_needs_and_nothing_else():
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    assert "-r " not in text, "Binder must not install the development pins"
    assert BINDER.keys() >= READER_NEEDS
    assert not BUILD_AND_TEST_TOOLS & BINDER.keys()
    assert "install --no-deps ." in (ROOT / "binder" / "postBuild").read_text()


def test_make_help_lists_every_target():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):(?!=)", makefile, flags=re.M)) - {
        "help"
    }
    phony = set(
        re.search(r"^\.PHONY:(.*)$", makefile, flags=re.M)[1].split()
    ) - {"help"}
    assert targets == phony, f"targets not in .PHONY or gone: {targets ^ phony}"
    shown = subprocess.run(
        ["make", "--no-print-directory", "-s", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = set(re.findall(r"^make ([\w-]+)", shown, flags=re.M))
    assert targets <= listed, (
        f"`make help` does not list: {sorted(targets - listed)}"
    )


def test_make_test_gpu_refuses_loudly_without_cuda():
    """`make test-gpu` on a machine whose torch sees no GPU tests nothing and says so."""
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: make test-gpu would run for real")
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "test-gpu",
            f"GPU_PYTHON={sys.executable}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert (
        "needs a CUDA GPU" in done.stdout
        and "Nothing was tested" in done.stdout
    )
