"""Tests of helpers.gpt: the decoder-only model, its key/value cache and its sampling."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from conftest import host_reads
from torch import nn

from helpers.analysis import DispatchCounter, count_parameters
from helpers.attention import MultiHeadAttention
from helpers.efficient import receptive_field
from helpers.gpt import (
    GPT,
    POSITIONS,
    CausalSelfAttention,
    GPTBlock,
    GPTConfig,
    next_token_probabilities,
    score_bias,
    top_k_filter,
)
from helpers.kv_cache import KVCache
from helpers.masks import causal_mask
from helpers.positional import alibi_bias, alibi_slopes
from helpers.training import token_cross_entropy
from helpers.transformer import EncoderBlock

VOCAB = 11
ATOL = 1e-5


def _config(vocab_size=VOCAB, context_length=8, **fields) -> GPTConfig:
    """A GPTConfig of ``VOCAB`` tokens and context 8 unless told; ``fields`` as GPTConfig's."""
    return GPTConfig(
        vocab_size=vocab_size, context_length=context_length, **fields
    )


def _model(positions="learned", seed=0, **fields) -> GPT:
    """A seeded GPT of context 24, width 16, 2 layers and 4 heads, in eval mode."""
    torch.manual_seed(seed)
    model = GPT(
        _config(
            context_length=24,
            d_model=16,
            num_layers=2,
            num_heads=4,
            positions=positions,
            **fields,
        )
    )
    with (
        torch.no_grad()
    ):  # larger weights than GPT-2's init, so that mistakes show
        for parameter in model.parameters():
            parameter.mul_(8)
    return model.eval()


def _gpt(vocab_size=VOCAB, context_length=8, **fields) -> GPT:
    return GPT(_config(vocab_size, context_length, **fields))


def _attention(d_model, num_heads, **fields) -> CausalSelfAttention:
    config = _config(context_length=64, d_model=d_model, num_heads=num_heads)
    return CausalSelfAttention(config.replace(**fields))


def _tokens(batch=3, length=12, seed=1) -> torch.Tensor:
    return torch.randint(
        VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed)
    )


VARIANTS = [
    *[dict(positions=p) for p in POSITIONS],
    dict(positions="rope", num_kv_heads=2),  # grouped-query
    dict(positions="learned", num_kv_heads=1),  # multi-query
    dict(positions="alibi", num_kv_heads=2, window=3),
    dict(positions="rope", window=1),
]


def _name(variant: dict) -> str:
    return "-".join(f"{key}={value}" for key, value in variant.items())


# --------------------------------------------------------------------------- causality


@pytest.mark.parametrize("variant", VARIANTS, ids=_name)
def test_no_logit_depends_on_a_later_token(variant):
    model = _model(**variant)
    tokens = _tokens(batch=2, length=9)
    embedded = model.token_embedding(tokens).detach().requires_grad_(True)
    # the embedding layer hands over a leaf tensor, so that gradients reach every position
    hook = model.token_embedding.register_forward_hook(lambda *_: embedded)
    logits = model(tokens)
    hook.remove()
    for t in range(tokens.shape[1]):
        (gradient,) = torch.autograd.grad(
            logits[:, t].sum(), embedded, retain_graph=True
        )
        assert (gradient[:, t + 1 :] == 0).all(), (
            f"position {t} reads a later token"
        )
        assert (gradient[:, t] != 0).any()


def test_window_limits_what_a_position_reads():
    layer = _attention(16, 4, window=3).eval()
    _, weights = layer(torch.randn(2, 8, 16), return_attention=True)
    i, j = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    outside = (j > i) | (j <= i - 3)
    assert weights[..., outside].abs().max() == 0
    assert (weights[..., ~outside] > 0).all()


# --------------------------------------------------------------------------- the untrained model


def test_untrained_loss_is_near_log_vocabulary():
    torch.manual_seed(0)
    model = _gpt(97, 32, d_model=32, num_layers=2, num_heads=4)
    tokens = torch.randint(97, (16, 33))
    loss = token_cross_entropy(model(tokens[:, :-1]), tokens[:, 1:])
    assert abs(loss.item() - math.log(97)) < 0.05


def test_tied_head_shares_the_embedding_matrix():
    tied, untied = _model(), _model(tie_weights=False)
    assert tied.head.weight is tied.token_embedding.weight
    assert count_parameters(untied) - count_parameters(tied) == VOCAB * 16


def test_gpt2_small_has_the_published_parameter_count():
    # GPT-2 small: 50,257 tokens, context 1,024, width 768, 12 layers of 12 heads, learned
    # positions, LayerNorm and linear layers with biases, head tied to the token embedding.
    with torch.device("meta"):
        model = _gpt(
            50_257,
            1024,
            d_model=768,
            num_layers=12,
            num_heads=12,
            bias=True,
            norm="layer",
        )
    assert model.head.weight.is_meta
    assert count_parameters(model) == 124_439_808
    per_block = count_parameters(model.blocks[0])
    attention, ffn = (
        768 * 2304 + 2304 + 768 * 768 + 768,
        2 * 768 * 3072 + 3072 + 768,
    )
    assert (
        per_block == 4 * 768 + attention + ffn
    )  # two LayerNorms, attention, FFN
    assert (
        count_parameters(model)
        == 50_257 * 768 + 1024 * 768 + 12 * per_block + 2 * 768
    )


@pytest.mark.parametrize(
    "activation, expected",
    [
        ("relu", nn.ReLU()),
        ("gelu", nn.GELU()),
        ("gelu_tanh", nn.GELU(approximate="tanh")),
    ],
)
def test_activation_option_builds_the_named_function(activation, expected):
    model = _gpt(d_model=16, num_heads=2, activation=activation)
    x = torch.linspace(-3, 3, 61)
    for block in model.blocks:
        assert type(block.ffn.activation) is type(expected)
        torch.testing.assert_close(
            block.ffn.activation(x), expected(x), atol=0, rtol=0
        )
    # the default stays ReLU, so every chapter's stored results stay what they were
    assert isinstance(_model().blocks[0].ffn.activation, nn.ReLU)
    # the tanh approximation is not exact GELU (the difference the loader refuses)
    gap = (nn.GELU(approximate="tanh")(x) - nn.GELU()(x)).abs().max().item()
    assert 1e-4 < gap < 1e-3


