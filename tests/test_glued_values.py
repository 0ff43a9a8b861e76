"""The Sources and errata page quotes the chapters' glued values (book/_ext/glued_values.py)."""

import json
import re

from conftest import ROOT, load_script


def extension():
    return load_script("glued_values.py", folder="book/_ext")


def glue_output(name, text):
    return {
        "output_type": "display_data",
        "data": {"application/papermill.record/text/plain": text},
        "metadata": {"scrapbook": {"name": name, "mime_prefix": "x"}},
    }


def test_the_extension_reads_what_a_notebook_glued(tmp_path):
    cell = {
        "cell_type": "code",
        "source": "",
        "metadata": {},
        "outputs": [
            glue_output("ch1_width", "0.36"),
            glue_output("ch1_count", "'1,000'"),
            {"output_type": "stream", "name": "stdout", "text": "0.36\n"},
        ],
    }
    (tmp_path / "01_x.ipynb").write_text(json.dumps({"cells": [cell]}))
    (tmp_path / "scratch.ipynb").write_text(json.dumps({"cells": [cell]}))
    assert extension().glued_values(tmp_path) == {
        "ch1_width": "0.36",
        "ch1_count": "1,000",
    }


def test_every_glued_value_a_page_quotes_exists():
    """A page's ``{{ glue_<name> }}`` names a value a chapter glues (the build would fail
    on a missing one; this says which)."""
    values = extension().glued_values()
    quoted = {
        name
        for page in (ROOT / "book").glob("*.md")
        for name in re.findall(r"\{\{\s*glue_(\w+)\s*\}\}", page.read_text())
    }
    assert quoted, "the Sources and errata page quotes glued values"
    assert quoted <= set(values), sorted(quoted - set(values))
    # chapter 9's stored run, as its own page shows it
    assert values["ch9_corner_num_test"] == "1,000"
