"""Tests of helpers.interop.load_gpt2: the book's GPT, configured as GPT-2, is GPT-2.

The reference is ``transformers``' ``GPT2LMHeadModel``, randomly initialized from small
``GPT2Config``s: nothing is downloaded, nothing touches the network.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from helpers.gpt import GPT, GPTConfig
from helpers.interop import load_gpt2

# initializer_range 0.2, not GPT-2's 0.02: activations of order 1, where GELU and its tanh
# approximation differ by ~1e-3 in the logits (at 0.02, by ~3e-7: the test could not tell)
SMALL = dict(
    n_layer=2,
    n_embd=32,
    n_head=4,
    vocab_size=64,
    n_positions=16,
    initializer_range=0.2,
)
GPT2_LIKE = dict(bias=True, norm="layer", activation="gelu_tanh")


def reference(
    seed: int = 0, attn: str = "eager", **overrides
) -> GPT2LMHeadModel:
    """A random GPT-2 with biases and LayerNorm gains/biases away from their initial 1 and 0."""
    torch.manual_seed(seed)
    config = GPT2Config(
        **{**SMALL, **overrides}, bos_token_id=0, eos_token_id=None
    )
    config._attn_implementation = attn
    model = GPT2LMHeadModel(config).eval()
    with (
        torch.no_grad()
    ):  # GPT-2 starts its biases at 0 and gains at 1: make them count
        for param in model.parameters():
            if param.ndim == 1:
                param.add_(0.1 * torch.randn_like(param))
    return model


def book_model(config: GPT2Config, **overrides) -> GPT:
    sizes = dict(
        d_model=config.n_embd,
        num_layers=config.n_layer,
        num_heads=config.n_head,
    )
    kwargs = {**sizes, **GPT2_LIKE, **overrides}
    gpt_config = GPTConfig(
        vocab_size=config.vocab_size,
        context_length=config.n_positions,
        **kwargs,
    )
    return GPT(gpt_config).eval()


def loaded(ref: GPT2LMHeadModel) -> GPT:
    return load_gpt2(
        book_model(ref.config), ref.state_dict(), num_heads=ref.config.n_head
    )


@pytest.mark.parametrize(
    "seed, attn", [(0, "eager"), (1, "sdpa"), (2, "eager")]
)
def test_logits_equal_the_reference(seed, attn):
    ref = reference(seed, attn)
    model = loaded(ref)
    tokens = torch.randint(
        0, 64, (3, 16), generator=torch.Generator().manual_seed(seed)
    )
    with torch.no_grad():
        error = (model(tokens) - ref(tokens).logits).abs().max().item()
    assert error < 1e-4


def logit_change(spoil) -> float:
    """How far ``spoil(model, ref)`` moves a loaded model's logits (largest absolute change)."""
    ref = reference()
    model = loaded(ref)
    tokens = torch.randint(
        0, 64, (2, 16), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        right = model(tokens)
        spoil(model, ref)
        return (model(tokens) - right).abs().max().item()


def test_untransposed_conv1d_weights_give_other_logits():
    """The failing case of the parity test: GPT-2's (in, out) matrices copied as they are."""

    def copy_untransposed(model, ref):
        for index, block in enumerate(
            model.blocks
        ):  # square (D, D): fits either way
            block.self_attn.out_proj.weight.copy_(
                ref.state_dict()[f"transformer.h.{index}.attn.c_proj.weight"]
            )

    assert logit_change(copy_untransposed) > 1e-2


def test_exact_gelu_instead_of_the_tanh_approximation_gives_other_logits():
    """The failing case for the activation: the parity tolerance sees GELU's approximation."""

    def exact_gelu(model, ref):
        for block in model.blocks:
            block.ffn.activation = nn.GELU()  # exact, not approximate="tanh"

    assert logit_change(exact_gelu) > 1e-4


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generation_matches_generate(use_cache):
    ref = reference(3)
    model = loaded(ref)
    prompt = torch.randint(
        0, 64, (2, 4), generator=torch.Generator().manual_seed(3)
    )
    # an explicit attention mask: otherwise generate() reads prompt tokens equal to pad_token_id
    # as padding and masks them (the failing case: it changed this test's second row)
    mask = torch.ones_like(prompt)
    expected = ref.generate(
        prompt,
        attention_mask=mask,
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
    )
    ours = model.generate(prompt, 12, greedy=True, use_cache=use_cache)
    assert torch.equal(ours, expected)


def test_gpt2_small_has_124_439_808_parameters():
    with torch.device("meta"):
        config = GPTConfig(vocab_size=50_257, context_length=1024, d_model=768, num_layers=12,
                           num_heads=12, residual_init="gpt2", **GPT2_LIKE)  # fmt: skip
        model = GPT(config)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert isinstance(model.blocks[0].ffn.activation, nn.GELU)


def test_load_returns_the_model_and_accepts_a_state_dict_without_lm_head():
    ref = reference()
    state = {k: v for k, v in ref.state_dict().items() if k != "lm_head.weight"}
    model = book_model(ref.config)
    assert load_gpt2(model, state, config=ref.config) is model
    torch.testing.assert_close(
        model.head.weight, ref.lm_head.weight, atol=0, rtol=0
    )


MISMATCHES = [  # (GPT overrides, config overrides, words of the message)
    (dict(num_layers=3), {}, "layers mismatch"),
    (dict(d_model=48), {}, "d_model (width) mismatch"),
    (dict(num_heads=8), {}, "num_heads mismatch"),
    ({}, dict(vocab_size=80), "vocab_size mismatch"),
    ({}, dict(n_positions=12), "context_length (positions) mismatch"),
    (dict(bias=False), {}, "bias mismatch"),
    (dict(activation="relu"), {}, "activation mismatch"),
    (dict(activation="gelu"), {}, "activation mismatch"),
    (dict(tie_weights=False), {}, "head mismatch"),
    (dict(norm="rms"), {}, "norm mismatch"),
    (dict(positions="rope"), {}, "positions mismatch"),
    (dict(num_kv_heads=2), {}, "attention mismatch"),
    (
        dict(ffn_width=64),
        {},
        "shape mismatch at transformer.h.0.mlp.c_fc.weight",
    ),
]


@pytest.mark.parametrize(
    "model_overrides, config_overrides, message", MISMATCHES
)
def test_a_mismatched_model_is_refused_before_anything_is_copied(
    model_overrides, config_overrides, message
):
    ref = reference(**config_overrides)
    model = book_model(GPT2Config(**SMALL), **model_overrides)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        load_gpt2(model, ref.state_dict(), num_heads=ref.config.n_head)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), (
            f"{key} was changed by a refused load"
        )