def test_gpt2_residual_init_scales_the_residual_projections():
    layers = 12
    torch.manual_seed(0)
    flat = _gpt(num_layers=layers)
    torch.manual_seed(0)
    gpt2 = _gpt(num_layers=layers, residual_init="gpt2")
    scaled = 0.02 / math.sqrt(2 * layers)

    def std(model, pick):
        return (
            torch.cat([pick(b).weight.flatten() for b in model.blocks])
            .std()
            .item()
        )

    for pick in (lambda b: b.self_attn.out_proj, lambda b: b.ffn.linear2):
        assert abs(std(flat, pick) - 0.02) < 0.001
        assert abs(std(gpt2, pick) - scaled) < 0.0005
    # the other weights are drawn as before
    assert abs(std(gpt2, lambda b: b.self_attn.qkv_proj) - 0.02) < 0.001
    assert abs(std(gpt2, lambda b: b.ffn.linear1) - 0.02) < 0.001


def test_bad_activation_and_residual_init_are_refused():
    with pytest.raises(
        ValueError, match=r"activation must be one of .*got 'swish'"
    ):
        _gpt(d_model=16, num_heads=2, activation="swish")
    with pytest.raises(
        ValueError, match=r"residual_init must be None .* or 'gpt2'.*got 'GPT2'"
    ):
        _gpt(d_model=16, num_heads=2, residual_init="GPT2")


# --------------------------------------------------------------------------- equivalences


@pytest.mark.parametrize("norm, bias", [("rms", False), ("layer", True)])
def test_block_equals_a_causal_encoder_block(norm, bias):
    torch.manual_seed(0)
    encoder_block = EncoderBlock(
        16, 4, 40, norm_first=True, bias=bias, norm=norm
    ).eval()
    with torch.no_grad():
        for parameter in encoder_block.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    config = _config(d_model=16, num_heads=4, ffn_width=40)
    block = GPTBlock(config.replace(bias=bias, norm=norm)).eval()
    block.load_state_dict(
        encoder_block.state_dict()
    )  # the same names and shapes
    x = torch.randn(3, 7, 16)
    torch.testing.assert_close(
        block(x), encoder_block(x, mask=causal_mask(7)), atol=ATOL, rtol=0
    )


def test_grouped_query_attention_equals_mha_with_repeated_key_value_heads():
    torch.manual_seed(0)
    grouped = _attention(16, 4, num_kv_heads=2).eval()
    full = MultiHeadAttention(16, 4).eval()
    w_q, w_k, w_v = grouped.qkv_proj.weight.split([16, 8, 8])
    d_head = 4

    # key/value head g serves query heads 2g and 2g + 1: repeat its rows for each of them
    def repeat(w):
        return w.view(2, 1, d_head, 16).expand(2, 2, d_head, 16).reshape(16, 16)  # noqa: E731

    with torch.no_grad():
        full.qkv_proj.weight.copy_(torch.cat([w_q, repeat(w_k), repeat(w_v)]))
        full.out_proj.weight.copy_(grouped.out_proj.weight)
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(
        grouped(x), full(x, x, x, mask=causal_mask(6)), atol=ATOL, rtol=0
    )


def test_alibi_bias_is_chapter_5s_on_the_causal_part():
    layer = _attention(16, 4, positions="alibi")
    bias = score_bias(0, 6, slopes=layer.slopes, like=torch.zeros(1, 6, 16))
    expected = alibi_bias(4, 6).masked_fill(~causal_mask(6), -math.inf)
    assert torch.equal(bias, expected)


def test_return_attention_gives_the_same_output():
    for positions in ("none", "rope", "alibi"):
        layer = _attention(
            16, 4, num_kv_heads=2, positions=positions, window=4
        ).eval()
        x = torch.randn(2, 9, 16)
        output, weights = layer(x, return_attention=True)
        torch.testing.assert_close(output, layer(x), atol=ATOL, rtol=0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 9))


# --------------------------------------------------------------------------- the cache


@pytest.mark.parametrize("variant", VARIANTS, ids=_name)
def test_cache_gives_the_logits_and_tokens_of_full_recomputation(variant):
    model = _model(**variant)
    tokens = _tokens(batch=3, length=14)
    full = model(tokens)
    caches = model.new_caches(3)
    steps = [
        model(tokens[:, :5], caches)
    ]  # a prompt of 5, then one token at a time
    steps += [model(tokens[:, t : t + 1], caches) for t in range(5, 14)]
    torch.testing.assert_close(
        torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4
    )
    prompt = tokens[:, :4]
    with_cache = model.generate(prompt, 16, greedy=True)
    without = model.generate(prompt, 16, greedy=True, use_cache=False)
    assert torch.equal(with_cache, without)
    assert with_cache.shape == (3, 20) and torch.equal(
        with_cache[:, :4], prompt
    )


def test_cache_holds_keys_and_values_of_the_kv_heads():
    model = _model(num_kv_heads=2)
    caches = model.new_caches(3)
    model(_tokens(batch=3, length=10), caches)
    assert len(caches) == 2
    for cache in caches:
        assert (
            cache.keys.shape == cache.values.shape == (3, 2, 10, 4)
        )  # (B, H_kv, T, d_head)
        assert cache.length == 10
        assert (
            cache.memory_bytes() == 2 * 3 * 2 * 10 * 4 * 4
        )  # keys and values, float32
    assert KVCache().length == 0 and KVCache().memory_bytes() == 0


