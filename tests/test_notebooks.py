"""Book-level checks of the notebooks: pairing drift, stored outputs, conventions, toc.

Strict nbval (``make notebooks``) re-executes the notebooks and compares outputs; these
checks make sure there is something to compare and that the two twins say the same thing.
"""

import ast
import builtins
import re

import jupytext
import pytest
from conftest import (
    CHAPTERS,
    NOTEBOOKS,
    REPOSITORY,
    ROOT,
    glue_records,
    markdown_of,
    read_notebook,
)
from jupytext.config import load_jupytext_config

ids = [path.stem for path in NOTEBOOKS]


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found in notebooks/"


def code_cells(path):
    return [c for c in read_notebook(path)["cells"] if c["cell_type"] == "code"]


def regenerated_twin(path) -> str:
    """The py:percent twin that `jupytext --to py:percent` writes for the notebook at ``path``.

    In-process, with the configuration the command line would find (jupytext.toml, whose
    metadata filter leaves out the ``jupytext_version`` header line).
    """
    config = load_jupytext_config(str(path))
    notebook = jupytext.read(path, config=config)
    return jupytext.writes(notebook, fmt="py:percent", config=config)


def assert_twin_matches(path, twin) -> None:
    assert twin.exists(), (
        f"{path.name} has no .py twin; run `make execute NB={path}`"
    )
    assert regenerated_twin(path) == twin.read_text(), (
        f"{twin.name} and {path.name} have drifted apart: edit one, then run "
        f"`make execute NB={path.relative_to(ROOT)}` to execute it and rewrite both"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_twin_equals_the_jupytext_regeneration(path):
    assert_twin_matches(path, path.with_suffix(".py"))


def test_the_drift_check_catches_an_edited_twin(tmp_path):
    """The control of the check above: one changed line in a twin makes it fail."""
    path = NOTEBOOKS[0]
    twin = tmp_path / path.with_suffix(".py").name
    text = regenerated_twin(path)
    twin.write_text(text)
    assert_twin_matches(path, twin)
    twin.write_text(
        text.replace("# %% [markdown]", "# %% [markdown]\n# an edit", 1)
    )
    with pytest.raises(AssertionError, match="drifted apart"):
        assert_twin_matches(path, twin)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_notebook_is_stored_executed_without_errors(path):
    cells = [c for c in code_cells(path) if "".join(c["source"]).strip()]
    unexecuted = [
        i for i, c in enumerate(cells) if c["execution_count"] is None
    ]
    assert not unexecuted, (
        f"{path.name}: code cells {unexecuted} are stored unexecuted"
    )
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: not executed top to bottom"
    )
    errors = [
        o for c in cells for o in c["outputs"] if o["output_type"] == "error"
    ]
    assert not errors, f"{path.name}: stored with an error output"
    assert any(c["outputs"] for c in cells), (
        f"{path.name}: stored without outputs"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_first_code_cell_is_the_hidden_setup_cell(path):
    setup = code_cells(path)[0]
    source = "".join(setup["source"])
    assert "hide-cell" in setup["metadata"].get("tags", []), (
        "setup cell must be tagged hide-cell"
    )
    assert f"git+{REPOSITORY}" in source, (
        f"the Colab install line must use the repository URL of _config.yml ({REPOSITORY})"
    )
    assert '"google.colab" in sys.modules' in source
    assert "helpers.seed_everything(" in source
    # the device is chosen on the page, in the chapter's visible import cell
    assert "get_device" not in source, (
        f"{path.name}: choose the device in the visible import cell, not the hidden setup"
    )


# A cell is on the reading path unless one of these tags hides or removes its code.
OFF_PATH = {"remove-cell", "remove-input", "hide-input", "hide-cell"}

# Names a visible cell takes from a hidden one, by chapter: none. (Chapter 5's "Your turn"
# solution stays folded in its dropdown; the cell after it imports the package's version.)
TAKEN_FROM_OFF_THE_PATH: dict[str, set[str]] = {}


def _loads_and_definitions(source: str) -> tuple[set, set]:
    """The names a cell reads and the names it binds (assignments, defs, imports, loops)."""
    lines = [
        line
        for line in source.splitlines()
        if not line.lstrip().startswith(("%", "!"))
    ]
    tree = ast.parse("\n".join(lines))
    loads, binds = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            binds.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds |= {
                (alias.asname or alias.name).split(".")[0]
                for alias in node.names
            }
        elif isinstance(node, ast.arg):
            binds.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            binds.add(node.name)
    return loads, binds


def names_taken_from_off_the_path(cells) -> set:
    """Names a reading-path cell reads that no earlier path cell (nor itself) binds, but a
    hidden or removed cell does: what a reader of the page sees used and never defined."""
    on_path, off_path, taken = set(dir(builtins)), set(), set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        loads, binds = _loads_and_definitions("".join(cell["source"]))
        if OFF_PATH & set(cell["metadata"].get("tags", [])):
            off_path |= binds
        else:
            taken |= (loads - on_path - binds) & off_path
            on_path |= binds
    return taken


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_a_chapter_reads_top_to_bottom_on_its_own(path):
    """Every name a visible cell uses is defined or imported in a visible cell."""
    taken = names_taken_from_off_the_path(read_notebook(path)["cells"])
    known = TAKEN_FROM_OFF_THE_PATH.get(path.stem, set())
    assert taken <= known, (
        f"{path.name}: visible cells use {sorted(taken - known)}, defined only in hidden "
        "or removed cells; define or import them in a visible cell"
    )
    assert known <= taken, (
        f"{path.name}: {sorted(known - taken)} no longer come from off the path; remove "
        "them from TAKEN_FROM_OFF_THE_PATH"
    )


def test_the_top_to_bottom_rule_sees_a_hidden_definition():
    def cell(source, *tags):
        return {
            "cell_type": "code",
            "source": source,
            "metadata": {"tags": list(tags)},
        }

    hidden = [
        cell("import torch\nx = torch.ones(2)", "hide-cell"),
        cell("x + 1"),
    ]
    assert names_taken_from_off_the_path(hidden) == {"x"}
    shown = [cell("import torch\nx = torch.ones(2)"), cell("x + 1")]
    assert names_taken_from_off_the_path(shown) == set()
    # a name the visible cell binds itself, or a loop variable, is not taken
    own = [cell("y = 1", "remove-cell"), cell("y = 2\nprint(y)")]
    assert names_taken_from_off_the_path(own) == set()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_no_fmt_skip_on_the_page(path):
    """Code on the page is formatted as written; ruff is told nothing per line."""
    skipped = [
        line.strip()
        for cell in code_cells(path)
        for line in "".join(cell["source"]).splitlines()
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert not skipped, f"{path.name}: {skipped}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_every_glue_role_has_a_glued_value(path):
    notebook = read_notebook(path)
    used = set(
        re.findall(r"\{glue(?::\w+)?\}`([A-Za-z_][\w]*)", markdown_of(notebook))
    )
    glued = {name for name, _ in glue_records(notebook)}
    assert used <= glued, (
        f"{path.name}: glue keys used but never glued: {sorted(used - glued)}"
    )


def test_toc_lists_exactly_the_notebooks():
    assert set(CHAPTERS) == set(ids), (
        f"_toc.yml and notebooks/ disagree: {sorted(set(CHAPTERS) ^ set(ids))}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_glued_values_are_plain_numbers_or_text(path):
    for name, text in glue_records(read_notebook(path)):
        assert not re.match(r"(np\.|numpy\.|tensor\()", text), (
            f"{path.name}: {name} is glued as {text}; glue a Python number (helpers.glue "
            "converts NumPy/torch scalars)"
        )


def test_glue_names_are_unique_across_the_book():
    seen = {}
    for path in NOTEBOOKS:
        for name, _ in glue_records(read_notebook(path)):
            assert seen.setdefault(name, path.name) == path.name, (
                f"{name} glued twice"
            )


def test_make_test_verifies_the_notebooks_under_other_numerics():
    """The nbval step of `make test` must not run with the numerics that stored the outputs.

    Outputs are stored with the machine's defaults (`make execute`); verifying with PyTorch's,
    MKL's and oneDNN's vector code forced down is what makes a float-bit dependence fail on the
    developer's machine (CONTRIBUTING.md, "Numerics").
    """
    makefile = (ROOT / "Makefile").read_text()
    variables = dict(
        re.findall(r"^(NUMERICS\w*)\s*[:?]?=\s*(.*)$", makefile, flags=re.M)
    )

    def expand(
        name,
    ):  # a configuration may combine others: $(NUMERICS_scalar) ...
        return re.sub(
            r"\$\((NUMERICS_\w+)\)",
            lambda m: expand(m.group(1)),
            variables[name],
        )

    default = variables["NUMERICS"].strip()
    settings = expand(f"NUMERICS_{default}")
    assert "ATEN_CPU_CAPABILITY=default" in settings, settings
    assert (
        "ONEDNN_MAX_CPU_ISA=" in settings
        and "MKL_ENABLE_INSTRUCTIONS=" in settings
    )
    notebooks_recipe = re.search(
        r"^notebooks:.*\n((?:\t.*\n)+)", makefile, flags=re.M
    ).group(1)
    assert "$(NUMERICS_$(NUMERICS))" in notebooks_recipe
    test_target = (
        re.search(r"^test:(.*)$", makefile, flags=re.M).group(1).split()
    )
    assert "notebooks" in test_target
    portability = re.search(
        r"^test-portability:.*\n((?:\t.*\n)+)", makefile, flags=re.M
    )
    configs = (
        re.search(r"for config in ([\w ]+);", portability.group(1))
        .group(1)
        .split()
    )
    assert len(configs) >= 3 and all(
        f"NUMERICS_{c}" in variables for c in configs
    )
    # Scalar numerics on one thread at once (issue 32: a value passed each alone, not both).
    combined = [expand(f"NUMERICS_{c}") for c in configs]
    assert any(
        "ATEN_CPU_CAPABILITY=default" in c and "OMP_NUM_THREADS=1" in c
        for c in combined
    )


def shown_library_lines(cells) -> int:
    """Non-blank lines of package source that ``show_source`` prints in reading-path cells (a
    folded output, tag ``hide-output``, is one click away and not counted)."""
    return sum(
        1
        for _, text in shown_outputs(cells)
        for line in text.splitlines()
        if line.strip() and not line.startswith("```")
    )


CHECK_LINE = re.compile(r"\bcheck\.\w+\(|\b_check_\w+\(|raise \w*Error")


def check_lines_per_function(text: str) -> dict[str, int]:
    """Lines that call argument checks (``check.*(``, ``_check_*(``, ``raise ...Error``) in
    shown code, per function or method (``def`` line to the next). A flag that lets a caller
    who checked already skip the call (``GPT.forward``'s ``validate``, which ``generate``
    sets to False after checking its prompt once) is not a check."""
    counts, current = {}, "<class body>"
    for line in text.splitlines():
        match = re.match(r"\s*def (\w+)", line)
        if match:
            current = match.group(1)
        elif CHECK_LINE.search(line):
            counts[current] = counts.get(current, 0) + 1
    return counts


def shown_outputs(cells):
    """``(source, text)`` of every reading-path ``show_source`` output (folded ones
    excluded)."""
    for cell in cells:
        tags = set(cell["metadata"].get("tags", []))
        if (
            cell["cell_type"] != "code"
            or "show_source(" not in "".join(cell["source"])
            or tags & (OFF_PATH | {"hide-output", "remove-output"})
        ):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = (
                data.get("text/markdown")
                or data.get("text/plain")
                or output.get("text", "")
            )
            text = "".join(text) if isinstance(text, list) else text
            yield "".join(cell["source"]), text


def test_shown_code_calls_its_checks_in_one_line_per_function():
    """Issue 49: the package's code on the page shows the computation, with at most one
    line that checks the arguments in each function or method; the checks themselves
    live in a ``_check_*`` function beside it."""
    crowded = [
        f"{path.stem}: {source.strip()} {name} ({count})"
        for path in NOTEBOOKS
        for source, text in shown_outputs(read_notebook(path)["cells"])
        for name, count in check_lines_per_function(text).items()
        if count > 1
    ]
    assert not crowded, crowded
    # the count sees checks written out one by one
    assert check_lines_per_function(
        "def f(x, k):\n    check.tensor('x', x)\n    if k < 1:\n"
        "        raise ValueError('k')\n    return x\n"
        "def g(x):\n    _check_g(x)\n"
    ) == {"f": 2, "g": 1}


def test_the_reading_path_shows_at_most_1000_lines_of_library_code():
    """The from-scratch code is the lesson; the package's version is shown where it teaches
    something more, and folded elsewhere."""
    per_chapter = {
        path.stem: shown_library_lines(read_notebook(path)["cells"])
        for path in NOTEBOOKS
    }
    assert sum(per_chapter.values()) <= 1000, per_chapter
    # the count sees a shown source, and not a folded one
    shown = {
        "cell_type": "code",
        "source": "show_source(f)",
        "metadata": {"tags": []},
        "outputs": [
            {"data": {"text/markdown": "```python\ndef f():\n\n    pass\n```"}}
        ],
    }
    assert shown_library_lines([shown]) == 2
    folded = {**shown, "metadata": {"tags": ["hide-output"]}}
    assert shown_library_lines([folded]) == 0
