"""Tests of the helpers package's top level: seeding, devices, threads, showing source, glue,
expecting an error."""

import inspect
import os
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


@pytest.mark.parametrize(
    ("seed", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError)]
)
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
    lines, first = inspect.getsourcelines(helpers.seed_everything)
    last = first + len(lines) - 1
    header = (
        f"# helpers/__init__.py, lines {first}-{last} (v{helpers.__version__})"
    )
    assert shown.data.startswith(f"```python\n{header}\ndef seed_everything")
    from helpers.attention import MultiHeadAttention

    method = helpers.show_source(MultiHeadAttention.forward).data
    assert method.splitlines()[1].startswith("# helpers/attention.py, lines ")
    from helpers.transformer import EncoderDecoderTransformer

    decorated = helpers.show_source(EncoderDecoderTransformer.generate).data
    assert decorated.splitlines()[1].startswith(
        "# helpers/transformer.py, lines "
    )
    with pytest.raises(TypeError, match="cannot show the source"):
        helpers.show_source(3)


def test_glue_stores_plain_numbers_and_checks_its_arguments(monkeypatch):
    pytest.importorskip(
        "myst_nb"
    )  # glue does nothing without it (on Colab, say)
    stored = {}
    monkeypatch.setattr(
        "myst_nb.glue",
        lambda name, value, display: stored.update({name: value}),
    )
    assert helpers.glue("numpy_scalar", np.float64(0.25)) is None
    helpers.glue("tensor_scalar", torch.tensor(3))
    helpers.glue("plain", "text")
    assert stored == {"numpy_scalar": 0.25, "tensor_scalar": 3, "plain": "text"}
    assert type(stored["numpy_scalar"]) is float
    with pytest.raises(ValueError, match="identifier"):
        helpers.glue("not a name", 1)
    with pytest.raises(ValueError, match="one number"):
        helpers.glue("vector", torch.ones(3))


def test_seed_everything_leaves_the_environment_alone(monkeypatch):
    """PYTHONHASHSEED only acts when an interpreter starts: setting it would change nothing
    here and leak into every child process."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    before = dict(os.environ)
    helpers.seed_everything(5)
    assert dict(os.environ) == before


def test_use_one_thread_on_the_cpu_only():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        helpers.use_one_thread(
            torch.device("cuda")
        )  # a GPU: nothing to change here
        assert torch.get_num_threads() == 2
        helpers.use_one_thread(torch.device("cpu"))
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        helpers.use_one_thread("cpu")  # a name works too
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_expect_error_prints_the_expected_error(capsys):
    with helpers.expect_error(ValueError):
        raise ValueError("d_model must be even")
    assert capsys.readouterr().out == "ValueError: d_model must be even\n"
    with helpers.expect_error(
        LookupError
    ):  # a subclass is the expected kind too
        {}["missing"]
    assert capsys.readouterr().out.startswith("LookupError: ")


def test_expect_error_fails_when_nothing_is_raised():
    with (
        pytest.raises(
            AssertionError,
            match="expected a ValueError, but nothing was raised",
        ),
        helpers.expect_error(ValueError),
    ):
        pass


def test_expect_error_lets_another_exception_through(capsys):
    with (
        pytest.raises(TypeError, match="not this one"),
        helpers.expect_error(ValueError),
    ):
        raise TypeError("not this one")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("kind", ["ValueError", ValueError("x"), int, None])
def test_expect_error_needs_an_exception_class(kind):
    with (
        pytest.raises(TypeError, match="kind must be an exception class"),
        helpers.expect_error(kind),
    ):
        raise ValueError("never reached")


def test_the_unit_tests_run_pytorch_on_one_thread():
    """tests/conftest.py sets it for the session: tiny models on shared cores (see `make unit`)."""
    assert torch.get_num_threads() == 1


def test_show_source_names_a_methods_class_and_leaves_out_methods():
    from helpers.gpt import GPT
    from helpers.kv_cache import KVCache

    method = helpers.show_source(KVCache.append).data.splitlines()
    assert method[1].startswith("# helpers/kv_cache.py, lines ")
    assert method[2] == "# KVCache.append"
    assert method[3].startswith("def append(self")
    # a plain function has no class line
    assert (
        not helpers.show_source(helpers.seed_everything)
        .data.splitlines()[2]
        .startswith("# ")
    )
    whole = helpers.show_source(GPT).data
    shown = helpers.show_source(GPT, without=("generate", "new_caches")).data
    assert "def generate(" in whole and "def generate(" not in shown
    assert "def new_caches(" not in shown
    assert "    # generate(...): not shown here" in shown
    # what is not left out is shown whole: forward, and the tied head
    assert "def forward(" in shown and "self.head.weight = " in shown
    assert shown.splitlines()[1] == whole.splitlines()[1]  # the same lines
    with pytest.raises(ValueError, match="no method \\['sample'\\]"):
        helpers.show_source(GPT, without=("sample",))
    with pytest.raises(TypeError, match="not a class"):
        helpers.show_source(KVCache.append, without=("append",))
