"""The shape of the ``helpers`` package: what imports what, and how long the shown code is.

* No import cycle: the graph of ``helpers``' modules, with the imports written inside
  functions, has no cycle.
* No module imports a later chapter's module: the chapter of each module comes from the map in
  ``helpers/__init__.py`` (its first chapter when it is listed twice).
* Weights from PyTorch's modules come in through ``helpers.interop`` only, which imports the
  model classes and is imported by none of them.
* Every object a chapter shows with ``show_source`` fits the page's column (:data:`SHOWN_WIDTH`).
* The generic checks (a choice among names, an instance of a class, a callable) are written
  once, in ``helpers._validate``; the rule is in that module's docstring.
* A check only checks: no function of ``helpers._validate`` returns a value (the few private
  helpers in :data:`VALUE_RETURNING_HELPERS` excepted), so what a value becomes is computed
  in the code that uses it.
* One attention kernel: PyTorch's fused ``scaled_dot_product_attention`` is called in one
  place, ``helpers.attention.attend_heads``, which every multi-head module calls.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap

from conftest import ROOT

import helpers

PACKAGE = ROOT / "helpers"
EVERY_CHAPTER = {
    # A base that every chapter's module may use: it must import no chapter's module.
    "helpers.plotting": 0,
    # They serve every chapter (its diagrams, its exercises), so they may import any chapter's
    # module, and no module imports them.
    "helpers.diagrams": 99,
    "helpers.checks": 99,
}
INFRASTRUCTURE = {
    "helpers",
    "helpers._validate",
    "helpers.tasks",
}  # chapter 0, not in the map
KNOWN_LATER_CHAPTER_IMPORTS: dict[tuple[str, str], str] = {}
SHOWN_WIDTH = 80


# --------------------------------------------------------------------------- the import graph


def module_name(path, root) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root=None) -> dict[str, set[str]]:
    """``{module: {modules of the package it imports}}``, imports inside functions included."""
    root = PACKAGE if root is None else root
    top = root.name
    modules = {module_name(path, root): path for path in root.rglob("*.py")}
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        package = (
            name if path.name == "__init__.py" else name.rpartition(".")[0]
        )
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x, from .x import y
                    anchor = package.split(".")[
                        : len(package.split(".")) - node.level + 1
                    ]
                    base = ".".join(anchor + ([base] if base else []))
                # "from helpers import _validate": the submodule if there is one
                targets = [
                    f"{base}.{alias.name}"
                    if f"{base}.{alias.name}" in modules
                    else base
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                while (
                    target and target not in modules
                ):  # helpers.x.y -> helpers.x
                    target = target.rpartition(".")[0]
                if target.split(".")[0] == top and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as ``[a, b, ..., a]``, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(node, path):
        state[node] = "open"
        for following in sorted(graph.get(node, ())):
            if state.get(following) == "open":
                return [*path[path.index(following) :], following]
            if following not in state and (
                cycle := visit(following, [*path, following])
            ):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def chapters_from_map(doc: str = helpers.__doc__) -> dict[str, int]:
    """``{module: its first chapter}`` from the table of ``helpers/__init__.py``."""
    chapters = dict(EVERY_CHAPTER)
    for chapter_cell, module_cell in re.findall(
        r"^\| ([^|]+) \| ([^|]+) \|$", doc, re.M
    ):
        number = re.match(r"\d+", chapter_cell)
        for name in re.findall(r"``([\w.]+)``", module_cell):
            module = f"helpers.{name}"
            is_module = (PACKAGE / f"{name.replace('.', '/')}.py").exists()
            if is_module and number:
                chapters[module] = min(
                    chapters.get(module, 99), int(number.group())
                )
    return chapters


def later_chapter_imports(graph, chapters) -> set[tuple[str, str]]:
    chapter = {**dict.fromkeys(INFRASTRUCTURE, 0), **chapters}
    return {
        (a, b)
        for a, targets in graph.items()
        for b in targets
        if chapter[b] > chapter[a]
    }


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, (
        f"import cycle: {' -> '.join(cycle)}. Move the shared code to the earlier module, or "
        "the conversion to helpers.interop (which imports the classes, never the reverse)"
    )


def test_the_cycle_check_sees_imports_inside_functions(tmp_path):
    """The check itself: a cycle closed by an import inside a method is found (the one that
    ``MultiHeadAttention.load_from_torch`` and ``helpers.interop`` once made)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "attention.py").write_text(
        "class MHA:\n    def load(self, other):\n        from pkg.interop import load\n"
    )
    (package / "interop.py").write_text("from pkg import attention\n")
    (package / "other.py").write_text("from . import interop\n")
    graph = import_graph(package)
    assert graph["pkg.other"] == {
        "pkg.interop"
    }  # a relative import is an edge too
    assert find_cycle(graph) == [
        "pkg.attention",
        "pkg.interop",
        "pkg.attention",
    ]
    (package / "attention.py").write_text("class MHA:\n    pass\n")
    assert find_cycle(import_graph(package)) is None


