# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -execution,-ExecuteTime
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # What generation costs
#
# {doc}`Chapter 10 <10_decoder_only_lm>` trained a decoder-only model and sampled from it
# with `generate`, which keeps a cache that chapter 10 left unexplained. Without one, each
# new token runs the model again over the whole sequence so far. This chapter asks what a
# generated token costs and makes it cheaper: a *key/value cache* keeps what earlier steps
# computed. We build one from scratch, count what one step does, find what bounds it, time
# it on a CPU and (from measurements shipped with the book) on an H100 GPU, and weigh the
# memory the cache takes. Then the same class, configured as GPT-2 small
# {cite}`radford2019language`, takes a GPT-2 checkpoint's weights and computes what GPT-2
# computes.
#
# After this chapter you will be able to:
#
# - write a key/value cache, generate in its two phases (prefill, then decode), and check
#   that it changes nothing but the cost;
# - say what a decoding step costs and what bounds it: operators and elements written,
#   reading the weights (and why a batch helps), time on a CPU and on a GPU, and the
#   cache's memory from a formula;
# - configure the book's GPT as GPT-2 small, count its parameters and load a GPT-2
#   checkpoint, checked against a reference implementation.
#
# ```{figure} ../book/_static/diagrams/map_11.svg
# :alt: The book's map of the Transformer: the decoder stack without its cross-attention, its embeddings and its output layer are highlighted; the encoder is greyed out.
# :width: 60%
# :name: fig-map-11
#
# Where this chapter sits in the Transformer: chapter 10's decoder-only model, now
# generating one token at a time.
# ```

# %% tags=["hide-cell"]
# Setup: on Colab, install the book's helpers; everywhere, style the plots and seed.
import sys

# The book's package at the book's version (a release tag, kept in step by a test).
HELPERS = "attention-book-helpers @ git+https://github.com/attention-book/attention-book@v0.8.1"
if "google.colab" in sys.modules:
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", HELPERS], check=True
    )
try:
    import helpers
except ModuleNotFoundError:  # outside Colab the package must be installed first
    raise ModuleNotFoundError(
        f"this notebook needs the book's helpers package; run: pip install '{HELPERS}' "
        "(or `make lab` in a clone of the book). `pip install helpers` is an unrelated package."
    ) from None
from helpers.plotting import use_book_style

use_book_style()
helpers.seed_everything(0)

# %%
import math
import pathlib
import textwrap
import warnings

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn

import helpers

device = helpers.get_device()  # a GPU if there is one, else the CPU

# %%
from helpers import expect_error, glue, show_source
from helpers.analysis import DispatchCounter, count_parameters
from helpers.efficient import kv_cache_bytes, median_seconds
from helpers.gpt import (
    GPT,
    CausalSelfAttention,
    GPTConfig,
    score_bias,
)
from helpers.interop import load_gpt2
from helpers.kv_cache import KVCache
from helpers.tasks.brackets import (
    BracketConfig,
    make_rows,
    make_strings,
    per_token_loss,
    train_brackets,
)

helpers.use_one_thread(device)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# %% [markdown]
# ## Two models
#
# We need two models. The first has learned something, so that greedy decoding makes clear
# choices: chapter 10's model on chapter 10's brackets, trained here for
# {glue:text}`gen_lm_epochs` epoch on {glue:text}`gen_lm_strings` strings, a fraction of
# chapter 10's training (what a step costs does not depend on how well the model learned).

# %% tags=["nbval-ignore-output"]
train_strings = make_strings(3_000, seeded(1))  # chapter 10's language
val_strings = make_strings(1_000, seeded(2))
CONTEXT = BracketConfig().model.context_length
train_rows = make_rows(train_strings, CONTEXT)
val_rows = make_rows(val_strings, CONTEXT)
lm, _ = train_brackets(BracketConfig(epochs=1), train_rows, val_rows)
val_loss = per_token_loss(lm, val_rows)
print(
    f"validation loss {val_loss:.2f} nats per character "
    f"(a uniform guess: {math.log(7):.2f})"
)

# %% tags=["remove-cell", "nbval-ignore-output"]
# measured 1.460-1.476 (seeds 0-2) on a 2-core CPU; chapter 10's eight epochs reach 1.11;
# the greedy tokens with and without the cache agreed on each of the three seeds
assert val_loss < 1.6
glue("gen_lm_epochs", BracketConfig(epochs=1).epochs)
glue("gen_lm_strings", f"{len(train_strings):,}")
# a fraction of chapter 10's training: fewer epochs on fewer strings
assert BracketConfig(epochs=1).epochs < BracketConfig().epochs

# %% [markdown]
# ### GPT-2 small
#
# The second model is the size of a real released one: chapter 10's class configured
# as GPT-2 small, which must then have GPT-2's parameter count. GPT-2 has LayerNorm,
# biases and GELU's tanh approximation (`norm="layer", bias=True, activation="gelu_tanh"`,
# and its initialization, `residual_init="gpt2"`, in the fold below), 50,257 tokens, 1,024
# positions, width 768 and 12 layers of 12 heads. On the `meta` device a model has shapes
# but no memory:

# %%
GPT2_LIKE = dict(
    bias=True, norm="layer", activation="gelu_tanh", residual_init="gpt2"
)
GPT2_SMALL = GPTConfig(
    vocab_size=50_257,
    context_length=1024,
    d_model=768,
    num_layers=12,
    num_heads=12,
    **GPT2_LIKE,
)
with torch.device("meta"):
    gpt2 = GPT(GPT2_SMALL)
gpt2_count = count_parameters(gpt2)
token_table = gpt2.token_embedding.weight.numel()
position_table = gpt2.position_embedding.weight.numel()
per_block = count_parameters(gpt2.blocks[0])
print(
    f"total {gpt2_count:,}\n = tokens {token_table:,}"
    f" + positions {position_table:,}\n + 12 x {per_block:,}"
    f" + final norm {count_parameters(gpt2.final_norm):,}"
)

# %% tags=["remove-cell"]
assert gpt2.head.weight is gpt2.token_embedding.weight
assert gpt2_count == 124_439_808
glue("gen_gpt2_count", f"{gpt2_count:,}")
glue("gen_gpt2_untied", f"{(gpt2_count + token_table) / 1e6:.1f}")
# a decode step's multiply-adds, attention's aside: one per weight of a matrix product
matmul_weights = sum(
    m.weight.numel() for m in gpt2.modules() if isinstance(m, nn.Linear)
)
glue("gen_gpt2_gmacs", round(matmul_weights / 1e9, 2))