def test_a_shape_mismatch_in_the_last_layer_leaves_the_first_untouched():
    ref = reference()
    state = dict(ref.state_dict())
    state["transformer.h.1.mlp.c_proj.weight"] = torch.zeros(100, 32)
    model = book_model(ref.config)
    before = model.blocks[0].self_attn.qkv_proj.weight.clone()
    with pytest.raises(
        ValueError, match=r"shape mismatch at transformer\.h\.1\.mlp\.c_proj"
    ):
        load_gpt2(model, state, num_heads=4)
    assert torch.equal(model.blocks[0].self_attn.qkv_proj.weight, before)


def test_bad_state_dicts_are_refused():
    ref = reference()
    model = book_model(ref.config)
    with pytest.raises(TypeError, match="model must be a helpers.gpt.GPT"):
        load_gpt2(ref, ref.state_dict(), num_heads=4)
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        load_gpt2(model, ref, num_heads=4)
    no_embedding = {k: v for k, v in ref.state_dict().items() if "wte" not in k}
    with pytest.raises(ValueError, match="no 'transformer.wte.weight'"):
        load_gpt2(model, no_embedding, num_heads=4)
    missing = {
        k: v for k, v in ref.state_dict().items() if "h.1.ln_2.bias" not in k
    }
    with pytest.raises(ValueError, match=r"no 'transformer\.h\.1\.ln_2\.bias'"):
        load_gpt2(model, missing, num_heads=4)
    untied = dict(ref.state_dict(), **{"lm_head.weight": torch.zeros(64, 32)})
    with pytest.raises(ValueError, match="untied head"):
        load_gpt2(model, untied, num_heads=4)


