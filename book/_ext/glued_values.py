"""The values the chapters glue, for the book's other pages, read at build time.

A chapter quotes its numbers with ``{glue:text}`` from values a hidden cell glues; myst-nb finds
them only on the chapter's own page. The Sources and errata page quotes some of the same
numbers ("in the stored run, ..."), so this extension reads every notebook's stored glue
outputs and turns each into a MyST substitution named ``glue_<name>``: ``{{ glue_ch9_corner_
test_mse }}`` shows the value chapter 9 glued as ``ch9_corner_test_mse``, exactly as its page
does. A page that names a value no chapter glues fails the build (``-W``), so the quoted
numbers cannot drift from the stored runs. Like ``book_time``, it imports nothing from Sphinx,
so the unit tests read the same values.
"""

import ast
import json
import pathlib

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
MIME = "application/papermill.record/text/plain"


def glued_values(folder: pathlib.Path = NOTEBOOKS) -> dict:
    """``{name: text}`` of every value glued in the stored notebooks of ``folder``; a string
    is shown without its quotes, any other value as its ``repr`` (what myst-nb shows)."""
    values = {}
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for output in cell.get("outputs", []):
                name = output.get("metadata", {}).get("scrapbook", {}).get("name")
                if name is None or MIME not in output.get("data", {}):
                    continue
                text = output["data"][MIME]
                text = "".join(text) if isinstance(text, list) else text
                try:
                    value = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    value = None
                values[name] = value if isinstance(value, str) else text
    return values


def add_substitutions(app, config) -> None:
    glued = {f"glue_{name}": text for name, text in glued_values().items()}
    config.myst_substitutions = {**(config.myst_substitutions or {}), **glued}


def setup(app):
    app.connect("config-inited", add_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