def _unchunked_logits(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """The model's logits with every layer's T x T scores written out (no cache, no chunks)."""
    x = model.token_embedding(tokens)
    if model.position_embedding is not None:
        x = model.position_embedding(x)
    for block in model.blocks:
        x = x + block.self_attn(block.norm1(x), return_attention=True)[0]
        x = x + block.ffn(block.norm2(x))
    return model.head(model.final_norm(x))


@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
@pytest.mark.parametrize("window", [1, 3, 5])
@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_rolling_cache_gives_the_logits_of_full_recomputation(
    positions, window, chunk
):
    model = _model(positions, num_kv_heads=2, window=window)
    tokens = _tokens(batch=2, length=24)
    full = _unchunked_logits(model, tokens)
    torch.testing.assert_close(
        model(tokens), full, atol=1e-4, rtol=1e-4
    )  # chunked, no cache
    caches = model.new_caches(2)
    steps = []
    for start in range(0, 24, chunk):
        steps.append(model(tokens[:, start : start + chunk], caches))
        for cache in (
            caches
        ):  # rolled: the last `window` positions only, at their true place
            assert cache.held == min(
                window, cache.length
            ) and cache.length == len(tokens[0, : start + chunk])
            assert cache.start == cache.length - cache.held
    torch.testing.assert_close(
        torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4
    )
    prompt = tokens[:, :4]
    assert torch.equal(model.generate(prompt, 20, greedy=True),
                       model.generate(prompt, 20, greedy=True, use_cache=False))  # fmt: skip


STREAMING = ("rope", "alibi", "none")  # relative positions, or none


@pytest.mark.parametrize(
    "dtype, tolerance",
    [(torch.float64, dict(atol=1e-10, rtol=0)),  # the exact equivalence
     # logits up to about 20: float32's rounding, along two orders of sums (measured at
     # most 1.03e-4 on an AMD EPYC, rope, and 7.8e-5 there under scalar numerics; 5e-5
     # held on the book's Intel Xeon)
     (torch.float32, dict(atol=3e-4, rtol=1e-5))],
    ids=["float64", "float32"],
)  # fmt: skip
@pytest.mark.parametrize("positions", STREAMING)
def test_a_streaming_model_steps_its_rolling_caches_far_past_the_context(
    positions, dtype, tolerance
):
    """A window and relative positions: the caches roll on past context_length.

    Two equivalences, each to 1e-5. (1) Stepping equals the whole text read at
    once at its true positions, every layer's T x T scores written out. (2) The
    model cannot tell where it is: position t's logits are those of the last
    ``receptive_field(window, L)`` tokens read afresh from position 0 (with RoPE
    the scores depend only on distances, ALiBi's penalty too). The last
    ``window`` tokens alone are not enough once there are two layers: a token a
    layer reads has read ``window - 1`` further back in the layer below.
    """
    window, length = 3, 10 * 24  # ten times the context
    model = _model(positions, num_kv_heads=2, window=window).to(dtype)
    assert model.config.streams and model.context_length == 24
    tokens = _tokens(batch=2, length=length)
    caches = model.new_caches(2)
    with torch.no_grad():
        steps = torch.cat(
            [model(tokens[:, t : t + 1], caches) for t in range(length)], 1
        )
        full = _unchunked_logits(model, tokens)  # (2, 240, V), 240 x 240 scores
        chunked = model(tokens)  # no cache: chunks of `window` queries
    assert caches[0].length == length and caches[0].held == window
    torch.testing.assert_close(steps, full, **tolerance)
    torch.testing.assert_close(chunked, full, **tolerance)
    reach = receptive_field(window, len(model.blocks))  # 5 tokens
    with torch.no_grad():
        for t in range(reach - 1, length, 7):
            fresh = model(tokens[:, t + 1 - reach : t + 1])[:, -1]
            torch.testing.assert_close(steps[:, t], fresh, **tolerance)
        too_short = model(tokens[:, -window:])[:, -1]
    assert (steps[:, -1] - too_short).abs().max() > 1e-2


def test_a_streaming_models_caches_stay_flat_however_long_it_runs():
    """Past the context every cache holds ``window`` positions in the same buffers:
    the tensors' sizes and the bytes held and allocated are the same at every step."""
    model = _model("rope", num_kv_heads=2, window=3)  # context 24
    caches = model.new_caches(2, capacity=24)
    tokens = _tokens(batch=2, length=10 * 24)
    sizes = set()
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            model(tokens[:, t : t + 1], caches)
            if t >= 3:  # the window is full
                sizes.add(tuple(
                    (tuple(c.keys.shape), c.capacity, c.memory_bytes(),
                     c.allocated_bytes())
                    for c in caches
                ))  # fmt: skip
    assert len(sizes) == 1
    [(shape, capacity, held, allocated), _] = sizes.pop()
    assert shape == (2, 2, 3, 4)  # (B, H_kv, window, d_head)
    assert held == 2 * 2 * 2 * 3 * 4 * 4  # keys and values, float32
    assert capacity == 6 and allocated == 2 * held  # about two windows


@pytest.mark.parametrize("positions", STREAMING)
def test_a_streaming_model_generates_past_the_context_at_a_flat_cost(positions):
    model = _model(positions, num_kv_heads=2, window=3)  # context 24
    prompt = _tokens(batch=2, length=4)
    out = model.generate(prompt, 100, greedy=True)  # to 104 tokens
    expected = prompt  # every step reads the whole text, at its true positions
    with torch.no_grad():
        for _ in range(100):
            logits = _unchunked_logits(model, expected)[:, -1]
            expected = torch.cat([expected, logits.argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, expected)
    # without a cache: the last context afresh, the same tokens (the receptive
    # field, 5 tokens, fits in it)
    assert torch.equal(model.generate(prompt, 100, greedy=True,
                                      use_cache=False), out)  # fmt: skip
    # a step past the context costs what one inside it costs (nine steps: three
    # rolls of the buffers in each count), and reads no value back; the old crop
    # (a whole context's forward pass per step) wrote about 50 times more
    inside, past = (
        _ops_per_step(model, 8, steps=9),
        _ops_per_step(model, 60, steps=9),
    )
    assert inside == past and past["syncs"] == 0
    # a prompt longer than the context is read whole, at its true positions
    long_prompt = _tokens(batch=2, length=50)
    with torch.no_grad():
        first = _unchunked_logits(model, long_prompt)[:, -1].argmax(-1)
    assert torch.equal(
        model.generate(long_prompt, 1, greedy=True)[:, -1], first
    )


@pytest.mark.parametrize(
    "variant, why",
    [(dict(positions="learned", window=3), "its 'learned' positions have no row"),
     (dict(positions="sinusoidal", window=3), "its 'sinusoidal' positions have no row"),
     (dict(positions="rope"), "without a window its cost would grow")],
    ids=lambda value: _name(value) if isinstance(value, dict) else "",
)  # fmt: skip
def test_a_model_that_does_not_stream_stops_at_its_context(variant, why):
    model = _model(**variant)
    assert not model.config.streams
    with pytest.raises(ValueError, match=rf"context_length=24 \({why}"):
        model(_tokens(length=25))
    caches = model.new_caches(3)
    model(_tokens(length=24), caches)
    with pytest.raises(ValueError, match=r"25 tokens \(24 cached \+ 1 new\)"):
        model(_tokens(length=1), caches)


@pytest.mark.parametrize("window, chunk", [(1, 1), (3, 2), (4, 5), (4, 9)])
def test_rolling_cache_scores_never_exceed_window_plus_chunk(window, chunk):
    layer = _attention(
        16, 4, num_kv_heads=2, positions="rope", window=window
    ).eval()
    cache = KVCache(window)
    x = torch.randn(1, 40, 16)
    for start in range(0, 40, chunk):
        _, weights = layer(
            x[:, start : start + chunk], cache, return_attention=True
        )
        assert (
            weights.shape[-1] <= window + chunk
        )  # (B, H, chunk, held + chunk)
        assert cache.held <= window
    assert cache.length == 40 and cache.memory_bytes() == 2 * 2 * window * 4 * 4
    everything = KVCache()  # no window: the cache keeps all 40 positions
    for start in range(0, 40, chunk):
        layer(x[:, start : start + chunk], everything)
    assert everything.held == 40 > window


def test_a_decoding_step_that_sees_every_key_builds_no_mask():
    assert score_bias(9, 1) is None  # one query, every key visible
    assert (
        score_bias(9, 2) is not None
    )  # two queries: the first must not see the second
    assert (
        score_bias(9, 1, first_key=6, window=4) is None
    )  # keys 6..9: all in the window
    assert (
        score_bias(9, 1, first_key=5, window=4) is not None
    )  # key 5 is out of it
    assert (
        score_bias(9, 1, slopes=alibi_slopes(2)) is not None
    )  # ALiBi adds to every score
    assert _attention(16, 2, positions="alibi").slopes.shape == (2,)
    assert _attention(16, 2, positions="rope").slopes is None


def test_a_rolling_cache_holds_a_bounded_buffer_however_long_it_runs():
    cache = KVCache(window=2)
    cache.append(
        torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    )  # a prompt of 5
    buffer, allocated = cache._keys.data_ptr(), cache.allocated_bytes()
    assert (
        cache.capacity == 5 and allocated == 2 * 5 * 4 * 4
    )  # room for the prompt, no more
    everything = [torch.randn(1, 1, 1, 4) for _ in range(50)]
    for new in everything:
        keys, _ = cache.append(new, new)
        assert keys.shape[2] == 3 and torch.equal(
            keys[:, :, -1:], new
        )  # 2 held + 1 new
    assert torch.equal(cache.keys, torch.cat(everything[-2:], dim=2))
    assert (
        cache._keys.data_ptr() == buffer
        and cache.allocated_bytes() == allocated
    )


def test_a_cache_writes_into_its_buffer_and_grows_only_past_its_capacity():
    cache = KVCache(capacity=10)
    entries = [torch.randn(2, 3, 4, 8)] + [
        torch.randn(2, 3, 1, 8) for _ in range(6)
    ]
    cache.append(entries[0], -entries[0])
    buffer = cache._keys.data_ptr()
    for new in entries[1:]:
        cache.append(new, -new)
    assert (
        cache._keys.data_ptr() == buffer and cache.capacity == 10
    )  # filled, never moved
    assert torch.equal(cache.keys, torch.cat(entries, dim=2))
    assert torch.equal(cache.values, -torch.cat(entries, dim=2))
    assert (
        cache.memory_bytes()
        == cache.allocated_bytes()
        == 2 * 2 * 3 * 10 * 8 * 4
    )
    cache.append(
        entries[1], entries[1]
    )  # one more than its capacity: it doubles
    assert cache.capacity == 20 and cache.held == cache.length == 11
    assert (
        cache.memory_bytes() == 2 * 2 * 3 * 11 * 8 * 4 < cache.allocated_bytes()
    )
    assert torch.equal(cache.keys[:, :, :10], torch.cat(entries, dim=2))


def test_a_cache_under_autograd_concatenates_so_gradients_flow():
    cache = KVCache()
    first, second = (
        torch.randn(1, 2, n, 4, requires_grad=True) for n in (3, 1)
    )
    cache.append(first, first)
    keys, values = cache.append(second, second)
    (
        keys * values
    ).sum().backward()  # in-place writes into a buffer would break this
    torch.testing.assert_close(first.grad, 2 * first)
    assert cache.length == 4 and cache.held == 4


def test_differentiable_says_how_a_cache_grows():
    """True: out of place at every append, autograd or not (no room kept ahead);
    False: in place, and an append that autograd records is refused (backward
    would need keys that the next append overwrites); None follows autograd."""
    first, second = (torch.randn(1, 2, n, 4) for n in (3, 1))
    out_of_place = KVCache(capacity=10, differentiable=True)
    held, _ = out_of_place.append(first, first)
    keys, _ = out_of_place.append(second, second)
    assert out_of_place.capacity == out_of_place.held == 4  # no room ahead
    assert torch.equal(keys, torch.cat([first, second], dim=2))
    assert torch.equal(held, first)  # the first append's keys, untouched
    in_place = KVCache(capacity=10, differentiable=False)
    in_place.append(first, first)
    assert in_place.capacity == 10  # preallocated
    recorded = second.clone().requires_grad_(True)
    with pytest.raises(ValueError, match=r"differentiable=False.*no_grad"):
        in_place.append(recorded, recorded)
    with torch.no_grad():  # not recorded: in place, as in decoding
        in_place.append(recorded, recorded)
    assert in_place.capacity == 10 and in_place.length == 4
    with pytest.raises(TypeError, match="differentiable must be True or"):
        KVCache(differentiable=1)


@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_a_windowed_layer_trains_in_chunks_as_on_the_whole_sequence(
    num_kv_heads,
):
    """A long input goes through a windowed layer in chunks of ``window``
    queries and a fresh rolling cache; under autograd that cache grows out of
    place, so outputs and gradients equal those of the whole T x T pass (which
    ``return_attention=True`` takes)."""
    torch.manual_seed(0)
    layer = _attention(
        16, 4, window=3, positions="rope", num_kv_heads=num_kv_heads
    )
    x = torch.randn(2, 11, 16)
    outputs, gradients = [], []
    for whole in (False, True):
        layer.zero_grad()
        output = layer(x, return_attention=whole)
        output = output[0] if whole else output
        output.pow(2).sum().backward()
        outputs.append(output)
        gradients.append(layer.qkv_proj.weight.grad.clone())
    torch.testing.assert_close(outputs[0], outputs[1], atol=ATOL, rtol=0)
    torch.testing.assert_close(gradients[0], gradients[1], atol=1e-4, rtol=1e-4)


def _ops_per_step(model, prompt_length, steps=8, **options):
    """What generate's loop dispatches per step (the prompt's pass cancels out)."""
    prompt = _tokens(batch=2, length=prompt_length)
    counts = []
    for new in (1, 1 + steps):
        with DispatchCounter() as counter:
            model.generate(prompt, new, greedy=True, **options)
        counts.append(counter)
    return {
        name: (getattr(counts[1], name) - getattr(counts[0], name)) / steps
        for name in ("ops", "non_view_ops", "syncs", "elements_written")
    }


@pytest.mark.parametrize(
    "variant",
    [dict(positions="learned"), dict(positions="rope"),
     dict(positions="rope", num_kv_heads=2)],
    ids=_name,
)  # fmt: skip
def test_a_decoding_step_costs_the_same_at_every_cache_length(variant):
    model = _model(**variant)  # context 24
    short, long = _ops_per_step(model, 2), _ops_per_step(model, 14)
    assert (
        short == long
    )  # operators, and elements written outside the caches' reads
    assert short["syncs"] == 0  # the loop never waits for a tensor's value
    without = (
        _ops_per_step(model, 2, use_cache=False),
        _ops_per_step(model, 14, use_cache=False),
    )
    assert without[0]["ops"] == without[1]["ops"]  # the same operators ...
    assert (
        without[0]["elements_written"] < without[1]["elements_written"]
    )  # on more positions


@pytest.mark.parametrize(
    "variant",
    [dict(positions="rope", num_kv_heads=2),
     dict(positions="rope", num_kv_heads=1),
     dict(positions="learned", num_kv_heads=2),
     dict(positions="alibi", num_kv_heads=2),
     dict(positions="rope", num_kv_heads=2, window=6)],
    ids=_name,
)  # fmt: skip
def test_a_grouped_query_step_writes_no_more_than_a_multi_head_step(variant):
    """Key/value heads shared, not copied: a copy of the cache per query head would
    write more at every step, and more the longer the context."""

    def step(kv_heads, context):
        torch.manual_seed(0)
        config = GPTConfig(vocab_size=VOCAB, context_length=context + 9,
                           d_model=16, num_layers=2, num_heads=4,
                           **{**variant, "num_kv_heads": kv_heads})  # fmt: skip
        return _ops_per_step(GPT(config).eval(), context)["elements_written"]

    for context in (64, 256, 1000):
        assert step(variant["num_kv_heads"], context) <= step(4, context)


def test_generate_reads_a_value_back_only_to_check_for_the_end():
    model = _model()
    assert _ops_per_step(model, 4)["syncs"] == 0
    assert (
        _ops_per_step(model, 4, end_id=VOCAB - 1)["syncs"] == 1
    )  # `if ended.all()`


def test_sampling_is_reproducible_and_restores_the_mode():
    model = _model().train()
    prompt = _tokens(batch=2, length=3)
    first = model.generate(
        prompt, 10, generator=torch.Generator().manual_seed(5)
    )
    second = model.generate(
        prompt, 10, generator=torch.Generator().manual_seed(5)
    )
    assert torch.equal(first, second) and model.training


def test_end_id_pads_after_the_end_and_changes_nothing_before_it():
    model = _model()
    prompt = _tokens(batch=6, length=2)
    plain = model.generate(
        prompt, 20, generator=torch.Generator().manual_seed(3)
    )
    end_id = int(plain[0, 5])  # a token that some sequences emit
    ended = model.generate(
        prompt, 20, generator=torch.Generator().manual_seed(3), end_id=end_id
    )
    padded = model.generate(
        prompt,
        20,
        generator=torch.Generator().manual_seed(3),
        end_id=end_id,
        pad_id=VOCAB - 1,
    )
    assert ended.shape == padded.shape == plain.shape
    for row, with_end, with_pad in zip(plain, ended, padded, strict=True):
        generated = row[2:].tolist()
        stop = (
            2 + generated.index(end_id) + 1 if end_id in generated else len(row)
        )
        assert torch.equal(
            with_end[:stop], row[:stop]
        )  # token-identical up to the end
        assert (with_end[stop:] == end_id).all() and (
            with_pad[stop:] == VOCAB - 1
        ).all()
    # without end_id: the plain sampling loop, step by step (the behaviour before end_id)
    tokens, generator = prompt, torch.Generator().manual_seed(3)
    with torch.no_grad():
        for _ in range(20):
            probabilities = model(tokens)[:, -1].softmax(-1)
            tokens = torch.cat(
                [
                    tokens,
                    torch.multinomial(probabilities, 1, generator=generator),
                ],
                1,
            )
    assert torch.equal(tokens, plain)
    # every sequence ends at once: the rest is padding
    same = prompt[:1].repeat(4, 1)
    first = int(model.generate(same, 1, greedy=True)[0, -1])
    stopped = model.generate(
        same, 20, greedy=True, end_id=first, pad_id=VOCAB - 1
    )
    assert (stopped[:, 2] == first).all() and (
        stopped[:, 3:] == VOCAB - 1
    ).all()
    assert stopped.shape == (4, 22)


# --------------------------------------------------------------------------- sampling


def test_temperature_and_top_k_shape_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    plain = next_token_probabilities(logits)
    torch.testing.assert_close(plain, logits.softmax(-1))
    cold, hot = (
        next_token_probabilities(logits, 0.5),
        next_token_probabilities(logits, 2.0),
    )
    assert (
        cold[0, 0] > plain[0, 0] > hot[0, 0]
    )  # colder: more weight on the best token
    assert hot[0, 3] > plain[0, 3] > cold[0, 3]
    top2 = next_token_probabilities(logits, top_k=2)
    assert torch.equal(top2[0, 2:], torch.zeros(2))
    torch.testing.assert_close(top2[0, :2], logits[0, :2].softmax(-1))
    assert torch.equal(next_token_probabilities(logits, top_k=10), plain)


def test_the_loss_leaves_out_padding_targets():
    logits, targets = torch.randn(2, 5, 7), torch.randint(7, (2, 5))
    targets[
        1, 3:
    ] = -100  # PyTorch's ignore_index, the padding of chapter 10's rows
    kept = targets != -100
    expected = nn.functional.cross_entropy(logits[kept], targets[kept])
    torch.testing.assert_close(token_cross_entropy(logits, targets), expected)


def test_top_k_filter_keeps_the_k_largest_logits_of_each_row():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 3.0, 1.0]])
    kept = top_k_filter(logits, 2)
    assert torch.equal(kept[0], torch.tensor([2.0, 1.0, -math.inf, -math.inf]))
    assert torch.equal(kept[1], torch.tensor([-math.inf, 3.0, 3.0, -math.inf]))
    assert torch.equal(
        top_k_filter(logits, 1)[1], kept[1]
    )  # ties at the k-th are kept
    assert (
        top_k_filter(logits, None) is logits
        and top_k_filter(logits, 4) is logits
    )
    torch.testing.assert_close(  # a softmax afterwards renormalizes over the kept ones
        top_k_filter(logits, 2)[0].softmax(-1)[:2], logits[0, :2].softmax(-1)
    )
    with pytest.raises(ValueError, match="k must be a positive int, got 0"):
        top_k_filter(logits, 0)
    with pytest.raises(TypeError, match="k must be a positive int"):
        top_k_filter(logits, 2.0)
    with pytest.raises(TypeError, match="logits"):
        top_k_filter(torch.tensor([[1, 2, 3]]), 2)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("positions", POSITIONS)