def test_every_module_has_a_chapter_in_the_map():
    chapters = chapters_from_map()
    missing = sorted(set(import_graph()) - set(chapters) - INFRASTRUCTURE)
    assert not missing, (
        f"add a row for {missing} to the table in helpers/__init__.py"
    )
    assert chapters["helpers.masks"] == 2 and chapters["helpers.interop"] == 4
    assert (
        chapters["helpers.tasks.shapes"] == 8
        and chapters["helpers.efficient"] == 13
    )


def test_no_module_imports_a_later_chapters_module():
    violations = later_chapter_imports(import_graph(), chapters_from_map())
    unexpected = sorted(violations - set(KNOWN_LATER_CHAPTER_IMPORTS))
    assert not unexpected, (
        f"these modules import a later chapter's module: {unexpected}; move what they use to "
        "the earlier chapter's module (masks live in helpers.masks)"
    )


def test_the_chapter_order_check_fails_on_a_later_import():
    """The check itself: chapter 8's shapes importing chapter 13's efficient is refused."""
    graph = {"helpers.tasks.shapes": {"helpers.efficient", "helpers.masks"}}
    chapters = {
        "helpers.tasks.shapes": 8,
        "helpers.efficient": 11,
        "helpers.masks": 2,
    }
    assert later_chapter_imports(graph, chapters) == {
        ("helpers.tasks.shapes", "helpers.efficient")
    }


def test_known_later_chapter_imports_are_still_there():
    """Delete an entry of KNOWN_LATER_CHAPTER_IMPORTS once its import is fixed."""
    violations = later_chapter_imports(import_graph(), chapters_from_map())
    fixed = sorted(set(KNOWN_LATER_CHAPTER_IMPORTS) - violations)
    assert not fixed, f"fixed, remove from KNOWN_LATER_CHAPTER_IMPORTS: {fixed}"


def test_only_interop_converts_weights_from_torch():
    graph = import_graph()
    importers = sorted(
        name for name, targets in graph.items() if "helpers.interop" in targets
    )
    assert not importers, (
        f"{importers} import helpers.interop; call it from the caller instead"
    )
    for module in ("attention", "transformer"):
        source = (PACKAGE / f"{module}.py").read_text()
        assert "def load_from_torch" not in source and "def fused" not in source


# --------------------------------------------------------------------------- shown code


def shown_objects() -> list[tuple[str, str, object]]:
    """``(notebook, expression, object)`` for every ``show_source(...)`` call in the notebooks'
    ``.py`` twins, resolved through the notebook's own ``from helpers... import`` lines."""
    shown = []
    for twin in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        tree = ast.parse(twin.read_text())
        imported = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (
                node.module or ""
            ).startswith("helpers"):
                for alias in node.names:
                    imported[alias.asname or alias.name] = (
                        node.module,
                        alias.name,
                    )
        for node in ast.walk(tree):
            called = getattr(node, "func", None)
            name = getattr(called, "attr", None) or getattr(called, "id", None)
            if not isinstance(node, ast.Call) or name != "show_source":
                continue
            expression = ast.unparse(node.args[0])
            head, *attributes = expression.split(".")
            assert head in imported, (
                f"{twin.name}: show_source({expression}) is not from helpers"
            )
            module, attribute = imported[head]
            obj = getattr(importlib.import_module(module), attribute)
            for attribute in attributes:
                obj = getattr(obj, attribute)
            shown.append((twin.stem, expression, obj))
    return shown