# %% [markdown]
# {glue:text}`gen_gpt2_count` parameters: the "124M" by which
# [GPT-2's released code](https://github.com/openai/gpt-2) names its smallest model (the
# paper {cite}`radford2019language` reports it as 117M). The token table is counted once;
# untied, the count would be {glue:text}`gen_gpt2_untied` million.
#
# :::{admonition} Going deeper: GPT-2's activation and initialization
# :class: dropdown
# GPT-2's feed-forward network applies GELU in its tanh approximation,
# $\tfrac12 x (1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715 x^3)))$ (`activation="gelu_tanh"`).
# [Google's BERT code](https://github.com/google-research/bert/blob/master/modeling.py)
# computes the same approximation; the exact GELU, `"gelu"` (PyTorch's `nn.GELU()`), is
# what Hugging Face's port of BERT uses by default. The 2017 Transformer
# and chapter 10's model use ReLU, the default.
#
# GPT-2 also starts its training differently. It scales the weights of the layers that write
# into the residual stream by $1/\sqrt{N}$ for $N$ residual layers
# {cite}`radford2019language`: nanoGPT draws the attention's and the feed-forward network's
# output projections with standard deviation $0.02/\sqrt{2L}$,
# {glue:text}`gen_gpt2_residual_std` for $L = 12$. The stream is a sum of $2L$ such
# writes, and independent terms add their variances, so the scaling keeps its size at
# initialization the same however deep the model is. `residual_init="gpt2"` does that; the
# default draws them at 0.02, like every other weight. GPT-2's released code draws the
# position table with standard deviation 0.01, where ours uses 0.02 (a difference at
# initialization only; loaded weights replace both). The folded cell checks the activations
# and the initializations on the classes themselves.
# :::

# %% tags=["hide-cell"]
torch.manual_seed(0)
# 12 blocks of width 64, our defaults
deep = GPTConfig(vocab_size=7, context_length=1024, num_layers=12)
deep_default = GPT(deep)
deep_gpt2 = GPT(deep.replace(**GPT2_LIKE))  # and GPT-2's options


def residual_std(model):
    return (
        torch.stack([b.self_attn.out_proj.weight for b in model.blocks])
        .std()
        .item()
    )


gpt2_residual_std = 0.02 / math.sqrt(2 * 12)
glue("gen_gpt2_residual_std", round(gpt2_residual_std, 4))
position_std = deep_gpt2.position_embedding.weight.std().item()
print(
    "default activation ReLU, GPT-2's the tanh GELU:",
    isinstance(deep_default.blocks[0].ffn.activation, nn.ReLU),
    deep_gpt2.blocks[0].ffn.activation.approximate == "tanh",
)
print(
    "residual projections at std 0.02 by default:",
    abs(residual_std(deep_default) - 0.02) < 0.001,
)
print(
    "at std 0.02 / sqrt(2L) with residual_init='gpt2':",
    abs(residual_std(deep_gpt2) - gpt2_residual_std) < 0.0005,
)
print(
    "position table at std 0.02, not GPT-2's 0.01:",
    abs(position_std - 0.02) < 0.001,
)
assert isinstance(deep_default.blocks[0].ffn.activation, nn.ReLU)
assert isinstance(gpt2.blocks[0].ffn.activation, nn.GELU)
assert deep_gpt2.blocks[0].ffn.activation.approximate == "tanh"
assert abs(residual_std(deep_default) - 0.02) < 0.001
assert abs(residual_std(deep_gpt2) - gpt2_residual_std) < 0.0005
assert abs(position_std - 0.02) < 0.001 and abs(position_std - 0.01) > 0.005

# %% [markdown]
# ## Generation with a key/value cache
#
# Generating $N$ tokens naively runs the model on sequences of length $1, 2, \ldots, N$,
# and each run recomputes the keys and values of every earlier position, which have not
# changed (the causal mask guarantees it). A *key/value cache* keeps them: each step
# computes the new token's query, key and value only, appends the key and value to the
# cache, and attends over it.

# %% [markdown]
# ```{figure} ../book/_static/diagrams/kv_cache.svg
# :alt: Top, a five by five grid of query rows and key columns for training; the cells on and below the diagonal are orange (allowed) and those above are grey (masked), and the last row is outlined in blue. Bottom, generation with a cache: a blue query q4 next to a row of orange keys k0 to k4 and green values v0 to v4, where k4 and v4 are dashed and labelled new, and k0 to k3, v0 to v3 are labelled as reused from the cache.
# :name: fig-kv-cache
#
# Causal attention in training and in generation. In training (top), row $t$ lets query $t$
# see keys $0..t$, and one pass trains all rows. Look at the outlined last row: a generation
# step needs only that one; with a cache (bottom), it computes q4, k4 and v4 and reuses the
# earlier keys and values.
# ```
#
# ### A cache from scratch
#
# For one attention head, a step projects the new token to a query, a key and a value,
# appends the key and value to those of the earlier positions, and lets its one query
# attend over all of them. It needs no mask: every key held is the query's own or an
# earlier one.


# %%
class SimpleCache:
    """The keys and values of every position so far, (B, T_held, d) each."""

    def __init__(self):
        self.keys = self.values = None

    def append(self, k, v):  # the new positions' keys and values, (B, T_new, d)
        if self.keys is None:
            self.keys, self.values = k, v
        else:  # copies everything held (KVCache, below, does not)
            self.keys = torch.cat([self.keys, k], dim=1)
            self.values = torch.cat([self.values, v], dim=1)
        return self.keys, self.values


def attend_one(x_new, w_q, w_k, w_v, cache):
    """One decoding step of one head: x_new (B, 1, D) -> (B, 1, d)."""
    q, k, v = x_new @ w_q, x_new @ w_k, x_new @ w_v  # (B, 1, d) each
    keys, values = cache.append(k, v)  # (B, t, d): positions 0 .. t - 1
    scores = q @ keys.transpose(1, 2) / math.sqrt(q.shape[-1])  # (B, 1, t)
    return scores.softmax(dim=-1) @ values  # one row of attention


# %% [markdown]
# Six tokens, one step each:

# %%
torch.manual_seed(0)
x = torch.randn(2, 6, 16)  # 2 sequences of 6 tokens of width 16
w_q, w_k, w_v = (torch.randn(16, 8) / 4 for _ in range(3))  # a head of width 8
cache = SimpleCache()
outputs = [attend_one(x[:, t : t + 1], w_q, w_k, w_v, cache) for t in range(6)]
print("the cache holds keys of shape", tuple(cache.keys.shape))

# %% tags=["hide-input"]
from helpers.attention import scaled_dot_product_attention
from helpers.masks import causal_mask

# the same head over all 6 tokens at once, as in training: a causal mask
full_pass, _ = scaled_dot_product_attention(
    x @ w_q, x @ w_k, x @ w_v, mask=causal_mask(6)
)
same_rows = torch.allclose(torch.cat(outputs, dim=1), full_pass, atol=1e-6)
print(
    "step by step with the cache = causal attention over all 6 tokens"
    " (within 1e-6):",
    same_rows,
)

