"""One way to configure a model, and one word per idea.

* A model takes one config: each class of :data:`CONFIGURED` has at most
  :data:`MAX_PARAMETERS` constructor parameters, one of them its config class, a
  frozen dataclass checked once in ``__post_init__`` with a ``replace`` method
  (nanoGPT's style). Any other ``nn.Module`` of ``helpers`` with more
  parameters is a layer a chapter builds by hand (:data:`HAND_BUILT_LAYERS`).
* The package says ``num_layers``, never ``num_blocks``.
* A warm-up names its unit (``warmup_steps``, ``warmup_fraction``) and a choice
  of positions is a string (``positions="sinusoidal"``/``"none"``): no public
  parameter or config field is called ``warmup`` or ``positional``
  (:data:`KNOWN_UNIT_FREE` lists the ones still waiting for their owner).

Each rule has a companion test that feeds it a synthetic bad case.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import textwrap
import types
import typing

import pytest
from conftest import ROOT
from torch import nn

import helpers
from helpers.gpt import GPT, GPTConfig
from helpers.tasks.corners import CornerTransformer
from helpers.tasks.reverse import ReversePredictor
from helpers.transformer import (
    DecoderBlock,
    EncoderBlock,
    EncoderDecoderTransformer,
    FeedForward,
    TransformerConfig,
    TransformerDecoder,
    TransformerEncoder,
    TransformerStack,
)
from helpers.vit import VisionTransformer, ViTConfig

MAX_PARAMETERS = 4
CONFIGURED: dict[type, type] = {
    GPT: GPTConfig,
    VisionTransformer: ViTConfig,
    EncoderDecoderTransformer: TransformerConfig,
    TransformerEncoder: TransformerConfig,
    TransformerDecoder: TransformerConfig,
    ReversePredictor: TransformerConfig,
    CornerTransformer: TransformerConfig,
}
# Built by hand, one at a time, in a chapter (chapter 6's EncoderBlock(64, 4,
# 256)); a stack builds them from its config with keyword arguments.
HAND_BUILT_LAYERS = {
    "helpers.transformer.EncoderBlock",
    "helpers.transformer.DecoderBlock",
    "helpers.transformer.FeedForward",
    "helpers.tasks.shapes.ConvSelfAttention",
}
UNIT_FREE = ("warmup", "positional")
# (where, name): why it is still there. Each is a rename its owner has to make.
KNOWN_UNIT_FREE: dict[tuple[str, str], str] = {}


def package_modules() -> list[types.ModuleType]:
    names = [
        info.name
        for info in pkgutil.walk_packages(helpers.__path__, "helpers.")
    ]
    return [importlib.import_module(name) for name in names]


# --------------------------------------------------------------- one config


def _annotation_types(function) -> set[type]:
    """Every class named in the annotations of ``function``'s parameters."""
    hints = typing.get_type_hints(function)
    found = set()
    for name, hint in hints.items():
        if name == "return":
            continue
        for candidate in (hint, *typing.get_args(hint)):
            if isinstance(candidate, type):
                found.add(candidate)
    return found


def config_style_problems(configured: dict[type, type]) -> list[str]:
    """What breaks the rule "a model takes one config" in ``configured``
    ({model class: its config class})."""
    problems = []
    for model, config in configured.items():
        parameters = list(inspect.signature(model.__init__).parameters)[1:]
        if len(parameters) > MAX_PARAMETERS:
            problems.append(
                f"{model.__name__} takes {len(parameters)} parameters "
                f"{parameters}: move its sizes and choices into "
                f"{config.__name__}"
            )
        if config not in _annotation_types(model.__init__):
            problems.append(
                f"{model.__name__} does not take a {config.__name__}: give "
                f"its constructor a parameter `config: {config.__name__}`"
            )
        if not dataclasses.is_dataclass(config):
            problems.append(f"{config.__name__} is not a dataclass")
            continue
        if not config.__dataclass_params__.frozen:
            problems.append(
                f"{config.__name__} is not frozen: @dataclass(frozen=True)"
            )
        for method in ("__post_init__", "replace"):
            if not hasattr(config, method):
                problems.append(
                    f"{config.__name__} has no {method}: check every field "
                    "once in __post_init__, copy with replace(**changes)"
                )
    return problems