def qualified_name(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def test_the_notebooks_show_code_from_helpers():
    shown = shown_objects()
    assert len(shown) >= 25
    assert {notebook for notebook, _, _ in shown} >= {
        "04_multi_head_attention",
        "09_encoder_decoder",
    }


def test_every_shown_object_fits_the_column():
    """Shown code is read in a column of 83 characters (book/_static/custom.css): each line of
    a shown object, as show_source prints it (dedented), is at most SHOWN_WIDTH characters.
    There is no cap on length: a chapter shows the whole computation it talks about."""
    too_wide = [
        f"{notebook}: {expression} line {number}: {len(line)} characters"
        for notebook, expression, obj in shown_objects()
        for number, line in enumerate(
            textwrap.dedent(inspect.getsource(obj)).splitlines(), start=1
        )
        if len(line) > SHOWN_WIDTH
    ]
    assert not too_wide, (
        f"shown code wider than {SHOWN_WIDTH} characters (rewrap its comments, docstrings "
        "and messages): " + "; ".join(too_wide[:20])
    )


# --------------------------------------------------------------------------- where checks live

# Messages of the generic checks of helpers._validate (one_of, instance, function): a module
# that writes one of them itself has a second copy of a generic check.
GENERIC_MESSAGES = {
    "one_of": re.compile(r"must be one of"),
    "instance": re.compile(r"\bmust be an? \w+, got\b"),
    "function": re.compile(r"must be callable"),
}


def raised_messages(tree: ast.AST):
    """(line, text) of every ``raise X("...")`` in ``tree``, f-strings' literal parts joined."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Raise)
            and isinstance(node.exc, ast.Call)
            and node.exc.args
        ):
            parts = [
                n.value
                for n in ast.walk(node.exc.args[0])
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
            yield node.lineno, "".join(parts)


def generic_checks_outside_validate(files) -> list[str]:
    found = []
    for path in files:
        for line, text in raised_messages(ast.parse(path.read_text())):
            for check, pattern in GENERIC_MESSAGES.items():
                if pattern.search(text):
                    found.append(f"{path.name}:{line} ({check})")
    return found


def test_generic_checks_are_written_once_in_validate():
    files = [
        p
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("_validate.py", "checks.py")
    ]
    found = generic_checks_outside_validate(files)
    assert not found, (
        f"generic checks written outside helpers._validate: {found}; call check.*"
    )


def test_the_generic_check_rule_sees_a_copy(tmp_path):
    copy = tmp_path / "module.py"
    copy.write_text(
        "def make(name, config, fn):\n"
        "    if name not in NAMES:\n"
        "        raise ValueError(f'name must be one of {NAMES}, got {name!r}')\n"
        "    if not isinstance(config, TaskConfig):\n"
        "        raise TypeError(f'config must be a TaskConfig, got {type(config)}')\n"
        "    if not callable(fn):\n"
        "        raise TypeError('fn must be callable')\n"
    )
    found = generic_checks_outside_validate([copy])
    assert found == [
        "module.py:3 (one_of)",
        "module.py:5 (instance)",
        "module.py:7 (function)",
    ]


# --------------------------------------------------------------------------- checks only check

# Private helpers of helpers._validate that may return a value, each with its reason.
VALUE_RETURNING_HELPERS = {
    "describe": "formats a wrong value for a message",
    "_broadcasts_to": "a predicate that the mask and the bias checks both ask",
    "_values_read_before": "whether a mask's values were read already (one read a mask)",
    "mask_for_scores": "the 3-D mask rule, read alike by the attention kernel and the checks",
}


def value_returns(source: str, only_checks: bool = False) -> list[str]:
    """``name:line`` of every ``return <value>`` in the functions of ``source`` (a bare
    ``return`` is fine), the helpers of VALUE_RETURNING_HELPERS excepted; with
    ``only_checks``, in the functions named ``_check_*`` alone (a module's own checks)."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if function.name in VALUE_RETURNING_HELPERS:
            continue
        if only_checks and not function.name.startswith("_check_"):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and node.value is not None:
                found.append(f"{function.name}:{node.lineno}")
    return found


def test_no_check_returns_a_value():
    found = value_returns((PACKAGE / "_validate.py").read_text())
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "_validate.py":
            found += value_returns(path.read_text(), only_checks=True)
    assert not found, (
        f"checks of helpers._validate that return a value: {found}. A check raises or returns "
        "None; compute the value where it is used (the caller keeps its own variable)"
    )


def test_the_no_return_rule_sees_a_check_that_returns_its_value():
    source = (
        "def positive_int(name, value):\n"
        "    if value < 1:\n"
        "        raise ValueError(f'{name} must be >= 1')\n"
        "    return value\n"
        "def tokens(value):\n"
        "    if value is None:\n"
        "        return\n"
        "def describe(value):\n"
        "    return type(value).__name__\n"
    )
    assert value_returns(source) == ["positive_int:4"]
    module = (
        "def _check_width(width):\n"
        "    return width // 2\n"
        "def half(width):\n"
        "    return width // 2\n"
    )
    assert value_returns(module, only_checks=True) == ["_check_width:2"]


def check_callers(
    validate: str, modules: dict[str, str]
) -> dict[str, list[str]]:
    """For each function of ``validate`` (the source of helpers._validate), where it is
    called: ``_validate`` for a call inside it, else the module's name (a call written
    ``check.<name>`` or ``_validate.<name>``), once per call."""
    functions = [
        node.name
        for node in ast.parse(validate).body
        if isinstance(node, ast.FunctionDef)
    ]
    callers = {name: [] for name in functions}
    for where, source in {"_validate": validate, **modules}.items():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            called = node.func
            if where == "_validate" and isinstance(called, ast.Name):
                name = called.id
            elif isinstance(called, ast.Attribute) and isinstance(
                called.value, ast.Name
            ):
                name = (
                    called.attr
                    if called.value.id in ("check", "_validate")
                    else None
                )
            else:
                name = None
            if name in callers:
                callers[name].append(where)
    return callers


def lonely_checks(validate: str, modules: dict[str, str]) -> list[str]:
    """Checks of helpers._validate with one caller, outside it: they belong beside it."""
    return [
        f"{name} (called only from {where[0]})"
        for name, where in check_callers(validate, modules).items()
        if len(where) == 1 and where[0] != "_validate"
    ]


def test_a_check_with_one_caller_sits_beside_its_code():
    modules = {
        str(path.relative_to(PACKAGE)): path.read_text()
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_validate.py"
    }
    found = lonely_checks((PACKAGE / "_validate.py").read_text(), modules)
    assert not found, (
        f"checks of helpers._validate with a single caller: {found}. Move each to the end "
        "of its caller's module as _check_<name> (helpers._validate's docstring)"
    )


def test_the_one_caller_rule_sees_a_lonely_check():
    validate = (
        "def positive_int(name, value):\n    pass\n"
        "def even_width(width):\n    positive_int('width', width)\n"
        "def tokens(value):\n    pass\n"
    )
    modules = {
        "a.py": "check.even_width(8)\ncheck.tokens(x)\n",
        "b.py": "check.tokens(y)\n",
    }
    # positive_int is called once, from inside: beside its caller already.
    assert lonely_checks(validate, modules) == [
        "even_width (called only from a.py)"
    ]


# --------------------------------------------------------------------------- one attention kernel

FUSED = "scaled_dot_product_attention"


def fused_attention_calls(files) -> list[str]:
    """``file:line`` of every call of PyTorch's fused attention (``F.``, ``nn.functional.``,
    ``torch.nn.functional.`` ``scaled_dot_product_attention``, or the name imported from
    ``torch.nn.functional``); the package's own function of that name is not one."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module == "torch.nn.functional"
            for alias in node.names
            if alias.name == FUSED
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func
            if (isinstance(called, ast.Attribute) and called.attr == FUSED) or (
                isinstance(called, ast.Name) and called.id in imported
            ):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_pytorchs_fused_attention_is_called_in_one_place():
    found = fused_attention_calls(sorted(PACKAGE.rglob("*.py")))
    assert len(found) == 1 and found[0].startswith("attention.py:"), (
        f"F.scaled_dot_product_attention is called at {found}: call "
        "helpers.attention.attend_heads instead, the package's one attention kernel"
    )
    source = (PACKAGE / "attention.py").read_text()
    kernel = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "attend_heads"
    )
    line = int(found[0].partition(":")[2])
    assert kernel.lineno <= line <= kernel.end_lineno, (
        "the fused call belongs in attend_heads"
    )


def test_the_one_kernel_rule_sees_a_second_call(tmp_path):
    files = []
    for name, text in {
        "attention.py": "import torch.nn.functional as F\n"
        "def attend_heads(q, k, v):\n"
        "    return F.scaled_dot_product_attention(q, k, v)\n"
        "def scaled_dot_product_attention(q, k, v):\n"
        "    return q\n",
        "gpt.py": "import torch\n"
        "from helpers.attention import scaled_dot_product_attention\n"
        "def own(q, k, v):\n"
        "    scaled_dot_product_attention(q, k, v)  # the package's: fine\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
        "vit.py": "from torch.nn.functional import scaled_dot_product_attention as sdpa\n"
        "def own(q, k, v):\n"
        "    return sdpa(q, k, v)\n",
    }.items():
        (tmp_path / name).write_text(text)
        files.append(tmp_path / name)
    assert fused_attention_calls(files) == [
        "attention.py:3",
        "gpt.py:5",
        "vit.py:3",
    ]


# --------------------------------------------------------------------------- stored shown code

SHOW_CALL = re.compile(r"(helpers\.)?show_source\(.*\)", re.DOTALL)


def stale_shown_outputs(twin) -> list[str]:
    """The cells of ``twin``'s notebook whose stored ``show_source`` output is not what the
    package shows now (its file, lines, version and code)."""
    import json

    tree = ast.parse(twin.read_text())
    namespace = {"helpers": helpers, "show_source": helpers.show_source}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "helpers"
        ):
            module = importlib.import_module(node.module)
            for alias in node.names:
                namespace[alias.asname or alias.name] = getattr(
                    module, alias.name
                )
    notebook = json.loads(twin.with_suffix(".ipynb").read_text())
    stale = []
    for index, cell in enumerate(notebook["cells"]):
        source = "".join(cell["source"]).strip()
        if not SHOW_CALL.fullmatch(source):  # a cell that ends with the call
            source = source.splitlines()[-1] if source else ""
        if cell["cell_type"] != "code" or not SHOW_CALL.fullmatch(source):
            continue
        stored = [
            "".join(output["data"]["text/markdown"])
            for output in cell.get("outputs", [])
            if "text/markdown" in output.get("data", {})
        ]
        shown = eval(source, namespace).data  # noqa: S307 - the book's own cells
        if stored != [shown]:
            stale.append(f"{twin.stem} cell {index}: {source}")
    return stale


def test_stored_shown_code_is_what_the_package_shows():
    """A change to a shown file moves its line numbers or code: the chapters that show it
    must be re-executed (`make execute NB=...`), which this finds before nbval does."""
    stale = [
        cell
        for twin in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
        for cell in stale_shown_outputs(twin)
    ]
    assert not stale, "re-execute these chapters: " + "; ".join(stale)


def test_the_stored_shown_code_check_sees_a_moved_function(tmp_path):
    import json
    import shutil

    twin = ROOT / "notebooks" / "07_reverse_prediction.py"
    copy = tmp_path / twin.name
    shutil.copy(twin, copy)
    notebook = json.loads(twin.with_suffix(".ipynb").read_text())
    for cell in notebook["cells"]:
        if "".join(cell["source"]).strip() == "show_source(fit)":
            markdown = cell["outputs"][0]["data"]["text/markdown"]
            markdown[1] = re.sub(r"lines \d+", "lines 1", markdown[1])
    copy.with_suffix(".ipynb").write_text(json.dumps(notebook))
    assert stale_shown_outputs(copy) == [
        "07_reverse_prediction cell "
        + str(
            next(
                i
                for i, c in enumerate(notebook["cells"])
                if "".join(c["source"]).strip() == "show_source(fit)"
            )
        )
        + ": show_source(fit)"
    ]


def short_string_pieces(source: str, limit: int = 16) -> list[str]:
    """``line: piece`` of every piece of an implicit string concatenation (``"a " "b"``)
    whose text is ``limit`` characters or fewer: what rewrapping a message leaves behind."""
    import io
    import tokenize

    found, run = [], []

    def flush():
        if len(run) > 1:
            for token in run:
                body = token.string.lstrip("rbfuRBFU")
                quote = body[:3] if body[:3] in ('"""', "'''") else body[0]
                if len(body) - 2 * len(quote) <= limit:
                    found.append(f"{token.start[0]}: {token.string}")
        run.clear()

    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING:
            run.append(token)
        elif token.type not in (tokenize.NL, tokenize.COMMENT):
            flush()
    flush()
    return found


def test_messages_are_not_left_in_short_pieces():
    found = {
        str(path.relative_to(PACKAGE)): short_string_pieces(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    found = {path: pieces for path, pieces in found.items() if pieces}
    assert not found, (
        f"message pieces of 16 characters or fewer: {found}; rejoin the message "
        "at a sentence or word boundary"
    )


def test_the_short_piece_rule_sees_a_rewrapped_message():
    source = (
        'raise ValueError(\n    "build "\n    "it as GPT(GPTConfig(...))"\n)\n'
    )
    assert short_string_pieces(source) == ['2: "build "']
    assert short_string_pieces('x = "a short string on its own"\n') == []


# --------------------------------------------------------------------------- one import home


def reexports(package=PACKAGE) -> list[str]:
    """``module: name`` for every name a module of the package lists in ``__all__`` but
    imports from another of its modules: a second import home for that name."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        public, imported = [], set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__"
                for target in node.targets
            ):
                public = [element.value for element in node.value.elts]
            if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").split(".")[0] == package.name
            ):
                imported |= {alias.asname or alias.name for alias in node.names}
        module = path.relative_to(package.parent).with_suffix("").as_posix()
        found += [f"{module}: {name}" for name in public if name in imported]
    return found


# Second homes still there, each with its reason: a debt that may only shrink.
KNOWN_SECOND_HOMES: dict[str, str] = {}


def test_every_public_name_has_one_import_home():
    found = sorted(set(reexports()) - set(KNOWN_SECOND_HOMES))
    gone = sorted(set(KNOWN_SECOND_HOMES) - set(reexports()))
    assert not gone, f"{gone} are gone: remove them from KNOWN_SECOND_HOMES"
    assert not found, (
        f"names exported by a module that imports them from another: {found}; import "
        "each from the module that defines it, and drop it from the other's __all__"
    )


def test_the_one_home_rule_sees_a_reexport(tmp_path):
    package = tmp_path / "helpers"
    package.mkdir()
    (package / "masks.py").write_text(
        '__all__ = ["causal_mask"]\ndef causal_mask(T): ...\n'
    )
    (package / "attention.py").write_text(
        'from helpers.masks import causal_mask\n__all__ = ["attend", "causal_mask"]\n'
        "def attend(q): ...\n"
    )
    assert reexports(package) == ["helpers/attention: causal_mask"]


def test_every_config_is_keyword_only():
    """A config reads as what it sets (``GPTConfig(vocab_size=..., d_model=...)``): every
    dataclass of the package whose name ends in ``Config`` takes keywords only."""
    import dataclasses
    import pkgutil

    positional = []
    for info in pkgutil.walk_packages(helpers.__path__, "helpers."):
        module = importlib.import_module(info.name)
        for name, cls in vars(module).items():
            if (
                name.endswith("Config")
                and dataclasses.is_dataclass(cls)
                and cls.__module__ == module.__name__
                and not all(field.kw_only for field in dataclasses.fields(cls))
            ):
                positional.append(f"{module.__name__}.{name}")
    assert not positional, (
        f"configs that take positional fields: {positional}; make them "
        "@dataclass(frozen=True, kw_only=True)"
    )