# %% tags=["remove-cell"]
# the check can fail: steps that each forget the cache attend to their own key only
forgetful = [
    attend_one(x[:, t : t + 1], w_q, w_k, w_v, SimpleCache()) for t in range(6)
]
assert same_rows
assert not torch.allclose(torch.cat(forgetful, dim=1), full_pass, atol=1e-6)

# %% [markdown]
# Generation then runs in two phases. *Prefill* passes the whole prompt through the model
# at once, as in training (causal mask included), and leaves each layer's cache holding the
# prompt's keys and values. *Decode* then runs one step per new token, as above: one query,
# and one new key and value per layer.
#
# The book's `KVCache` is this cache for every head of a layer, with one change that
# matters here: it does not copy what it holds at every step. Its `append` writes the new
# positions into preallocated buffers (allocated once when it is told the final length, as
# `generate` tells it; otherwise grown by doubling) and returns every key and value held,
# which the layer's attention then reads:

# %%
show_source(KVCache.append)

# %% [markdown]
# `GPT.new_caches` makes one cache per layer; called with them, the model runs new tokens after
# the cached ones. The layer that calls `append` is `CausalSelfAttention` (below,
# folded, with chapter 13's options: grouped-query heads {cite}`ainslie2023gqa`, multi-query
# {cite}`shazeer2019mqa`, a sliding window {cite}`beltagy2020longformer`, RoPE or ALiBi),
# with the function that builds its mask, and `GPT.generate` runs the loop:

# %% tags=["hide-output"]
show_source(CausalSelfAttention)

# %% tags=["hide-output"]
show_source(score_bias)

# %% tags=["hide-output"]
show_source(GPT.generate)

# %% [markdown]
# The cache must change nothing but the cost:

# %%
prompts = val_rows.tensors[0][:64, :8]  # 8 characters of 64 validation rows
with_cache = lm.generate(prompts, 40, greedy=True)
without_cache = lm.generate(prompts, 40, greedy=True, use_cache=False)
same_tokens = torch.equal(with_cache, without_cache)
print("same tokens with and without the cache:", same_tokens)
caches = lm.new_caches(len(prompts))
with torch.no_grad():
    steps = [lm(with_cache[:, :8], caches)]  # prefill: the 8 prompt tokens
    for t in range(8, 48):  # decode: one token per step
        steps.append(lm(with_cache[:, t : t + 1], caches))
    full = lm(with_cache)
close = torch.allclose(torch.cat(steps, dim=1), full, atol=1e-4)
print("cached logits equal full-pass logits (within 1e-4):", close)

# %% tags=["remove-cell"]
assert same_tokens and close

# %% [markdown]
# ### What it saves
#
# Without a cache, step $t$ runs the per-token layers on $t$ tokens ($O(t)$) and attention
# on $t \times t$ scores ($O(t^2)$); with one, the layers run on one token and attention
# on one row ($O(t)$). We time $N$ tokens from an untrained model of chapter 10's size
# with a longer context (the weights do not change the cost):

# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
timing_model = GPT(GPTConfig(vocab_size=64, context_length=1024)).eval()
prompt = torch.zeros(1, 1, dtype=torch.long)
for use_cache in (True, False):  # a warm-up run of each
    timing_model.generate(prompt, 8, use_cache=use_cache)
timings = []
for length in (32, 64, 128, 256, 512):
    row = {"tokens": length}
    for use_cache in (True, False):  # one timed run each
        seconds = median_seconds(
            timing_model.generate,
            prompt,
            length,
            greedy=True,
            use_cache=use_cache,
            repeats=1,
            warmup_calls=0,
        )
        row["cache" if use_cache else "no cache"] = seconds
    timings.append(row)
timings = pd.DataFrame(timings)
timings["speed-up"] = timings["no cache"] / timings["cache"]
timings.round(3)

# %% tags=["remove-cell", "nbval-ignore-output"]
speedup = timings["speed-up"].iloc[-1]
glue("gen_cache_speedup", round(speedup, 1))
glue("gen_cache_longest", int(timings["tokens"].iloc[-1]))
glue("gen_cache_shortest", int(timings["tokens"].iloc[0]))
glue("gen_cache_speedup_short", round(timings["speed-up"].iloc[0], 1))
# measured 10-17x on a loaded 2-core CPU, one thread, default and scalar numerics (the
# per-step figures: scripts/bench_decode.py); a timing, on a machine that may be busy: a margin
assert speedup > 4
# the gain grows with N (measured 1.5-1.8x at 32 tokens); per token, the cached run changes
# little (measured 0.58-1.7x from 32 to 512, the last at load 7) and recomputation grows far
# faster (measured 6-8.5x)
assert timings["speed-up"].iloc[0] < speedup
per_token = timings[["cache", "no cache"]].div(timings["tokens"], axis=0)
growth = per_token.iloc[-1] / per_token.iloc[0]
assert 0.3 < growth["cache"] < 2.5 and growth["no cache"] > 2 * growth["cache"]

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
for column in ("no cache", "cache"):
    per_token_ms = timings[column] / timings["tokens"] * 1e3
    ax.plot(timings["tokens"], per_token_ms, "o-", label=column)
ax.set(
    xscale="log",
    yscale="log",
    xlabel="tokens generated N",
    ylabel="milliseconds per token",
)
ax.xaxis.set_minor_locator(plt.NullLocator())  # only the lengths measured
ax.set_xticks(timings["tokens"], timings["tokens"])
ax.yaxis.set_major_locator(plt.LogLocator(subs=(1, 2, 5)))
ax.yaxis.set_major_formatter(plt.FormatStrFormatter("%g"))
ax.yaxis.set_minor_formatter(plt.NullFormatter())
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Time per generated token against the number generated, on log scales. With
# the cache (orange) it changes little: each step's one row of attention reads one more key,
# a small cost next to what every step pays anyway. Without it (blue) it grows far faster. At
# {glue:text}`gen_cache_longest` tokens the cache makes generation
# {glue:text}`gen_cache_speedup` times faster on this CPU (one thread; timings vary, the
# direction does not). At {glue:text}`gen_cache_shortest` tokens it gains only
# {glue:text}`gen_cache_speedup_short` times: a step of a model this small costs mostly the
# fixed overhead of dispatching its operations.
#
# ### What a step costs the host
#
# That overhead is what is left when the arithmetic is cheap. `DispatchCounter` counts the
# operators PyTorch dispatches, the elements they write ("written" below) and the values
# read back into Python (on a GPU, each makes the host wait), here for one step of
# `generate` at three contexts:


# %% tags=["hide-input"]
def per_step(model, context, use_cache=True, steps=8):
    """Operators, value reads and elements written by one step of generate."""
    prompt = torch.randint(
        model.vocab_size, (1, context), generator=seeded(context)
    )
    counts = []
    for new in (1, 1 + steps):
        with DispatchCounter() as counter:
            model.generate(prompt, new, greedy=True, use_cache=use_cache)
        counts.append(counter)
    short, long = counts
    return {
        "operators": (long.ops - short.ops) // steps,
        "not views": (long.non_view_ops - short.non_view_ops) // steps,
        "value reads": (long.syncs - short.syncs) // steps,
        "elements written": (long.elements_written - short.elements_written)
        // steps,
    }


rows = [
    {
        "mode": mode,
        "context": context,
        **per_step(timing_model, context, mode == "cache"),
    }
    for mode in ("cache", "no cache")
    for context in (64, 256, 1000)
]
step_costs = pd.DataFrame(rows).set_index(["mode", "context"])
shown = {"operators": "operators", "elements written": "written"}
step_costs[list(shown)].rename(columns=shown).map("{:,}".format)

# %% tags=["remove-cell"]
cached = step_costs.loc["cache"]
# the same work at every cache length: operators, and elements written (so no copy of
# the cache, no mask over its keys); and no value read back into Python
assert (cached == cached.iloc[0]).all().all() and cached["value reads"].eq(
    0
).all()
recomputed = step_costs.loc["no cache"]
# as many operators, on more positions:
assert recomputed["operators"].nunique() == 1
assert recomputed["elements written"].is_monotonic_increasing
glue("gen_step_ops", int(cached["operators"].iloc[0]))
glue("gen_step_launches", int(cached["not views"].iloc[0]))
glue("gen_step_elements", f"{int(cached['elements written'].iloc[0]):,}")
glue("gen_recompute_ops", int(recomputed["operators"].iloc[0]))
glue(
    "gen_recompute_elements",
    f"{int(recomputed['elements written'].iloc[-1]):,}",
)
glue("gen_step_longest", f"{cached.index[-1]:,}")

# %% [markdown]
# With the cache, a step dispatches {glue:text}`gen_step_ops` operators
# ({glue:text}`gen_step_launches` of them not views, each a kernel) and writes
# {glue:text}`gen_step_elements` elements at every context, and never reads a value back.
# Without it, a step dispatches {glue:text}`gen_recompute_ops` operators, and at
# {glue:text}`gen_step_longest` tokens writes {glue:text}`gen_recompute_elements`
# elements. What grows with the context in a cached step is attention's reading of the
# cache, one row of $t$ keys per head; its operators and its writes stay the same.
#
# :::{admonition} Going deeper: why a cached step writes as much at every context
# :class: dropdown
# Three choices make it so, and each is easy to get wrong:
#
# - the cache is *preallocated*: `KVCache` allocates room for the prompt plus every new
#   token on first use, and each step writes one position into it. A cache that grows by
#   concatenation, `torch.cat([cached, new])`, copies everything it holds at every step, so
#   the elements written grow with the context;
# - a step's single query may read every cached key, so it builds no mask at all; a causal
#   mask rebuilt at every step writes one entry per cached key;
# - the loop reads no value back: the prompt's tokens are checked once before it (the
#   generated ones are in the vocabulary by construction), and with an `end_id` the test
#   "has every sequence ended?" runs every step on the CPU, where it costs nothing, but only
#   every `GPT.END_CHECK_EVERY` steps on a GPU (the output is the same: the extra steps
#   write padding).
# :::
#
# ### What bounds a step: reading the weights
#
# What bounds the step of a bigger model? For its one token, each weight of GPT-2 small is
# read from memory and used in one multiply-add: a step reads
# {glue:text}`gen_gpt2_weights_mb` MB of float32 weights to do about
# {glue:text}`gen_gpt2_gmacs` billion multiply-adds, one per weight read. Decoding $B$
# sequences at once reads each weight once for $B$ tokens and does $B$ times the
# multiply-adds. If reading the weights bounds a step, a step of $B$ sequences costs
# little more than a step of one, and the time per token falls like $1/B$. We time one
# decode step of GPT-2 small's shape (random weights: they do not change the cost) on one
# CPU thread, after a prefill of one token per sequence:


# %%
def decode_step_ms(model, batch, repeats=3):
    """Median milliseconds of one cached decode step for `batch` sequences."""
    caches = model.new_caches(batch, capacity=2 + repeats)
    token = torch.zeros(batch, 1, dtype=torch.long)
    with torch.no_grad():
        model(token, caches)  # prefill: a one-token prompt
        # one untimed step, then `repeats` timed ones
        seconds = median_seconds(model, token, caches, repeats=repeats)
    return seconds * 1e3


# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
gpt2_cpu = GPT(GPT2_SMALL).eval()  # as `gpt2` above, now with memory
batches = [1, 2, 4, 8, 16, 32]
step_ms = pd.Series([decode_step_ms(gpt2_cpu, b) for b in batches], batches)
per_token_ms = step_ms / step_ms.index


# %% tags=["remove-cell", "nbval-ignore-output"]
def sum_every_weight(model):  # the least a pass over the weights can cost
    with torch.no_grad():
        return [weight.sum() for weight in model.parameters()]


read_ms = 1e3 * median_seconds(sum_every_weight, gpt2_cpu, repeats=3)
del gpt2_cpu  # 498 MB
gain = per_token_ms[1] / per_token_ms[32]
# measured on a 2-core CPU, one thread, at load averages 1-7: per token at batch 32 /
# batch 1 = 0.09-0.10 (default numerics, 4 runs) and 0.16-0.23 (scalar, 4 runs). A batch
# timed as a Python loop of batch-1 steps gives 1.05 (both), and fails this:
assert per_token_ms[32] < 0.5 * per_token_ms[1]
# a batch-1 step costs about one read of the weights: 0.9-1.1 times the sum's time
# (default), 0.7-1.0 (scalar); a batch-32 step, 3.2-3.3 and 4.8-5.2 times, fails this:
assert step_ms[1] < 2 * read_ms
glue("gen_batch1_ms", round(step_ms[1]))
glue("gen_weights_sum_ms", round(read_ms))
glue("gen_batch32_token_ms", round(per_token_ms[32], 1))
glue("gen_batch_gain", round(gain))
glue("gen_batch32_step_ratio", round(step_ms[32] / step_ms[1], 1))

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
ax.plot(batches, per_token_ms, "o-", color="C1", label="measured")
ax.plot(
    batches,
    step_ms[1] / step_ms.index,
    "--",
    color="grey",
    label="a step as cheap as batch 1's",
)
ax.set(
    xscale="log",
    yscale="log",
    xlabel="batch size B",
    ylabel="milliseconds per token",
)
ax.xaxis.set_minor_locator(plt.NullLocator())
ax.set_xticks(batches, batches)
ax.yaxis.set_major_locator(plt.LogLocator(subs=(1, 2, 5)))
ax.yaxis.set_major_formatter(plt.FormatStrFormatter("%g"))
ax.yaxis.set_minor_formatter(plt.NullFormatter())
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Time per token of one decode step against the batch size, for GPT-2 small's
# shape on one CPU thread, on log scales; dashed, a step that would cost no more than at
# batch 1. At batch 1 a step takes {glue:text}`gen_batch1_ms` ms, about as long as
# summing every weight once ({glue:text}`gen_weights_sum_ms` ms), the least a pass over
# them costs. A step of 32 sequences takes {glue:text}`gen_batch32_step_ratio` times as
# long for 32 times the tokens and the multiply-adds, so a token costs
# {glue:text}`gen_batch32_token_ms` ms, {glue:text}`gen_batch_gain` times less than alone:
# at batch 1, reading the weights, not the arithmetic, bounds the step. The step does grow
# with the batch (more arithmetic, and matrix-product kernels that suit some shapes better
# than others), but far more slowly than the tokens it produces. This is why servers
# decode many requests in one batch.
#
# ### On a GPU
#
# Whether arithmetic or dispatch sets the speed depends on the machine. The same step, timed
# on one CPU thread and on an NVIDIA H100 GPU, for the timing model (chapter 10's size) and
# for GPT-2 small's shape (measured by a longer run of the same code, shipped with the book):