def unconfigured_modules(modules, allowed: set[str]) -> list[str]:
    """``nn.Module`` classes of ``modules`` with more than
    :data:`MAX_PARAMETERS` constructor parameters, other than ``allowed``."""
    found = []
    for module in modules:
        for obj in vars(module).values():
            if not (
                inspect.isclass(obj)
                and issubclass(obj, nn.Module)
                and obj.__module__ == module.__name__
            ):
                continue
            name = f"{obj.__module__}.{obj.__qualname__}"
            parameters = list(inspect.signature(obj.__init__).parameters)[1:]
            if len(parameters) > MAX_PARAMETERS and name not in allowed:
                found.append(f"{name}({', '.join(parameters)})")
    return found


def test_every_model_takes_one_frozen_config():
    assert not config_style_problems(CONFIGURED)


def test_no_other_module_takes_many_loose_arguments():
    found = unconfigured_modules(package_modules(), HAND_BUILT_LAYERS)
    assert not found, (
        "these modules take more than "
        f"{MAX_PARAMETERS} arguments: give each a config dataclass (or, for a "
        "layer a chapter builds by hand, list it in HAND_BUILT_LAYERS): "
        + "; ".join(found)
    )


def test_hand_built_layers_still_need_their_exception():
    """An entry of HAND_BUILT_LAYERS that no longer needs it must leave."""
    listed = {
        entry.split("(")[0]
        for entry in unconfigured_modules(package_modules(), set())
    }
    assert listed == HAND_BUILT_LAYERS


def test_the_config_rule_sees_a_model_of_loose_arguments():
    @dataclasses.dataclass
    class LooseConfig:  # not frozen, unchecked, no replace
        width: int = 8

    class Loose(nn.Module):
        def __init__(self, vocab, width, heads, layers, dropout) -> None:
            super().__init__()

    problems = config_style_problems({Loose: LooseConfig})
    assert any("takes 5 parameters" in p for p in problems)
    assert any("does not take a LooseConfig" in p for p in problems)
    assert any("not frozen" in p for p in problems)
    assert any("no __post_init__" in p for p in problems)
    assert any("no replace" in p for p in problems)
    module = types.ModuleType("fake")
    Loose.__module__, Loose.__qualname__ = "fake", "Loose"
    module.Loose = Loose
    assert unconfigured_modules([module], set()) == [
        "fake.Loose(vocab, width, heads, layers, dropout)"
    ]


def test_the_stacks_build_their_blocks_with_keywords_not_a_tuple():
    """No positional forwarding through layers: the stack calls its block with
    keyword arguments only, each read from the config."""
    source = textwrap.dedent(inspect.getsource(TransformerStack.__init__))
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "block"
    ]
    assert len(calls) == 1 and not calls[0].args
    assert {keyword.arg for keyword in calls[0].keywords} >= {
        "d_model",
        "num_heads",
        "ffn_width",
    }
    # and a chapter can still build one block by hand
    assert EncoderBlock(8, 2, 16).d_model == DecoderBlock(8, 2, 16).d_model
    assert FeedForward(8, 16).d_model == 8


# ------------------------------------------------------------ one word each


