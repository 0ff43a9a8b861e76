"""The model code of *Attention and Transformers, taught by running them*.

Each chapter of the book builds a piece from scratch, then shows and uses the
canonical version that lives here. Where code lives:

* **core building blocks**, one concern per module, each readable top to bottom:
  the classes a chapter shows with ``show_source`` hold the computation and one
  line of checks;
* **tasks** (``helpers.tasks``): each training chapter's data, model and
  configuration;
* **checks on the reader's code** (``helpers.checks``): every exercise checker;
* **argument checks** (``helpers._validate``): every check of the package's
  inputs, one exception type per kind of mistake (TypeError: wrong kind;
  ValueError: wrong value);
* the **top level** (this module): what every notebook needs (seeding, the
  device, threads, showing source, gluing numbers into the prose, expecting an
  error).

Later chapters import what earlier ones built; nothing is copied. A module
imports only modules of its own or earlier chapters (``tests/test_structure.py``
reads the chapters from the table below), and no two modules import each other.

| chapter | module |
| --- | --- |
| 1 kernel regression | ``kernel`` (Nadaraya-Watson), ``tasks.regression`` (data) |
| 2 masking, and every later mask | ``masks`` (causal, padding, window: every mask rule) |
| 2 masking, 3 attention, 4 multi-head | ``attention`` |
| 2 trained with and without the mask | ``tasks.masking_lm`` (the copy task's data) |
| 3 memory of attention | ``analysis`` (``peak_cpu_bytes``) |
| 3 recall, 4 two lookups | ``tasks.lookups`` (the lookup tasks' data) |
| 4 weights from PyTorch's modules | ``interop`` |
| 5 positional encoding | ``positional`` |
| 6 encoder | ``transformer``, ``analysis`` (parameter counts, stable rank) |
| 6 deep stacks with and without warm-up | ``tasks.warmup`` |
| 7 reversal | ``training`` (``fit``), ``tasks.reverse`` |
| 8 triangles and boxes | ``tasks.shapes`` (data, models, local oracle, training recipe) |
| 8 runs side by side | ``parallel`` (``run_in_processes``) |
| 9 encoder-decoder | ``transformer`` (decoder side), ``tasks.corners``, ``tasks.sorting`` |
| 10 decoder-only model | ``gpt`` (GPT, sampling), ``kv_cache`` (its cache), ``tasks.brackets`` |
| 11 what generation costs | ``interop`` (``load_gpt2``), ``analysis`` (``DispatchCounter``) |
| 12 Shakespeare | ``tasks.shakespeare`` (the text, characters, n-grams, training) |
| 13 long sequences | ``efficient`` (tiled attention, window reach, costs), ``tasks.retrieval`` |
| 14 vision transformer | ``vit`` (patches, 2-D positions, the ViT, rollout), ``tasks.digits`` |
| figures, every chapter | ``plotting`` |
| diagrams, every chapter | ``diagrams`` (drawn by ``scripts/make_diagrams.py``) |
| exercises, every chapter | ``checks`` |
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import random
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from helpers import _validate

__all__ = [
    "seed_everything",
    "get_device",
    "use_one_thread",
    "show_source",
    "glue",
    "expect_error",
]
__version__ = "0.8.1"


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA); return a torch.Generator
    with that seed.

    Use the returned generator where a notebook wants its own stream of random
    numbers that later cells cannot disturb.
    """
    _validate.non_negative_int("seed", seed)
    if seed >= 2**32:
        raise ValueError(
            f"seed must be in [0, 2**32), got {seed}; pick a "
            "smaller non-negative int"
        )
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeds the legacy global generator on purpose
    torch.manual_seed(seed)  # also seeds every CUDA device
    # (Python's string hashing is fixed when the interpreter starts, by the
    # PYTHONHASHSEED environment variable; setting it here would change only
    # child processes.)
    return torch.Generator().manual_seed(seed)