def test_a_state_dict_without_the_transformer_prefix_loads():
    """GPT2Model's keys, and the released ``gpt2`` weights file's: ``h.0...``, no prefix."""
    ref = reference(4)
    prefixless = {
        k.removeprefix("transformer."): v
        for k, v in ref.state_dict().items()
        if k != "lm_head.weight"
    }
    assert "h.0.attn.c_attn.weight" in prefixless
    model = load_gpt2(book_model(ref.config), prefixless, config=ref.config)
    tokens = torch.randint(
        0, 64, (2, 16), generator=torch.Generator().manual_seed(4)
    )
    with torch.no_grad():
        error = (model(tokens) - ref(tokens).logits).abs().max().item()
    assert error < 1e-4


@pytest.mark.parametrize("model_heads", [2, 8])
def test_the_head_count_is_required(model_heads):
    """A state dict does not record heads: a 2- or 8-head model fits a 4-head checkpoint's
    tensors, and would load it silently with wrong logits; without a head count it is refused."""
    ref = reference()
    model = book_model(ref.config, num_heads=model_heads)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(TypeError, match="needs the checkpoint's configuration"):
        load_gpt2(model, ref.state_dict())
    for kwargs in (dict(config=ref.config), dict(num_heads=4)):
        with pytest.raises(ValueError, match="num_heads mismatch"):
            load_gpt2(model, ref.state_dict(), **kwargs)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])
    with pytest.raises(ValueError, match="contradicts config.n_head"):
        load_gpt2(model, ref.state_dict(), config=ref.config, num_heads=2)
    with pytest.raises(
        TypeError, match="config must be a transformers GPT2Config"
    ):
        load_gpt2(model, ref.state_dict(), config=dict(n_layer=2))


CONFIG_MISMATCHES = [  # GPT2Config overrides the tensors cannot show, and the message
    (dict(activation_function="relu"), "activation mismatch"),
    (dict(activation_function="gelu"), "activation mismatch"),
    (dict(activation_function="silu"), "activation mismatch"),
    (dict(scale_attn_weights=False), "scale_attn_weights mismatch"),
    (
        dict(scale_attn_by_inverse_layer_idx=True),
        "scale_attn_by_inverse_layer_idx",
    ),
    (dict(layer_norm_epsilon=1e-3), "layer_norm_epsilon mismatch"),
]


@pytest.mark.parametrize("config_overrides, message", CONFIG_MISMATCHES)
def test_a_config_records_what_the_tensors_do_not(config_overrides, message):
    """Each of these checkpoints fits a GPT-2-like model's tensors and gives other logits;
    with its config it is refused, before anything is copied."""
    ref = reference(**config_overrides)
    model = book_model(ref.config)
    with (
        torch.no_grad()
    ):  # the counter-case: loaded on the tensors alone, it is wrong
        silent = load_gpt2(
            book_model(ref.config), ref.state_dict(), num_heads=4
        )
        tokens = torch.randint(
            0, 64, (2, 16), generator=torch.Generator().manual_seed(0)
        )
        error = (silent(tokens) - ref(tokens).logits).abs().max().item()
    assert error > 1e-4
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        load_gpt2(model, ref.state_dict(), config=ref.config)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])


def test_a_config_with_another_activation_loads_into_a_model_built_with_it():
    ref = reference(5, activation_function="relu")
    model = load_gpt2(
        book_model(ref.config, activation="relu"),
        ref.state_dict(),
        config=ref.config,
    )
    tokens = torch.randint(
        0, 64, (2, 16), generator=torch.Generator().manual_seed(5)
    )
    with torch.no_grad():
        error = (model(tokens) - ref(tokens).logits).abs().max().item()
    assert error < 1e-4