# %% tags=["hide-input"]
def shipped_benchmark(name: str) -> pd.DataFrame | None:
    """A file of the book's `book/` folder, or None outside a clone."""
    checkout = pathlib.Path(helpers.__file__).resolve().parents[1]
    for folder in (checkout, pathlib.Path.cwd(), pathlib.Path.cwd().parent):
        if (folder / "book" / name).is_file():
            return pd.read_csv(folder / "book" / name)
    print(
        f"book/{name} ships with the book's repository: clone it to draw this"
    )
    return None


cpu_bench = shipped_benchmark("bench_decode.csv")
gpu_bench = shipped_benchmark("bench_decode_gpu.csv")
if cpu_bench is not None and gpu_bench is not None:
    bench = pd.concat([cpu_bench, gpu_bench])
    bench["ms"] = bench["seconds_per_step"] * 1e3
    per_step_ms = bench.pivot_table(
        index=["model", "context"], columns=["device", "mode"], values="ms"
    )
    fig, axes = plt.subplots(1, 2, figsize=(6, 3))
    titles = {
        "chapter": "the timing model",
        "gpt2-small": "GPT-2 small's shape",
    }
    styles = {
        ("cpu", "cache"): ("C1", "o-"),
        ("cpu", "no cache"): ("C0", "o-"),
        ("cuda", "cache"): ("C1", "s--"),
        ("cuda", "no cache"): ("C0", "s--"),
    }
    for ax, (model_name, title) in zip(axes, titles.items(), strict=True):
        for (dev, mode), (color, style) in styles.items():
            line = per_step_ms.loc[model_name, (dev, mode)].dropna()
            label = f"{'H100' if dev == 'cuda' else 'CPU'}, {mode}"
            ax.plot(line.index, line, style, color=color, label=label)
        ax.set(xscale="log", yscale="log", title=title, xlabel="context")
        ax.set_xticks([64, 256, 1024, 2048], ["64", "256", "1k", "2k"])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.yaxis.set_major_formatter(plt.FormatStrFormatter("%g"))
    axes[0].set_ylabel("milliseconds per step")
    # one legend for both panels, below them: readable on a phone
    fig.legend(
        *axes[0].get_legend_handles_labels(),
        ncol=2,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.04),
    )
    plt.show()

# %% tags=["remove-cell"]
if cpu_bench is not None and gpu_bench is not None:
    ms = per_step_ms
    small_cpu = ms.loc["chapter", ("cpu", "cache")].dropna()
    small_gpu = ms.loc["chapter", ("cuda", "cache")]
    small_saving = ms.loc["chapter", ("cuda", "no cache")] / small_gpu
    big_gpu = ms.loc["gpt2-small", ("cuda", "cache")]
    big_recompute = ms.loc["gpt2-small", ("cuda", "no cache")]
    big_cpu = ms.loc["gpt2-small", ("cpu", "cache")].dropna()
    gpu_rows = gpu_bench.set_index(["model", "mode", "context"])
    small_ops = gpu_rows.loc[("chapter", "cache", 64), "ops_per_step"]
    big_ops = gpu_rows.loc[("gpt2-small", "cache", 64), "ops_per_step"]
    # the operators that are not views: each launches a kernel
    small_kernels = gpu_rows.loc[
        ("chapter", "cache", 64), "non_view_ops_per_step"
    ]
    big_kernels = gpu_rows.loc[
        ("gpt2-small", "cache", 64), "non_view_ops_per_step"
    ]
    # GPT-2 small's float32 weights, read once per token, at the H100's ~3 TB/s
    H100_BYTES_PER_SECOND = 3e12
    weights_ms = gpt2_count * 4 / H100_BYTES_PER_SECOND * 1e3
    # the chapter's model: the H100 within 3 times one CPU thread, either way, at every
    # context (shipped: 1.5-2.0 times slower; on a quiet 2-core Xeon, 0.6-1.7)
    gpu_over_cpu = small_gpu.loc[small_cpu.index] / small_cpu
    assert gpu_over_cpu.max() < 3 and gpu_over_cpu.min() > 1 / 3
    assert small_gpu.min() > 0.8 and small_gpu.max() < 1.1
    assert small_saving.min() > 1.2 and small_saving.max() < 1.6
    # GPT-2 small: the cached step is flat; recomputation grows with the context
    assert big_gpu.max() / big_gpu.min() < 1.15 and big_gpu.min() > 3.0
    assert 3.0 < (big_recompute / big_gpu).loc[1024] < 3.5
    assert 5.2 < (big_recompute / big_gpu).loc[2048] < 6.0
    # and there the H100 is far faster than one CPU thread (shipped: 30-45 times; on a
    # quiet CPU about 14): the arithmetic and the weights' reads count
    assert (big_cpu / big_gpu.loc[big_cpu.index]).min() > 5
    # on the H100, about the same time per operator dispatched for both models...
    small_us = small_gpu.mean() / small_ops * 1e3
    big_us = big_gpu.mean() / big_ops * 1e3
    assert 0.7 < small_us / big_us < 1.5  # shipped: 1.13
    # per kernel launched, too (the operators that are not views)
    small_kernel_us = small_gpu.mean() / small_kernels * 1e3
    big_kernel_us = big_gpu.mean() / big_kernels * 1e3
    assert 0.5 < small_kernel_us / big_kernel_us < 2  # shipped: 0.72
    # ... though GPT-2 small's step does over a thousand times the multiply-adds
    small_macs = sum(
        m.weight.numel()
        for m in timing_model.modules()
        if isinstance(m, nn.Linear)
    )
    assert matmul_weights / small_macs > 1000
    # the step takes over 15 times the time to read the weights once
    assert big_gpu.min() / weights_ms > 15
    # the shipped runs (earlier PyTorch and book code) dispatched a few fewer operators
    assert 0 <= cached["operators"].iloc[0] - small_ops <= 5
    machines = bench.groupby("device")["machine"].first()
    glue("gen_gpu_machine", machines["cuda"])
    glue("gen_cpu_machine", machines["cpu"])
    glue("gen_gpu_small_ms", f"{small_gpu.min():.1f}-{small_gpu.max():.1f}")
    glue("gen_cpu_small_ms", f"{small_cpu.min():.1f}-{small_cpu.max():.1f}")
    glue(
        "gen_gpu_small_saving",
        f"{small_saving.min():.1f}-{small_saving.max():.1f}",
    )
    glue("gen_gpu_small_ops", int(small_ops))
    glue("gen_gpu_big_ops", int(big_ops))
    glue("gen_gpu_small_us", round(small_us))
    glue("gen_gpu_big_us", round(big_us))
    glue("gen_gpu_small_kernels", int(small_kernels))
    glue("gen_gpu_big_kernels", int(big_kernels))
    glue("gen_gpu_small_kernel_us", round(small_kernel_us))
    glue("gen_gpu_big_kernel_us", round(big_kernel_us))
    glue("gen_macs_ratio", f"{round(matmul_weights / small_macs, -2):,.0f}")
    glue("gen_gpt2_gpu_ms", f"{big_gpu.min():.1f}-{big_gpu.max():.1f}")
    glue("gen_gpt2_recompute_64", round(big_recompute.loc[64], 1))
    glue("gen_gpt2_recompute_1024", round(big_recompute.loc[1024], 1))
    glue("gen_gpt2_recompute_2048", round(big_recompute.loc[2048]))
    glue(
        "gen_gpt2_saving_1024",
        round(big_recompute.loc[1024] / big_gpu.loc[1024], 1),
    )
    glue(
        "gen_gpt2_saving_2048",
        round(big_recompute.loc[2048] / big_gpu.loc[2048], 1),
    )
    glue("gen_gpt2_cpu_ms", f"{big_cpu.min():.0f}-{big_cpu.max():.0f}")
    glue("gen_weights_read_ms", round(weights_ms, 2))
    glue("gen_launch_bound_ratio", round(big_gpu.min() / weights_ms))