def test_a_sequence_longer_than_the_context_is_refused(positions):
    model = _model(positions)
    with pytest.raises(ValueError, match="context_length=24"):
        model(_tokens(length=25))
    caches = model.new_caches(3)
    model(_tokens(length=20), caches)
    with pytest.raises(ValueError, match=r"25 tokens \(20 cached \+ 5 new\)"):
        model(_tokens(length=5), caches)


CROPPING = [
    *[dict(positions=p) for p in POSITIONS],
    dict(positions="learned", window=3),  # absolute positions: a window or not
    dict(positions="sinusoidal", window=3),
]


@pytest.mark.parametrize("variant", CROPPING, ids=_name)
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_past_the_context_reads_the_last_window(variant, use_cache):
    """Past ``context_length`` each step of a model that does not stream reads the
    last window afresh (nanoGPT's crop): the tokens are those of a loop that
    recomputes on the cropped window."""
    model = _model(**variant)  # context_length 24
    prompt = _tokens(length=4)
    out = model.generate(prompt, 40, greedy=True, use_cache=use_cache)
    assert out.shape == (3, 44)
    expected = prompt
    with torch.no_grad():
        for _ in range(40):
            logits = model(expected[:, -24:])[:, -1]
            expected = torch.cat([expected, logits.argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, expected)
    # a prompt longer than the context is cropped the same way
    long_prompt = _tokens(length=30)
    out = model.generate(long_prompt, 3, greedy=True, use_cache=use_cache)
    with torch.no_grad():
        first = model(long_prompt[:, -24:])[:, -1].argmax(-1)
    assert torch.equal(out[:, 30], first)


def test_misuse_is_refused_clearly():
    model = _model()
    with pytest.raises(ValueError, match=r"lie in 0 \.\. 10"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(TypeError, match="int64"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="one KVCache per layer"):
        model(_tokens(), [KVCache()])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        next_token_probabilities(torch.zeros(1, 4), temperature=0.0)
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        next_token_probabilities(torch.zeros(1, 4), top_k=0)
    masked = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    with pytest.raises(ValueError, match=r"1 row\(s\) with no finite value"):
        next_token_probabilities(masked)  # softmax: a row of NaN
    with pytest.raises(ValueError, match=r"1 NaN and 0 \+inf values"):
        next_token_probabilities(torch.tensor([[0.0, math.nan]]))
    with pytest.raises(ValueError, match=r"0 NaN and 1 \+inf values"):
        next_token_probabilities(torch.tensor([[0.0, math.inf]]))
    with pytest.raises(
        TypeError,
        match=r"generator must be a torch.Generator or None, got int \(0\).*"
        r"torch.Generator\(\).manual_seed\(0\)",
    ):
        model.generate(_tokens(), 3, generator=0)
    with pytest.raises(
        TypeError, match=r"got a list; make one with torch.tensor\(\[ids\]\)"
    ):
        model.generate([1, 2, 3], 3)
    with pytest.raises(ValueError, match="empty"):
        model.generate(torch.zeros(2, 0, dtype=torch.long), 3)
    with pytest.raises(
        ValueError, match=r"end_id=11 is not a token.*0 \.\. 10"
    ):
        model.generate(_tokens(), 3, end_id=VOCAB)
    with pytest.raises(ValueError, match="end_id=-1 is not a token"):
        model.generate(_tokens(), 3, end_id=-1)
    with pytest.raises(TypeError, match="end_id must be an int"):
        model.generate(_tokens(), 3, end_id=torch.tensor(2))
    with pytest.raises(ValueError, match="pad_id=1 without end_id"):
        model.generate(_tokens(), 3, pad_id=1)
    with pytest.raises(ValueError, match=r"same KVCache object.*new_caches"):
        model(_tokens(), [KVCache()] * 2)  # one cache for every layer
    with pytest.raises(ValueError, match=r"window=3\).*every earlier key"):
        model(_tokens(), [KVCache(window=3), KVCache(window=3)])
    with pytest.raises(ValueError, match=r"window=3\).*every earlier key"):
        model.blocks[0].self_attn(torch.randn(1, 4, 16), KVCache(window=3))
    windowed = _model(window=4)
    with pytest.raises(ValueError, match=r"window=2\).*the last 4 keys"):
        windowed(_tokens(), [KVCache(window=2), KVCache(window=2)])
    for caches in ([KVCache(), KVCache()], windowed.new_caches(3)):
        windowed(_tokens(), caches)  # keeping more than the window is fine
    caches = model.new_caches(3)
    model(_tokens(batch=3, length=4), caches)
    with pytest.raises(ValueError, match="holds 3 sequences but x has 2"):
        model(_tokens(batch=2, length=1), caches)


# --------------------------------------------------------------------------- the configuration


CONFIG_ERRORS = [
    (
        dict(vocab_size=0),
        ValueError,
        "vocab_size must be a positive int, got 0",
    ),
    (
        dict(context_length=8.0),
        TypeError,
        "context_length must be a positive int",
    ),
    (dict(num_layers=True), TypeError, "num_layers must be a positive int"),
    (
        dict(num_heads=5),
        ValueError,
        "d_model=64 is not divisible by num_heads=5",
    ),
    (
        dict(num_kv_heads=3),
        ValueError,
        r"not divisible by num_kv_heads=3.*among \[1, 2, 4\]",
    ),
    (dict(ffn_width=0), ValueError, "ffn_width must be a positive int"),
    (dict(window=0), ValueError, "window must be a positive int"),
    (
        dict(positions="absolute"),
        ValueError,
        "positions must be one of .*'rope' and 'alibi'",
    ),
    (dict(dropout=1.0), ValueError, r"dropout must be in \[0, 1\)"),
    (dict(bias=1), TypeError, "bias must be True or False"),
    (dict(tie_weights="yes"), TypeError, "tie_weights must be True or False"),
    (dict(norm="batch"), ValueError, "norm must be one of .*'rms' .*'layer'"),
    (dict(activation="swish"), ValueError, "activation must be one of"),
    (dict(residual_init="GPT2"), ValueError, "residual_init must be None"),
]


@pytest.mark.parametrize(
    "fields, error, message",
    CONFIG_ERRORS,
    ids=[next(iter(f)) for f, _, _ in CONFIG_ERRORS],
)
def test_a_config_says_what_is_wrong(fields, error, message):
    with pytest.raises(error, match=message):
        GPTConfig(**{"vocab_size": VOCAB, "context_length": 8, **fields})


def test_a_config_is_checked_once_and_copied_with_replace():
    config = GPTConfig(vocab_size=VOCAB, context_length=8)
    assert (
        config.d_model == 64
        and config.positions == "learned"
        and config.norm == "rms"
    )
    with pytest.raises(TypeError):
        GPTConfig(VOCAB, 8)  # keywords only: a config reads as what it sets
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 32
    grouped = config.replace(num_kv_heads=2)
    assert grouped.num_kv_heads == 2 and config.num_kv_heads is None
    with pytest.raises(ValueError, match="num_kv_heads=3"):
        config.replace(num_kv_heads=3)  # a copy is checked too
    model = GPT(grouped)
    assert (
        model.config is grouped and model.blocks[0].self_attn.num_kv_heads == 2
    )
    assert (
        model.blocks[0].ffn.linear1.out_features == 4 * 64
    )  # ffn_width None: 4 * d_model
    with pytest.raises(
        TypeError, match=r"GPT takes one GPTConfig, got int.*GPT\(GPTConfig\("
    ):
        GPT(VOCAB)


# --------------------------------------------------------------------------- source 002's mistakes


def test_attention_is_sized_by_the_model_width():
    # Source 002 sizes attention by the vocabulary (input_dim=n_dims) while the tokens arrive
    # as embeddings of width n_embd: its first forward pass fails with a shape error.
    model = _gpt(65, 16, d_model=32, num_heads=4)
    assert model.blocks[0].self_attn.qkv_proj.in_features == 32
    assert model(torch.zeros(2, 8, dtype=torch.long)).shape == (2, 8, 65)
    sized_by_vocabulary = nn.Linear(65, 65, bias=False)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        sized_by_vocabulary(
            model.token_embedding(torch.zeros(8, dtype=torch.long))
        )


def test_every_sublayer_has_its_own_norm():
    # Source 002 calls one self.rms_norm after both sublayers: one gain for two sums.
    model = _model()
    norms = [
        module
        for module in model.modules()
        if module.__class__.__name__ == "RMSNorm"
    ]
    assert len({id(norm) for norm in norms}) == 2 * len(model.blocks) + 1
    for block in model.blocks:
        assert block.norm1.weight is not block.norm2.weight


def test_encoder_outputs_one_vector_per_position():
    # Source 002: "the encoder ... generates a fixed sized vector". It outputs (B, T, D).
    from helpers.transformer import TransformerConfig, TransformerEncoder

    config = TransformerConfig(
        d_model=16, num_heads=4, num_layers=2, ffn_width=32
    )
    encoder = TransformerEncoder(config).eval()
    for length in (3, 9):
        assert encoder(torch.randn(2, length, 16)).shape == (2, length, 16)


def test_sinusoidal_table_is_not_trained():
    # Source 002 keeps its table as a plain array field, which Equinox's filter hands to the
    # optimizer with the weights; in PyTorch terms, an nn.Parameter. Ours is a buffer.
    torch.manual_seed(0)
    model = _gpt(VOCAB, 16, d_model=16, num_heads=4, positions="sinusoidal")
    table = model.position_embedding.pe.clone()
    assert all(p is not model.position_embedding.pe for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    tokens = _tokens(length=10)
    token_cross_entropy(model(tokens[:, :-1]), tokens[:, 1:]).backward()
    optimizer.step()
    assert torch.equal(model.position_embedding.pe, table)
    as_parameter = nn.Parameter(
        table.clone()
    )  # the mistake: the optimizer moves it
    mistaken = torch.optim.AdamW([as_parameter], lr=0.1)
    (model.token_embedding(tokens) + as_parameter[:10]).pow(2).mean().backward()
    mistaken.step()
    assert not torch.equal(as_parameter, table)


@pytest.mark.parametrize("positions", POSITIONS)
def test_any_length_up_to_the_context_works(positions):
    # Source 002 adds a table of max_token_size=8 rows whole: only length 8 broadcasts.
    model = _model(positions)
    for length in (1, 5, 8, 24):
        assert model(_tokens(length=length)).shape == (3, length, VOCAB)
    table = torch.randn(8, 16)
    with pytest.raises(RuntimeError, match="must match"):
        model.token_embedding(_tokens(length=5)) + table


def test_sinusoidal_positions_work_with_an_odd_vocabulary():
    # Source 002 pads the vocabulary partly to make it even "for the sine/cosine table", whose
    # width is the model width, not the vocabulary.
    model = _gpt(7, 16, d_model=16, num_heads=4, positions="sinusoidal")
    assert model.position_embedding.pe.shape == (16, 16)
    assert model(torch.zeros(1, 9, dtype=torch.long)).shape == (1, 9, 7)


# --------------------------------------------------------------------------- the exercise checker


def _sampling_solution(logits, temperature, top_k):
    return top_k_filter(logits / temperature, top_k).softmax(dim=-1)


def _no_top_k(logits, temperature, top_k):
    return (logits / temperature).softmax(dim=-1)


def _cut_without_renormalizing(logits, temperature, top_k):
    probabilities = (logits / temperature).softmax(dim=-1)
    return top_k_filter(probabilities, top_k).clamp(
        min=0.0
    )  # the cut ones at 0, not -inf


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            lambda logits, t, k: logits.softmax(-1),
            "softmax\\(logits / temperature\\)",
        ),
        (lambda logits, t, k: (logits * t).softmax(-1), "not multiply"),
        (lambda logits, t, k: logits.softmax(-1) / t, "sum to 1"),
        (_no_top_k, "keep exactly the 3 largest"),
        (_cut_without_renormalizing, "sum to 1"),
        (lambda logits, t, k: logits[0], "shape"),
    ],
)
def test_check_sampling_distribution(wrong, hint):
    from helpers.checks import check_sampling_distribution

    assert check_sampling_distribution(_sampling_solution).startswith(
        "Correct:"
    )
    with pytest.raises(AssertionError, match=hint):
        check_sampling_distribution(wrong)


