"""Each training chapter's task: its data, model, configuration and shipped
measurements."""

from __future__ import annotations

from importlib import resources

import pandas as pd


def shipped_table(name: str, how_to_make: str) -> pd.DataFrame:
    """A results file that ships in ``helpers/tasks`` (package data), read as a
    DataFrame.

    Scripts in ``scripts/`` write these files (the command and the machine are
    columns of each), so that a chapter states a spread over seeds without
    training every run. A missing file says how to make it: ``how_to_make`` is
    the command that writes it.
    """
    path = shipped_file(
        name,
        f"run `{how_to_make}`, or reinstall the package from the "
        "book's repository",
    )
    with resources.as_file(path) as file:
        return pd.read_csv(file)


def shipped_file(name: str, how_to_get: str):
    """The package-data file ``name`` of ``helpers/tasks`` (a path that
    ``importlib.resources`` can read); a missing one is an error that says
    ``how_to_get`` it."""
    path = resources.files("helpers.tasks") / name
    if not path.is_file():
        raise FileNotFoundError(f"{name} is not in helpers/tasks: {how_to_get}")
    return path