# %% [markdown]
# **Figure.** Time per decoding step against the context, on log scales: one thread of
# {glue:text}`gen_cpu_machine` (circles, solid) and {glue:text}`gen_gpu_machine`
# (squares, dashed), with the cache (orange) and without it (blue). Left, the timing model
# of chapter 10's size; right, a model of GPT-2 small's shape.
#
# For the small model the H100's speed goes to waste: a cached step takes
# {glue:text}`gen_gpu_small_ms` ms there, the same order as one CPU thread's
# {glue:text}`gen_cpu_small_ms` ms, and the cache saves only
# {glue:text}`gen_gpu_small_saving` times. A cached step of GPT-2 small's shape takes
# {glue:text}`gen_gpt2_gpu_ms` ms on the H100 at every context. Divided by the operators
# each step dispatches ({glue:text}`gen_gpu_small_ops` and {glue:text}`gen_gpu_big_ops`),
# that is about {glue:text}`gen_gpu_small_us` and {glue:text}`gen_gpu_big_us`
# microseconds per operator; per kernel launched (the {glue:text}`gen_gpu_small_kernels`
# and {glue:text}`gen_gpu_big_kernels` operators that are not views), about
# {glue:text}`gen_gpu_small_kernel_us` and {glue:text}`gen_gpu_big_kernel_us`. Either way
# the two models are within a small factor of each other, although GPT-2 small's step does
# {glue:text}`gen_macs_ratio` times the multiply-adds. From this we infer that on the H100
# both steps spend their time issuing operators one after another (dispatch on the host, and
# a kernel launch for each that is not a view), not in arithmetic: they are *launch-bound*. That is an inference,
# not a measurement: a control that removes the launches, such as replaying the step as one
# CUDA graph, would test it, and the shipped runs include none. (They used earlier versions
# of PyTorch and of the book's code, which dispatch a few operators fewer than this page's
# {glue:text}`gen_step_ops`.)
#
# At GPT-2 small's size the cache keeps its promise on the GPU too: recomputation takes
# {glue:text}`gen_gpt2_recompute_64` ms at 64 positions,
# {glue:text}`gen_gpt2_recompute_1024` ms at 1,024 ({glue:text}`gen_gpt2_saving_1024`
# times the cached step) and {glue:text}`gen_gpt2_recompute_2048` ms at 2,048
# ({glue:text}`gen_gpt2_saving_2048` times). One CPU thread needs
# {glue:text}`gen_gpt2_cpu_ms` ms per cached step. The H100 is still far from its memory's
# limit: reading GPT-2 small's {glue:text}`gen_gpt2_weights_mb` MB of weights once per
# token at its ~3 TB/s would take {glue:text}`gen_weights_read_ms` ms, and the step takes
# {glue:text}`gen_launch_bound_ratio` times that, by our inference in launches.
#
# ### What it costs: memory
#
# For each layer the cache holds a key and a value of $d_\text{head}$ numbers per key/value
# head, per position, per sequence. Here the key/value heads $H_{kv}$ are the $H$ heads;
# chapter 13 lets several query heads share one:
#
# $$\text{cache bytes} = 2 \times L \times H_{kv} \times d_\text{head} \times T \times B \times \text{bytes per number}.$$


# %% tags=["hide-input"]
def held_bytes(caches) -> int:
    """The memory the caches' tensors keep alive: each storage counted once."""
    storages = {}
    for cache in caches:
        for tensor in (cache.keys, cache.values):
            storages[tensor.untyped_storage().data_ptr()] = (
                tensor.untyped_storage().nbytes()
            )
    return sum(storages.values())


caches = lm.new_caches(8, capacity=64)  # room for 64 positions, on first use
with torch.no_grad():
    lm(train_rows.tensors[0][:8, :63], caches)  # 8 sequences of 63 tokens
    counted_after_pass = sum(cache.memory_bytes() for cache in caches)
    held_after_pass = held_bytes(caches)
    lm(train_rows.tensors[0][:8, 63:], caches)  # and one more token each: 64
counted = sum(cache.memory_bytes() for cache in caches)  # elements x 4 bytes
gpt2_cache = kv_cache_bytes(12, 12, 64, 1024, bytes_per_element=4)
print(
    f"chapter 10's model, 8 x 64 tokens: {counted:,} bytes\n"
    f"GPT-2 small, one sequence of 1,024: {gpt2_cache:,} bytes"
)

