"""Tests of the helpers package's top level: seeding, devices, showing source, glue."""

import random

import numpy as np
import pytest
import torch

import helpers


def test_seed_everything_makes_every_generator_repeat():
    helpers.seed_everything(3)
    first = (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002
    generator = helpers.seed_everything(3)
    second = (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002
    assert first == second
    assert (
        torch.rand(1, generator=generator).item()
        == torch.rand(1, generator=torch.Generator().manual_seed(3)).item()
    )


@pytest.mark.parametrize(("seed", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_seed_everything_rejects_bad_seeds(seed, error):
    with pytest.raises(error, match="seed"):
        helpers.seed_everything(seed)


def test_get_device_falls_back_to_cpu_and_checks_its_argument():
    assert helpers.get_device("cpu") == torch.device("cpu")
    assert helpers.get_device().type in {"cpu", "cuda", "mps"}
    with pytest.raises(ValueError, match="one of"):
        helpers.get_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not available"):
            helpers.get_device("cuda")


def test_show_source_renders_a_python_code_block():
    shown = helpers.show_source(helpers.seed_everything)
    assert shown.data.startswith("```python\ndef seed_everything")
    with pytest.raises(TypeError, match="cannot show the source"):
        helpers.show_source(3)


def test_glue_stores_plain_numbers_and_checks_its_arguments(monkeypatch):
    stored = {}
    monkeypatch.setattr("myst_nb.glue", lambda name, value, display: stored.update({name: value}))
    assert helpers.glue("numpy_scalar", np.float64(0.25)) is None
    helpers.glue("tensor_scalar", torch.tensor(3))
    helpers.glue("plain", "text")
    assert stored == {"numpy_scalar": 0.25, "tensor_scalar": 3, "plain": "text"}
    assert type(stored["numpy_scalar"]) is float
    with pytest.raises(ValueError, match="identifier"):
        helpers.glue("not a name", 1)
    with pytest.raises(ValueError, match="one number"):
        helpers.glue("vector", torch.ones(3))