def get_device(prefer: str | None = None) -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU.

    ``prefer`` forces one ("cpu", "cuda", "mps"); asking for one that is missing
    is an error.
    """
    available = {
        "cuda": torch.cuda.is_available(),
        "mps": getattr(torch.backends, "mps", None) is not None
        and torch.backends.mps.is_available(),
        "cpu": True,
    }
    if prefer is not None:
        _validate.one_of("prefer", prefer, sorted(available))
        if not available[prefer]:
            raise ValueError(
                f"device {prefer!r} is not available here; use "
                "prefer=None or 'cpu'"
            )
        return torch.device(prefer)
    for name in ("cuda", "mps"):
        if available[name]:
            return torch.device(name)
    return torch.device("cpu")


def use_one_thread(device: torch.device) -> None:
    """On the CPU, run PyTorch's kernels on one thread.

    Most of the book's models are so small that splitting each matrix product
    over several threads costs more in synchronization than it saves (and far
    more on a busy machine). Chapters 10 and 12 train models large enough to
    gain and keep PyTorch's default. Does nothing on a GPU.
    """
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)


def show_source(obj, *, without: tuple[str, ...] = ()) -> object:
    """Display the source code of a function, class or module, headed by where
    it lives.

    The first line of the block names the file inside the repository, the lines
    and the book's version (``# helpers/gpt.py, lines 270-327 (v<version>)``), so a
    chapter never has to say where its code is; a method's second line names
    its class (``# KVCache.append``). ``without``: names of a class's methods
    to leave out, each replaced by one line that says so (the whole
    computation a chapter talks about is shown, the rest named). Returns an
    IPython ``Markdown`` object (a fenced code block), so the rendered book
    shows it as code; outside IPython it returns the same text as a string.
    """
    try:
        lines, first = inspect.getsourcelines(obj)
        # a decorated function (``@torch.no_grad()``) lives where it was written
        path = pathlib.Path(
            inspect.getsourcefile(inspect.unwrap(obj))
        ).resolve()
    except (TypeError, OSError) as error:
        raise TypeError(
            f"cannot show the source of {obj!r}: pass a function, class or "
            f"module defined in Python ({error})"
        ) from None
    first = max(first, 1)  # a module starts at line 0
    package = pathlib.Path(__file__).resolve().parent
    try:
        where = path.relative_to(package.parent).as_posix()
    # defined outside the package (a notebook's own module, say)
    except ValueError:
        where = path.name
    header = (
        f"# {where}, lines {first}-{first + len(lines) - 1} (v{__version__})"
    )
    qualname = getattr(inspect.unwrap(obj), "__qualname__", "")
    if inspect.isroutine(obj) and "." in qualname and "<" not in qualname:
        header += f"\n# {qualname}"  # a method: its class
    code = textwrap.dedent("".join(lines))
    if without:
        code = _without_methods(obj, code, tuple(without))
    source = header + "\n" + code.rstrip()
    try:
        from IPython.display import Markdown
    except ImportError:  # pragma: no cover - IPython ships with every notebook
        return source
    return Markdown(f"```python\n{source}\n```")


def _without_methods(cls, code: str, names: tuple[str, ...]) -> str:
    """``code``, a class's dedented source, with the methods ``names`` each
    replaced by one comment line at their place."""
    if not inspect.isclass(cls):
        raise TypeError(
            f"without= leaves out methods of a class; {cls!r} is not a class: "
            "show the class, or drop without="
        )
    body = ast.parse(code).body[0].body
    methods = {
        node.name: node
        for node in body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    unknown = [name for name in names if name not in methods]
    if unknown:
        raise ValueError(
            f"{cls.__name__} defines no method {unknown}; its methods are "
            f"{sorted(methods)}"
        )
    lines = code.splitlines()
    for name in sorted(names, key=lambda n: -methods[n].lineno):
        node = methods[name]
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        indent = lines[node.lineno - 1][: node.col_offset]
        lines[start - 1 : node.end_lineno] = [
            f"{indent}# {name}(...): not shown here"
        ]
    return "\n".join(lines) + "\n"


def glue(name: str, value, display: bool = False) -> None:
    """Store ``value`` under ``name`` for the book's prose (myst-nb ``{glue}``
    roles).

    NumPy and PyTorch scalars are stored as plain Python numbers, so the page
    shows ``0.31`` rather than ``np.float64(0.31)``; round floats to what the
    text shows before gluing. Works without myst-nb too (on Colab, say): then it
    does nothing, so a notebook runs everywhere. Returns None, so a glue call at
    the end of a cell displays nothing.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(
            f"glue name must be an identifier-like string, got {name!r}"
        )
    if isinstance(value, (np.generic, torch.Tensor)):
        if isinstance(value, torch.Tensor) and value.numel() != 1:
            raise ValueError(
                f"glue {name!r}: got a tensor of shape {tuple(value.shape)}; "
                "glue one number (call .item() on a one-element "
                "tensor) or a string"
            )
        value = value.item()
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return None
    myst_glue(name, value, display=display)
    return None


@contextmanager
def expect_error(kind: type[BaseException]) -> Iterator[None]:
    """Run the block, which must raise ``kind``: print the error, fail if
    nothing is raised.

    Chapters show mistakes on purpose inside ``with expect_error(ValueError):
    ...``, so that each demonstration is also a check. The message is wrapped to
    78 columns, the width of the book's code boxes.
    """
    if not (isinstance(kind, type) and issubclass(kind, BaseException)):
        raise TypeError(
            f"kind must be an exception class such as ValueError, got {kind!r}"
        )
    try:
        yield
    except kind as error:
        print(textwrap.fill(f"{kind.__name__}: {error}", width=78))
    else:
        raise AssertionError(
            f"expected a {kind.__name__}, but nothing was raised"
        )