def identifiers(source: str) -> set[str]:
    """Every name a Python source binds or reads: variables, arguments,
    keywords, attributes, fields."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def files_using(name: str, sources: dict[str, str]) -> list[str]:
    return sorted(
        path for path, text in sources.items() if name in identifiers(text)
    )


def our_sources() -> dict[str, str]:
    paths = [
        *sorted((ROOT / "helpers").rglob("*.py")),
        *sorted((ROOT / "scripts").glob("*.py")),
        *sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")),
    ]
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def test_the_package_says_num_layers_never_num_blocks():
    assert not files_using("num_blocks", our_sources()), (
        "say num_layers (as GPTConfig does), not num_blocks"
    )
    assert files_using("num_layers", our_sources())


def test_the_word_rule_sees_num_blocks():
    sources = {
        "a.py": "def stack(num_blocks):\n    return num_blocks\n",
        "b.py": "x = config.num_blocks\n",
        "c.py": "build(num_blocks=2)\n",
        "d.py": "label = 'num_blocks'  # a string is not a name\n",
    }
    assert files_using("num_blocks", sources) == ["a.py", "b.py", "c.py"]


def unit_free_names(modules) -> list[tuple[str, str]]:
    """``(where, name)`` for every public function, class or dataclass of
    ``modules`` with a parameter or field named in :data:`UNIT_FREE`."""
    found = []
    for module in modules:
        for public, obj in vars(module).items():
            if public.startswith("_") or getattr(obj, "__module__", None) != (
                module.__name__
            ):
                continue
            where = f"{module.__name__}.{public}"
            names: list[str] = []
            if dataclasses.is_dataclass(obj):
                names = [field.name for field in dataclasses.fields(obj)]
            elif inspect.isclass(obj):
                names = list(inspect.signature(obj.__init__).parameters)
            elif inspect.isfunction(obj):
                names = list(inspect.signature(obj).parameters)
            found += [(where, n) for n in names if n in UNIT_FREE]
    return found


def test_no_public_parameter_hides_its_unit():
    found = set(unit_free_names(package_modules()))
    unexpected = sorted(found - set(KNOWN_UNIT_FREE))
    assert not unexpected, (
        "name the unit: warmup_steps (an int) or warmup_fraction (of the "
        "steps), and positions='sinusoidal'/'none' instead of a bool "
        f"positional: {unexpected}"
    )
    # a known exception that is gone must leave the list
    assert set(KNOWN_UNIT_FREE) <= found


def test_the_unit_rule_sees_warmup_and_positional():
    module = types.ModuleType("fake")

    def train(steps, warmup=0.1):
        return steps, warmup

    @dataclasses.dataclass(frozen=True)
    class RunConfig:
        positional: bool = True
        warmup_steps: int = 10

    for obj in (train, RunConfig):
        obj.__module__ = "fake"
    module.train, module.RunConfig = train, RunConfig
    assert sorted(unit_free_names([module])) == [
        ("fake.RunConfig", "positional"),
        ("fake.train", "warmup"),
    ]


# ----------------------------------------------------- messages that say how


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: TransformerConfig(d_model=30, num_heads=4),
            ValueError,
            r"d_model=30 is not divisible by num_heads=4.*pick num_heads",
        ),
        (
            lambda: TransformerConfig(num_layers=0),
            ValueError,
            "num_layers must be a positive int, got 0; pass a value >= 1",
        ),
        (
            lambda: TransformerConfig(norm="batch"),
            ValueError,
            r"norm must be one of \('layer', 'rms'\)",
        ),
        (
            lambda: TransformerConfig(
                source_vocab=10, target_vocab=12, tie_embeddings=True
            ),
            ValueError,
            "or set tie_embeddings=False",
        ),
        (
            lambda: TransformerConfig(source_vocab=12, pad_id=12),
            ValueError,
            r"pad_id=12 must be a token of both vocabularies \(< 12\)",
        ),
        (
            lambda: EncoderDecoderTransformer(TransformerConfig()),
            TypeError,
            r"needs source_vocab.*TransformerConfig\(source_vocab=13",
        ),
        (
            lambda: TransformerEncoder(8),
            TypeError,
            r"config must be a TransformerConfig, got int; build one with "
            r"TransformerConfig\(\.\.\.\)",
        ),
        (
            lambda: ReversePredictor(10, TransformerConfig(), "learned"),
            ValueError,
            r"positions must be one of \('sinusoidal', 'none'\)",
        ),
    ],
)
def test_a_bad_config_is_refused_saying_how_to_fix_it(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_replace_makes_a_checked_copy():
    config = TransformerConfig(d_model=16, num_heads=2)
    assert config.replace(num_layers=6).num_layers == 6
    assert config.num_layers == 2
    with pytest.raises(ValueError, match="num_heads"):
        config.replace(num_heads=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_layers = 3
