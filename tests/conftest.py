"""Shared paths, book structure and notebook readers for the tests, and the session's threads.

Plain constants and functions (importable as ``from conftest import ...``), because the
book-level tests parametrize over them at collection time:

* ``ROOT``, ``CONFIG`` (_config.yml), ``OWNER_REPO``, ``BRANCH``, ``REPOSITORY``;
* ``NOTEBOOKS`` (every ``notebooks/NN_*.ipynb``), ``toc_files``, ``PAGES`` and ``CHAPTERS``
  (_toc.yml, in reading order);
* ``read_notebook``, ``markdown_of``, ``glued_values``, ``glue_records``: a notebook's JSON,
  its prose and the values it glues (``helpers.glue``) as stored in its outputs;
* ``ATOL`` and ``close``: the unit tests' tolerance for float32 results that should agree, and
  the comparison that uses it.

Hypothesis strategies shared by several test modules are in ``strategies.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPOSITORY = CONFIG["repository"]["url"]
OWNER_REPO = REPOSITORY.removeprefix("https://github.com/")
BRANCH = CONFIG["repository"]["branch"]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def pytest_collection_finish(session):
    """One PyTorch thread per process (each pytest-xdist worker), for the whole session.

    The unit tests' models are tiny: on a few cores shared by two workers, PyTorch's intra-op
    threads only fight each other. Set after collection, and only where the collected tests
    imported torch, so that the book-level tests (notebooks, site) do not pay its import.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


# --------------------------------------------------------------------------- tolerances

ATOL = 1e-5
"""Absolute tolerance of float32 results that compute the same function in different orders."""


def close(actual, expected, atol: float = ATOL, rtol: float = 1e-4) -> None:
    """Assert that two tensors agree to ``atol`` + ``rtol`` (``torch.testing.assert_close``)."""
    import torch  # here, so that the book-level tests do not pay torch's import

    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


def seeded(seed: int = 0):
    """A ``torch.Generator`` seeded with ``seed``: random inputs apart from the global seed."""
    import torch

    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- small models


def small_config(**fields):
    """The unit tests' small ``TransformerConfig``: 2 layers of width 8, 2 heads, a feed-forward
    of 16; ``fields`` override or add fields (``norm_first``, ``num_layers=3``, ...)."""
    from helpers.transformer import TransformerConfig

    small = {"num_layers": 2, "d_model": 8, "num_heads": 2, "ffn_width": 16}
    return TransformerConfig(**{**small, **fields})


def randomize_norms(module, generator) -> None:
    """Give every LayerNorm a non-trivial gain and bias, so tests see if they are copied."""
    import torch
    from torch import nn

    with torch.no_grad():
        for norm in module.modules():
            if isinstance(norm, nn.LayerNorm):
                norm.weight.copy_(
                    1
                    + 0.3 * torch.randn(norm.weight.shape, generator=generator)
                )
                norm.bias.copy_(
                    0.3 * torch.randn(norm.bias.shape, generator=generator)
                )


# --------------------------------------------------------------------------- _toc.yml


def toc_files(node):
    """Every ``file:`` of _toc.yml (and its ``root``), in reading order."""
    if isinstance(node, dict):
        if "file" in node:
            yield node["file"]
        for key in ("root", "parts", "chapters", "sections"):
            if key == "root" and key in node:
                yield node[key]
            elif key in node:
                for child in node[key]:
                    yield from toc_files(child)


PAGES = [
    re.sub(r"\.(md|ipynb)$", "", file)
    for file in toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
]
"""Every page of the book, without extension, e.g. ``book/intro``, ``notebooks/01_...``."""

CHAPTERS = [
    page.removeprefix("notebooks/")
    for page in PAGES
    if page.startswith("notebooks/")
]
"""The notebook chapters listed in _toc.yml, as stems (``01_kernel_regression``)."""


# --------------------------------------------------------------------------- notebooks


def read_notebook(notebook) -> dict:
    """A notebook's JSON, from a path or from a stem of notebooks/ (``01_kernel_regression``)."""
    path = pathlib.Path(notebook)
    if path.suffix != ".ipynb":
        path = ROOT / "notebooks" / f"{notebook}.ipynb"
    return json.loads(path.read_text())


def markdown_of(notebook: dict) -> str:
    """The prose of a notebook: every markdown cell's source, concatenated."""
    return "".join(
        "".join(c["source"])
        for c in notebook["cells"]
        if c["cell_type"] == "markdown"
    )


def glued_values(notebook: dict) -> dict[str, str]:
    """``{name: text}`` of every value the notebook glues, as stored in its outputs.

    ``text`` is the ``text/plain`` record (``'0.31'``, ``"'text'"``); a name glued twice keeps
    its last value (``test_glue_names_are_unique_across_the_book`` refuses that anyway).
    """
    values = {}
    for name, text in glue_records(notebook):
        values[name] = text
    return values


def glue_records(notebook: dict) -> list[tuple[str, str]]:
    """Every glue output of the notebook as ``(name, text)``, in order, repeats included."""
    records = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                text = output.get("data", {}).get(
                    "application/papermill.record/text/plain", ""
                )
                records.append((name, text))
    return records


def script_environment() -> dict[str, str]:
    """The environment a script runs in: one thread, the repository importable.

    The repository comes first on PYTHONPATH, then whatever PYTHONPATH held: an
    environment whose packages arrive that way (the GPU machine of `make test-gpu`)
    keeps them.
    """
    kept = os.environ.get("PYTHONPATH")
    path = os.pathsep.join([str(ROOT), kept] if kept else [str(ROOT)])
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def run_script(
    name: str, *args: str, timeout: int = 300
) -> subprocess.CompletedProcess:
    """``python scripts/<name> *args`` from the repository root, one thread, output captured."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        env=script_environment(),
        cwd=ROOT,
        timeout=timeout,
    )


def load_script(name: str, folder: str = "scripts"):
    """``<folder>/<name>`` imported as a module (scripts/ and book/_ext/ are not packages)."""
    spec = importlib.util.spec_from_file_location(
        name.removesuffix(".py"), ROOT / folder / name
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_reads():
    """A context manager that counts the reads of a tensor's value back to the host
    (``.item()``, ``int()``, ``bool()`` of a tensor: ATen's ``_local_scalar_dense``), each a
    wait for the device on a GPU: ``with host_reads() as reads: ...; reads.count``."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class HostReads(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                self.count += 1
            return func(*args, **(kwargs or {}))

    return HostReads()