# %% tags=["remove-cell"]
# the formula above, as helpers.efficient.kv_cache_bytes (float32: 4 bytes per number)
assert counted == kv_cache_bytes(
    2, 4, 16, 64, batch_size=8, bytes_per_element=4
)
counted_63 = kv_cache_bytes(2, 4, 16, 63, batch_size=8, bytes_per_element=4)
assert counted_after_pass == counted_63
# what is allocated is the capacity, from the first pass on: the formula at T = 64
assert held_after_pass == held_bytes(caches) == counted
assert sum(cache.allocated_bytes() for cache in caches) == counted
glue("gen_small_cache_kb", round(counted / 1024))
glue("gen_small_cache_after_pass_kb", round(counted_after_pass / 1024))
glue("gen_gpt2_cache_mb", round(gpt2_cache / 1e6, 1))
glue("gen_gpt2_weights_mb", round(gpt2_count * 4 / 1e6))
glue("gen_gpt2_batch_equal", math.ceil(gpt2_count * 4 / gpt2_cache))

# %% [markdown]
# For chapter 10's model (`lm`) and 8 sequences of 64 tokens the caches hold
# {glue:text}`gen_small_cache_kb` KiB, what the formula gives. For GPT-2 small in float32,
# one sequence of 1,024 tokens takes {glue:text}`gen_gpt2_cache_mb` MB, beside
# {glue:text}`gen_gpt2_weights_mb` MB of weights: from a batch of
# {glue:text}`gen_gpt2_batch_equal` sequences on, the cache outweighs the model.
#
# :::{admonition} Going deeper: a preallocated cache
# :class: dropdown
# The caches above were made with room for 64 positions, and hold that much from their
# first use on: right after the pass over 63 tokens, when the filled part counts
# {glue:text}`gen_small_cache_after_pass_kb` KiB, their storage already takes the
# formula's bytes at 64 positions. `generate` asks for the prompt's length plus the tokens
# to generate, so its caches are allocated once and never move.
# :::
#
# (ch11-same-as-gpt2)=
# ## The same model as GPT-2
#
# Configured as GPT-2, the class is GPT-2. `load_gpt2` copies a checkpoint of the
# `transformers` library's GPT-2 into it, renaming (`h.0.attn.c_attn` is
# `blocks[0].self_attn.qkv_proj`) and transposing: GPT-2 stores its matrices as (in, out),
# `nn.Linear` as (out, in).
#
# A state dict records shapes, not every choice behind them: a model with 2 or 8 heads fits
# a 4-head checkpoint's tensors exactly. So `load_gpt2` also takes the checkpoint's
# `GPT2Config` and, before copying anything, checks the model against both: from the
# tensors, the layers, width, vocabulary, context, every shape, the biases and a tied head;
# from the configuration, the heads, the activation, the attention's scaling
# (`scale_attn_weights`, `scale_attn_by_inverse_layer_idx`) and `layer_norm_epsilon`.
#
# The reference here is a small GPT-2 with random weights (the book runs offline), drawn
# with standard deviation {glue:text}`gen_reference_std` rather than 0.02, so that GELU and
# its tanh approximation differ visibly in the logits:

# %%
REFERENCE_STD = 0.2  # GPT2Config's initializer_range; GPT-2's own is 0.02
try:
    with warnings.catch_warnings():  # tqdm's, about Jupyter widgets
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import GPT2Config, GPT2LMHeadModel
except ModuleNotFoundError:  # Colab ships it
    GPT2LMHeadModel = None
    print(
        "This section needs the transformers package: pip install transformers"
    )
if GPT2LMHeadModel is not None:
    torch.manual_seed(0)
    sizes = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=16)
    config = GPT2Config(
        **sizes,
        initializer_range=REFERENCE_STD,
        bos_token_id=0,
        eos_token_id=None,
    )
    reference = GPT2LMHeadModel(config).eval()
    tiny_gpt2 = GPTConfig(
        vocab_size=64, context_length=16, d_model=32, **GPT2_LIKE
    )
    ours = GPT(tiny_gpt2)
    load_gpt2(ours, reference.state_dict(), config=config).eval()
    tokens = torch.randint(64, (4, 16), generator=seeded(0))
    with torch.no_grad():
        gpt2_error = (ours(tokens) - reference(tokens).logits).abs().max()
    print("logits agree within 1e-4:", gpt2_error.item() < 1e-4)

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert gpt2_error < 1e-4
    from transformers import BertConfig
    from transformers.activations import ACT2FN

    # the going-deeper box on GELU: GPT-2's is the tanh approximation, Hugging Face's
    # BERT defaults to the exact one (Google's BERT code computes the tanh one, as GPT-2)
    grid = torch.linspace(-4, 4, 101)
    exact, tanh = nn.GELU()(grid), nn.GELU(approximate="tanh")(grid)
    assert config.activation_function == "gelu_new"
    assert torch.allclose(ACT2FN["gelu_new"](grid), tanh, atol=1e-6)
    assert BertConfig().hidden_act == "gelu"
    assert torch.allclose(ACT2FN["gelu"](grid), exact, atol=1e-6)
    assert not torch.allclose(exact, tanh, atol=1e-6)
glue("gen_gpt2_atol", "1e-4")
glue("gen_reference_std", REFERENCE_STD)

# %% [markdown]
# The logits agree within {glue:text}`gen_gpt2_atol`, and so do greedy tokens, with and
# without the cache. The agreement can fail: an untransposed square output projection, or
# the exact GELU, moves the logits by more than the tolerance (folded cells).

# %% tags=["hide-input"]
if GPT2LMHeadModel is not None:
    prompt = tokens[:, :4]
    # an explicit mask: else generate() masks prompt tokens equal to the pad id
    everything = torch.ones_like(prompt)
    expected = reference.generate(
        prompt,
        attention_mask=everything,
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
    )
    same_greedy = []
    for use_cache in (True, False):
        ours_tokens = ours.generate(
            prompt, 12, greedy=True, use_cache=use_cache
        )
        same_greedy.append(torch.equal(ours_tokens, expected))
        print(
            f"greedy tokens equal generate()'s, use_cache={use_cache}:",
            same_greedy[-1],
        )

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert all(same_greedy)

# %% tags=["hide-input"]
if GPT2LMHeadModel is not None:
    flipped = GPT(tiny_gpt2).eval()
    load_gpt2(flipped, reference.state_dict(), config=config)
    with torch.no_grad():
        for index, block in enumerate(flipped.blocks):
            # GPT-2's (in, out), as it is
            conv1d = reference.state_dict()[
                f"transformer.h.{index}.attn.c_proj.weight"
            ]
            block.self_attn.out_proj.weight.copy_(conv1d)
        untransposed = (
            (flipped(tokens) - reference(tokens).logits).abs().max().item()
        )
        for block in ours.blocks:  # the exact GELU, not its tanh approximation
            block.ffn.activation = nn.GELU()
        exact_gelu = (
            (ours(tokens) - reference(tokens).logits).abs().max().item()
        )
        for block in ours.blocks:
            block.ffn.activation = nn.GELU(approximate="tanh")  # back
    print(
        "untransposed Conv1D: logits differ by more than 1e-4:",
        untransposed > 1e-4,
    )
    print("exact GELU: logits differ by more than 1e-4:", exact_gelu > 1e-4)

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert untransposed > 1e-4 and exact_gelu > 1e-4

