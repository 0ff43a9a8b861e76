"""One home for every measurement, and prose that names only what exists.

* No function is defined both in a chapter (its ``notebooks/NN_*.py`` twin) and in a script of
  ``scripts/``. A quantity that a chapter measures and a script measures again over seeds
  (``scripts/margins.py``) is a function of ``helpers``, which both call; a second definition
  would be a second copy to keep in step.
* No chapter and no script defines a function whose body is a copy of a function of
  ``helpers`` (the same code under another name, docstring, annotations and decorators aside).
* The chapters' prose names only functions and classes that exist. In the inline code of a
  markdown cell: a call, `` `name(...)` ``, names something defined (in ``helpers``, by a
  chapter, by PyTorch or Python, or the function an exercise asks the reader to write); a bare
  `` `name` `` with an underscore is a name of ``helpers``' or the chapters' code (a function,
  an argument, an attribute) or PyTorch's; `` `helpers.module.name` `` and
  `` `Class.method` `` of a ``helpers`` class resolve.

Each rule has a companion test that builds the mistake it is there to catch.
"""

from __future__ import annotations

import ast
import builtins
import copy
import importlib
import io
import pkgutil
import re
import tokenize

import pytest
from conftest import ROOT

TWINS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))
HELPERS = sorted((ROOT / "helpers").rglob("*.py"))


def read(paths) -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text() for path in paths
    }


# --------------------------------------------------------------------------- one definition


def defined_functions(source: str) -> set[str]:
    """Every function defined in ``source``, at any depth (dunder methods aside)."""
    return {
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not (node.name.startswith("__") and node.name.endswith("__"))
    }


def defined_twice(
    notebooks: dict[str, str], scripts: dict[str, str]
) -> list[str]:
    """``"script: name (also notebook)"`` for each function a script and a chapter both define."""
    in_notebooks = {
        name: twin
        for twin, text in notebooks.items()
        for name in defined_functions(text)
    }
    return [
        f"{script}: {name} (also {in_notebooks[name]})"
        for script, text in scripts.items()
        for name in sorted(defined_functions(text) & set(in_notebooks))
    ]


def test_no_function_is_defined_in_both_a_chapter_and_a_script():
    twice = defined_twice(read(TWINS), read(SCRIPTS))
    assert not twice, (
        "measured twice; move the function to helpers (the chapter's task module) and call "
        "it from both: " + "; ".join(twice)
    )


def test_the_one_definition_rule_sees_a_measurement_written_twice():
    """The control of the rule above: a chapter and a script that both define a measurement,
    the script's nested inside the function that uses it, as scripts/margins.py once did."""
    notebook = "def permutation_hits(model, distinct):\n    return 0.9\n"
    script = (
        "def encoder_decoder_seed(seed):\n"
        "    def permutation_hits(model, distinct):\n"
        "        return 0.9\n"
        "    return permutation_hits(None, None)\n"
    )
    assert defined_twice({"09.py": notebook}, {"margins.py": script}) == [
        "margins.py: permutation_hits (also 09.py)"
    ]
    assert not defined_twice(
        {"09.py": notebook}, {"margins.py": "import helpers\n"}
    )


# --------------------------------------------------------------------------- no copies