def test_the_host_read_counter_sees_a_read():
    with host_reads() as reads:
        int(torch.tensor([3, 1]).max())
        torch.ones(3).sum()  # stays on the device
    assert reads.count == 1


def test_a_gpt_forward_reads_one_value_back_whatever_its_depth():
    """The token check compares every id with the vocabulary in one read (it read the
    minimum and the maximum, 2, before); the layers read nothing."""
    torch.manual_seed(0)
    tokens = torch.randint(VOCAB, (2, 10))
    for layers in (1, 4):
        model = GPT(
            GPTConfig(vocab_size=VOCAB, context_length=16, num_layers=layers)
        )
        with host_reads() as reads:
            model(tokens)
        assert reads.count == 1, (layers, reads.count)
        with host_reads() as reads:
            model(tokens, validate=False)
        assert reads.count == 0
    with pytest.raises(
        ValueError, match=rf"0 \.\. {VOCAB - 1}, got values from 0 to {VOCAB}"
    ):
        model(torch.tensor([[0, VOCAB]]))


def test_torch_export_takes_the_gpt_as_built():
    """No validate=False: under tracing the token check reads no value."""
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=VOCAB, context_length=16, num_layers=2)
    ).eval()
    tokens = torch.randint(VOCAB, (2, 10))
    program = torch.export.export(model, (tokens,))
    other = torch.randint(
        VOCAB, (2, 10), generator=torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(program.module()(other), model(other))
    # eagerly, a bad id is still refused
    with pytest.raises(ValueError, match="tokens must lie in"):
        model(torch.full((1, 3), VOCAB))