# %% [markdown]
# A model built otherwise is refused, with the mismatch named: a 2-head model, which the
# tensors alone cannot tell from 4 heads, and chapter 10's own activation, ReLU:

# %%
if GPT2LMHeadModel is not None:
    refused = []
    for wrong in (
        tiny_gpt2.replace(num_heads=2),
        tiny_gpt2.replace(activation="relu"),
    ):
        try:
            load_gpt2(GPT(wrong), reference.state_dict(), config=config)
        except ValueError as error:
            refused.append(wrong)
            print(textwrap.fill(f"refused: {error}", 80))

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert len(refused) == 2
    # without a configuration, a 2-head model is refused too: the head count is required
    two_heads = GPT(tiny_gpt2.replace(num_heads=2))
    with expect_error(TypeError):
        load_gpt2(two_heads, reference.state_dict())
    # the released weights file has no "transformer." prefix: it loads the same
    prefixless = {
        key.removeprefix("transformer."): value
        for key, value in reference.state_dict().items()
        if key != "lm_head.weight"
    }
    again = load_gpt2(GPT(tiny_gpt2), prefixless, config=config).eval()
    with torch.no_grad():
        assert torch.equal(again(tokens), ours(tokens))

# %% [markdown]
# Online, the same lines load the released GPT-2 small and sample from it:
#
# ```python
# from transformers import GPT2LMHeadModel, GPT2TokenizerFast
#
# released = GPT2LMHeadModel.from_pretrained("gpt2")  # downloads the weights
# tokenizer = GPT2TokenizerFast.from_pretrained("gpt2")
# model = GPT(GPT2_SMALL)
# load_gpt2(model, released.state_dict(), config=released.config).eval()
# prompt = torch.tensor([tokenizer.encode("The attention mechanism")])
# text = model.generate(prompt, 40, temperature=0.8, top_k=40,
#                       generator=seeded(0))
# print(tokenizer.decode(text[0]))
# ```

# %% [markdown]
# ## Summary
#
# - A key/value cache keeps every layer's keys and values. After a *prefill* pass over the
#   prompt, each *decode* step computes one token's query, key and value and attends over
#   the cache: the per-token layers run on one token and attention on one row, $O(t)$
#   instead of $O(t^2)$. The tokens and logits are those of a full pass; the operators a
#   step dispatches and the elements it writes are the same at every context
#   ({glue:text}`gen_cache_speedup` times faster at {glue:text}`gen_cache_longest` tokens
#   here).
# - At batch 1 a decode step is bound by reading the weights; a batch shares that read, so
#   the time per token falls ({glue:text}`gen_batch_gain` times at batch 32 for GPT-2
#   small's shape on one CPU thread).
# - Its memory is linear in layers, key/value heads, positions and batch: for GPT-2 small,
#   {glue:text}`gen_gpt2_cache_mb` MB per sequence of 1,024 tokens, and more than the
#   weights from a batch of {glue:text}`gen_gpt2_batch_equal` on.
# - On an H100 a model this small is, we infer, launch-bound
#   ({glue:text}`gen_gpu_small_ms` ms per step, the same order as one CPU thread); at
#   GPT-2 small's size the cached step stays at {glue:text}`gen_gpt2_gpu_ms` ms while
#   recomputation grows.
# - Configured as GPT-2 small, the book's class has {glue:text}`gen_gpt2_count` parameters
#   and, loaded from a GPT-2 checkpoint (on this page a small one with random weights: the
#   book runs offline), the checkpoint's logits and greedy tokens.
#
# ## Exercises
#
# 1. **The cache of a bigger model.** A model has 32 layers, 32 query heads of width 128 and
#    8 key/value heads, and keeps its cache in bfloat16 (2 bytes). How much cache does one
#    sequence of 4,096 tokens need? And with as many key/value heads as query heads?
#
# :::{admonition} Solution
# :class: dropdown
# $2 \times 32 \times 8 \times 128 \times 4096 \times 2$ bytes $= 536{,}870{,}912$ bytes,
# 512 MiB; with 32 key/value heads four times as much, 2 GiB per sequence.
# `kv_cache_bytes(32, 8, 128, 4096)` computes it (bfloat16 is its default). Grouped-query
# attention (chapter 13) exists because of this line.
# :::
#
# 2. **Operators per layer.** Count the operators of one cached step with
#    `DispatchCounter` for models of 1, 2 and 4 layers, `GPT(GPTConfig(vocab_size=64,
#    context_length=256, num_layers=L))`: generating 2 tokens after a prompt costs one
#    step more than generating 1. How does the count grow with $L$? What does that say
#    about the time of a step of a deep, small model on a GPU?
#
# :::{admonition} Solution
# :class: dropdown
# ```python
# prompt = torch.zeros(1, 64, dtype=torch.long)
# for layers in (1, 2, 4):
#     config = GPTConfig(vocab_size=64, context_length=256, num_layers=layers)
#     model = GPT(config).eval()
#     counts = []
#     for new_tokens in (1, 2):
#         with DispatchCounter() as counter:
#             model.generate(prompt, new_tokens, greedy=True)
#         counts.append(counter.ops)
#     print(layers, counts[1] - counts[0])
# ```
# Each block adds the same number of operators, so the count is a constant (embedding,
# final norm, head, sampling) plus a fixed number per layer. On a launch-bound GPU a step's
# time grows with the number of layers even when each layer's arithmetic is negligible.
# :::


# %% tags=["remove-cell"]
assert kv_cache_bytes(32, 8, 128, 4096) == 536_870_912
assert kv_cache_bytes(32, 32, 128, 4096) == 4 * 536_870_912
# exercise 2's solution, as written there
prompt = torch.zeros(1, 64, dtype=torch.long)
operators = []
for layers in (1, 2, 4):
    config = GPTConfig(vocab_size=64, context_length=256, num_layers=layers)
    model = GPT(config).eval()
    counts = []
    for new_tokens in (1, 2):
        with DispatchCounter() as counter:
            model.generate(prompt, new_tokens, greedy=True)
        counts.append(counter.ops)
    operators.append(counts[1] - counts[0])
per_layer = operators[1] - operators[0]
assert per_layer > 0 and operators[2] - operators[1] == 2 * per_layer
# the same count as the table's step at this width (two layers)
assert operators[1] == cached["operators"].iloc[0]