def fingerprints(source: str) -> dict[str, str]:
    """``{fingerprint: name}`` of every function of ``source``: its code as an AST dump, with
    the name, the docstring, the annotations and the decorators left out."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bare = copy.deepcopy(node)
        body = bare.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:]  # the docstring
        bare.body = body or [ast.Pass()]
        bare.name, bare.decorator_list, bare.returns = "", [], None
        for argument in ast.walk(bare.args):
            if isinstance(argument, ast.arg):
                argument.annotation = None
        found.setdefault(ast.dump(bare, annotate_fields=False), node.name)
    return found


def copies_of_helpers(
    sources: dict[str, str], helpers: dict[str, str]
) -> list[str]:
    """``"file: name copies module: name"`` for each function of ``sources`` whose code is that
    of a function of ``helpers``."""
    known = {
        fingerprint: f"{module}: {name}"
        for module, text in helpers.items()
        for fingerprint, name in fingerprints(text).items()
    }
    return [
        f"{path}: {name} copies {known[fingerprint]}"
        for path, text in sources.items()
        for fingerprint, name in fingerprints(text).items()
        if fingerprint in known
    ]


def test_no_chapter_or_script_copies_a_function_of_helpers():
    copies = copies_of_helpers(read(TWINS) | read(SCRIPTS), read(HELPERS))
    assert not copies, (
        "call (or show_source) the function of helpers instead: "
        + "; ".join(copies)
    )


def test_the_copy_rule_sees_a_renamed_copy():
    """The control: chapter 13 once defined ``naive`` with the code of helpers'
    ``naive_attention``; a renamed copy with its own docstring and annotations is still one."""
    helpers = {
        "helpers/efficient.py": (
            "def naive_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:\n"
            '    """Chapter 3\'s attention."""\n'
            "    return scaled_dot_product_attention(q, k, v, validate=False)[0]\n"
        )
    }
    chapter = (
        "def naive(q, k, v):\n"
        "    return scaled_dot_product_attention(q, k, v, validate=False)[0]\n"
    )
    assert copies_of_helpers({"13.py": chapter}, helpers) == [
        "13.py: naive copies helpers/efficient.py: naive_attention"
    ]
    other = chapter.replace("[0]", "[1]")  # another computation: not a copy
    assert not copies_of_helpers({"13.py": other}, helpers)


# --------------------------------------------------------------------------- prose names

SPAN = re.compile(
    r"(?<![`}])`([^`\n]+)`(?!`)"
)  # inline code; not a role's {glue:text}`x`
CALL = re.compile(r"^([A-Za-z_][\w.]*)\(")
BARE = re.compile(r"^[A-Za-z_][\w.]*$")
SHOWN = re.compile(r"^show_source\(([A-Za-z_][\w.]*)\)$")
EXERCISE = re.compile(
    r"[Ww]rite `([A-Za-z_]\w*)\("
)  # a function the reader writes


def prose(text: str) -> list[str]:
    """The lines of a py:percent twin's markdown cells, outside fenced code blocks."""
    lines, markdown, fenced = [], False, False
    for line in text.splitlines():
        if line.startswith("# %%"):
            markdown, fenced = "[markdown]" in line, False
            continue
        if not markdown or not line.startswith("#"):
            continue
        line = line[2:] if line.startswith("# ") else line[1:]
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def named_in_prose(text: str) -> list[tuple[str, bool]]:
    """``(name, called)`` for each inline code span of the prose that is a name or a call, and
    for what a ``show_source(...)`` in it shows."""
    named = []
    for line in prose(text):
        for match in SPAN.finditer(line):
            span = match.group(1).strip()
            if call := CALL.match(span):
                named.append((call.group(1), True))
                shown = SHOWN.match(span)
                if shown:
                    named.append((shown.group(1), False))
            elif BARE.match(span):
                named.append((span, False))
    return named


def code_names(text: str) -> tuple[set[str], set[str], set[str]]:
    """``(defined, called, identifiers)`` of Python source: the functions and classes it
    defines, the attributes it calls (``self.ffn(x)``) and every name it uses."""
    tree = ast.parse(text)
    defined = {
        node.name
        for node in ast.walk(tree)
        if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        )
    }
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    identifiers = {
        token.string
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.NAME
    }
    return defined, called, identifiers


def external(name: str) -> bool:
    """A name of PyTorch or Python: ``torch``, ``torch.nn``, ``F``, tensors, modules, builtins."""
    import torch
    from torch import nn

    spaces = (torch, nn, nn.functional, torch.Tensor, nn.Module, builtins)
    return any(hasattr(space, name) for space in spaces)


def helpers_objects() -> dict[str, object]:
    """Every class of the package, by name, and ``helpers`` itself: the heads of the dotted
    names the prose may use (``helpers.tasks.sorting.seed_results``, ``GPT.generate``)."""
    import helpers

    objects = {"helpers": helpers}
    for module in pkgutil.walk_packages(helpers.__path__, "helpers."):
        for name, obj in vars(importlib.import_module(module.name)).items():
            if isinstance(obj, type) and obj.__module__.startswith("helpers"):
                objects.setdefault(name, obj)
    return objects


def resolves(dotted: str, objects: dict[str, object]) -> bool:
    """Whether ``helpers.module.name`` or ``Class.attribute`` of a helpers class exists."""
    head, *rest = dotted.split(".")
    obj = objects[head]
    for i, part in enumerate(rest):
        if not hasattr(obj, part):
            module = ".".join([head, *rest[: i + 1]])
            try:  # a submodule not imported as an attribute
                obj = importlib.import_module(module)
            except ImportError:
                return False
            continue
        obj = getattr(obj, part)
    return True


def unknown_names(twins: dict[str, str], helpers: dict[str, str]) -> list[str]:
    """``"twin: name"`` for each name of a chapter's prose that names nothing."""
    defined, called, identifiers = set(), set(), set()
    for text in [*helpers.values(), *twins.values()]:
        more = code_names(text)
        defined |= more[0]
        called |= more[1]
        identifiers |= more[2]
    for text in twins.values():
        defined |= set(EXERCISE.findall(text))
    objects = helpers_objects()
    unknown = []
    for twin, text in twins.items():
        for name, is_call in named_in_prose(text):
            head, last = name.split(".")[0], name.split(".")[-1]
            if "." in name:
                # helpers.x.y or Class.method of helpers; other objects' attributes are not ours
                known = head not in objects or resolves(name, objects)
            elif is_call:
                known = name in defined or name in called or external(name)
            else:
                known = "_" not in name or name in identifiers or external(last)
            if not known:
                unknown.append(f"{twin}: {name}")
    return unknown


def test_the_prose_names_only_what_exists():
    unknown = unknown_names(read(TWINS), read(HELPERS))
    assert not unknown, (
        "the prose names something that does not exist (renamed or removed?): "
        + "; ".join(unknown)
    )


STALE_CHAPTER = """# %% [markdown]
# Attention scores get the bias of `_score_bias`, and `permutation_hits(model, data)` counts
# the hits; `helpers.tasks.sorting.permutation_hits` is it, `show_source(GPT.no_such_method)`
# shows it. Write `my_answer(x)`; `my_answer(x)` then runs, `torch.argsort(x)` too, and
# {glue:text}`ch9_no_such_glue` is a glued value, not a name.
#
# ```python
# def not_prose_a_fenced_block(x):
#     return gone_function(x)
# ```

# %%
x = 1
"""


def test_the_prose_rule_sees_a_stale_name():
    """The control: a removed function named bare, called, dotted or shown, is found; the
    reader's exercise, PyTorch, a glue role and a fenced code block are not names to check."""
    helpers = {
        "helpers/__init__.py": "def show_source(obj):\n    return obj\n",
        "helpers/gpt.py": "def score_bias(q):\n    return q\n",
    }
    assert unknown_names({"09.py": STALE_CHAPTER}, helpers) == [
        "09.py: _score_bias",
        "09.py: permutation_hits",
        "09.py: GPT.no_such_method",
    ]


@pytest.mark.parametrize(
    ("span", "found"),
    [
        ("`bare_loop`", [("bare_loop", False)]),
        ("`mirror_routing(model, inputs, 16)`", [("mirror_routing", True)]),
        ("`config.replace(dropout=0.1)`", [("config.replace", True)]),
        (
            "`show_source(GPT.forward)`",
            [("show_source", True), ("GPT.forward", False)],
        ),
        ("{glue:text}`ch7_bare_accuracy`", []),
        ("`norm_first=False`", []),  # an argument's value, not a name
        ("``a literal``", []),
    ],
)
def test_the_prose_reader_finds_names_and_calls(span, found):
    assert named_in_prose(f"# %% [markdown]\n# Here {span} is.\n") == found
