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
# # Long sequences: what attention costs and how it is made cheaper
#
# Every query of self-attention reads every key, so a sequence of $T$ tokens costs $T^2$
# scores per head, per layer. Chapter 3 measured what that does to memory. This chapter
# measures time and memory together against $T$, then builds, runs and tests the four ideas
# every long-context model now uses to pay less: **tiled attention** with an online softmax
# (the algorithm of FlashAttention), which never holds the $T \times T$ matrix;
# **grouped-query and multi-query attention**, which shrink the key/value cache of chapter
# 10; **sliding windows**, which make attention local again; and **relative positions**
# (RoPE, ALiBi), which decide whether a model trained on short sequences can read long ones.
# Everything runs on a CPU; where a claim is about a GPU, the numbers are computed from
# shapes, and the text says so.

# %% tags=["hide-cell"]
# Setup: on Colab, install the book's helpers; everywhere, import, seed and pick a device.
import sys

# The book's package at the book's version (a release tag, kept in step by a test).
HELPERS = "attention-book-helpers @ git+https://github.com/attention-book/attention-book@v0.3.1"
if "google.colab" in sys.modules:
    import subprocess

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", HELPERS], check=True)
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
device = helpers.get_device()

# %%
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torch.utils.flop_counter import FlopCounterMode

from helpers import expect_error, glue, show_source
from helpers.analysis import peak_cpu_bytes
from helpers.attention import scaled_dot_product_attention
from helpers.checks import check_softmax_merge
from helpers.efficient import (
    attention_cost,
    kv_cache_bytes,
    median_seconds,
    online_softmax_update,
    receptive_field,
    sliding_window_mask,
    tiled_attention,
)
from helpers.gpt import GPT, CausalSelfAttention
from helpers.parallel import run_in_processes
from helpers.plotting import heatmap
from helpers.positional import LearnedPositionalEmbedding
from helpers.tasks.brackets import BracketConfig
from helpers.tasks.retrieval import (
    RetrievalConfig,
    make_retrieval_data,
    train_retrieval,
)
from helpers.tasks.shapes import local_oracle, make_shapes_dataset, train_shapes_model

helpers.use_one_thread(device)

# %% [markdown]
# ## The cost, measured
#
# For one head of width $d$ and a sequence of $T$ tokens, attention computes the scores
# $QK^\top$ ($T \times T$ dot products of length $d$), a softmax over each row, and the
# weighted sum of the values (another $T \times T \times d$ multiply-adds). Counting a
# multiply-add as two floating-point operations, that is $4T^2d$ FLOPs per head, and the
# straightforward implementation of chapter 3 also *stores* the $T \times T$ scores and
# weights. Doubling $T$ quadruples both. PyTorch's fused kernel
# (`F.scaled_dot_product_attention`) does the same arithmetic without storing the matrix.
# We time both on this CPU and measure the memory each call allocates
# (`helpers.analysis.peak_cpu_bytes`, chapter 3's method), for
# {glue:text}`ch11_cost_heads` heads of width {glue:text}`ch11_cost_width`, one sequence, up
# to $T =$ {glue:text}`ch11_cost_longest`. The from-scratch version is the book's
# `scaled_dot_product_attention`, which returns the weights and so must hold them:

# %%
NUM_HEADS, D_HEAD = 2, 64
LENGTHS = [256, 512, 1024, 2048, 4096]
MIB = 2**20
glue("ch11_cost_heads", NUM_HEADS)
glue("ch11_cost_width", D_HEAD)
glue("ch11_cost_longest", LENGTHS[-1])


def naive(q, k, v):
    return scaled_dot_product_attention(q, k, v, validate=False)[0]


def measure(kernels: dict, lengths, repeats=3) -> pd.DataFrame:
    """Median seconds and peak MiB of each kernel at each length, one sequence."""
    rows = []
    with torch.inference_mode():
        for T in lengths:
            q, k, v = (torch.randn(1, NUM_HEADS, T, D_HEAD) for _ in range(3))
            for name, kernel in kernels.items():
                seconds = median_seconds(kernel, q, k, v, repeats=repeats)
                peak = peak_cpu_bytes(kernel, q, k, v) / MIB
                rows.append(
                    {"T": T, "kernel": name, "ms": 1e3 * seconds, "peak MiB": peak}
                )
    return pd.DataFrame(rows)


# %% tags=["nbval-ignore-output"]
cost = measure({"naive": naive, "fused": F.scaled_dot_product_attention}, LENGTHS)
cost.pivot(index="T", columns="kernel").round(2)

# %% [markdown]
# Both kernels take time that grows about fourfold per doubling at the longest lengths (the
# arithmetic is the same), but only the naive one needs memory that does: at
# $T =$ {glue:text}`ch11_cost_longest` it holds {glue:text}`ch11_naive_peak_mib` MiB
# against {glue:text}`ch11_fused_peak_mib` MiB for the fused kernel, and the fused kernel is
# {glue:text}`ch11_fused_speedup` times faster: the naive version writes the matrix out and
# reads it back several times (scale, softmax, product), and at this size it no longer fits
# in the processor's caches.

# %% tags=["nbval-ignore-output"]
at_longest = cost[cost["T"] == LENGTHS[-1]].set_index("kernel")
glue("ch11_naive_peak_mib", round(at_longest.loc["naive", "peak MiB"]))
glue("ch11_fused_peak_mib", round(at_longest.loc["fused", "peak MiB"], 1))
glue(
    "ch11_fused_speedup",
    round(at_longest.loc["naive", "ms"] / at_longest.loc["fused", "ms"], 1),
)
# Margins (scripts/margins_long.py, default and scalar numerics, three repeats each): the
# fused kernel was 3.4 to 3.6 times faster than the naive one at T = 4096 (1.6 to 2.0 under
# scalar numerics); the naive peak was 54 times the tiled one, 100 times the fused one.
assert at_longest.loc["naive", "peak MiB"] > 10 * at_longest.loc["fused", "peak MiB"]
assert at_longest.loc["fused", "ms"] < at_longest.loc["naive", "ms"]

# %% [markdown]
# ### On paper: a GPU and a long context
#
# A GPU cannot be measured here, but its arithmetic can be computed from the shapes alone
# (`helpers.efficient.attention_cost`). Take one attention layer of a 7-billion-parameter
# model, 32 heads of width 128 {cite}`touvron2023llama2`, in 16-bit numbers, one sequence.
# The table gives, per layer, the FLOPs of attention, the bytes of the $T \times T$ weights a
# naive implementation would materialize, and the bytes of the queries, keys, values and
# output, all that a tiled kernel must hold. **These numbers are computed, not measured.**

# %%
rows = []
for T in (4_096, 32_768, 131_072):
    layer = attention_cost(T, 32, 128, bytes_per_element=2, causal=True)
    rows.append({"T": f"{T:,}", "TFLOPs (causal)": layer["flops"] / 1e12,
                 "weights GiB": layer["weights_bytes"] / 2**30,
                 "q, k, v, out GiB": layer["qkvo_bytes"] / 2**30})  # fmt: skip
paper = pd.DataFrame(rows).set_index("T")
long_layer = attention_cost(131_072, 32, 128, bytes_per_element=2)
glue("ch11_paper_weights_gib", f"{long_layer['weights_bytes'] / 2**30:,.0f}")
glue("ch11_paper_qkvo_gib", round(long_layer["qkvo_bytes"] / 2**30, 1))
assert long_layer["weights_bytes"] == 32 * 131_072**2 * 2  # exact integer arithmetic
paper.round(3)

# %% [markdown]
# At 128k tokens one layer's weight matrix would take {glue:text}`ch11_paper_weights_gib`
# GiB, more than twelve times the 80 GB of the largest GPUs of 2023, for a single sequence; the
# tensors a tiled kernel keeps take {glue:text}`ch11_paper_qkvo_gib` GiB. The FLOPs are
# unchanged by tiling: long contexts stay quadratic in *time*. What tiling removes is the
# quadratic *memory*, and with it most of the traffic to the GPU's main memory, which is
# what made attention slow in practice {cite}`dao2022flashattention`.
#
# ## Online softmax and tiled attention
#
# The softmax seems to need every score of a row before it can produce a single weight: its
# denominator sums over all keys, and for numerical safety one subtracts the row's maximum
# first. Both can be computed in one pass, a block of keys at a time
# {cite}`milakov2018online`. Keep three running quantities per query: the largest score
# seen so far $m$, the sum $\ell = \sum_j e^{s_j - m}$ and the weighted sum of values
# $a = \sum_j e^{s_j - m} v_j$ over the keys seen so far. A new block of scores $s_B$ with
# values $V_B$ updates them as
#
# $$m' = \max(m, \max_j s_{B,j}), \qquad
#   \ell' = \ell\, e^{m - m'} + \sum_j e^{s_{B,j} - m'}, \qquad
#   a' = a\, e^{m - m'} + \sum_j e^{s_{B,j} - m'} v_{B,j}.$$
#
# The factor $e^{m - m'} \le 1$ rescales what was summed against the old maximum to the new
# one, so after the last block $a / \ell$ is exactly $\operatorname{softmax}(s) V$: nothing
# is approximated. Written out for one query:


# %%
def streaming_attention(scores, values, block):
    """softmax(scores) @ values for one query, reading `block` keys at a time."""
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, len(scores), block):
        s, v = scores[start : start + block], values[start : start + block]
        new_max = torch.maximum(running_max, s.max())
        rescale = torch.exp(
            running_max - new_max
        )  # the old sums, against the new maximum
        running_sum = running_sum * rescale + torch.exp(s - new_max).sum()
        accumulator = accumulator * rescale + torch.exp(s - new_max) @ v
        running_max = new_max
    return accumulator / running_sum


generator = torch.Generator().manual_seed(0)
scores, values = (
    30 * torch.randn(100, generator=generator),
    torch.randn(100, 3, generator=generator),
)
exact = scores.softmax(-1) @ values
for block in (1, 7, 100):
    error = (streaming_attention(scores, values, block) - exact).abs().max().item()
    print(
        f"block {block:3}: agrees with softmax(scores) @ values within 1e-5:",
        error < 1e-5,
    )
    assert error < 1e-5
naive_sum = torch.exp(scores).sum()  # the same sum without the running maximum
print(
    "without the maximum, exp(scores).sum() is finite:",
    torch.isfinite(naive_sum).item(),
)
assert not torch.isfinite(naive_sum)

# %% [markdown]
# Some scores here exceed 88.7, and $e^{88.7}$ is already beyond the largest float32: without
# the running maximum the sum overflows, so the maximum is what lets the softmax stream at
# all. Tiled attention applies the update to whole tiles: a
# block of queries against a block of keys, so that the largest tensor alive is one tile of
# scores, `block_size` × `block_size`, never $T \times T$. With a causal mask, the tiles
# entirely above the diagonal hold no allowed key and are skipped: about half of the work.
# This is the forward pass of FlashAttention {cite}`dao2022flashattention`, in plain PyTorch
# (`helpers.efficient`; the update is the function above, for a block of queries at once):

# %%
show_source(online_softmax_update)

# %%
show_source(tiled_attention)

# %% [markdown]
# It computes the same function as PyTorch's kernel, with and without a causal mask, for
# any block size (also one that does not divide $T$); the property test
# `test_efficient.py::test_tiled_attention_equals_pytorchs_kernel` checks random shapes and
# block sizes:

# %%
q, k, v = (torch.randn(2, 4, 300, 32, generator=generator) for _ in range(3))
for causal in (False, True):
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for block_size in (16, 100, 512):
        error = (
            (tiled_attention(q, k, v, causal=causal, block_size=block_size) - expected)
            .abs()
            .max()
        )
        print(
            f"causal={causal!s:5} block_size={block_size:3}: agree within 1e-5:",
            error.item() < 1e-5,
        )
        assert error < 1e-5

# %% [markdown]
# Skipping the tiles above the diagonal is visible in the operation count. PyTorch's
# `FlopCounterMode` counts the FLOPs of every matrix product; with $T = 1024$ and blocks of
# 128 there are $8 \times 8$ tiles, of which the causal version computes the 36 on and below
# the diagonal:

# %%
q, k, v = (torch.randn(1, 1, 1024, 64) for _ in range(3))
counted = {}
for causal in (False, True):
    with FlopCounterMode(display=False) as counter:
        tiled_attention(q, k, v, causal=causal, block_size=128)
    counted[causal] = counter.get_total_flops()
print(
    "FLOPs:",
    counted[False],
    "full,",
    counted[True],
    "causal; ratio",
    counted[True] / counted[False],
)
assert counted[False] == attention_cost(1024, 1, 64)["flops"]
assert counted[True] * 64 == counted[False] * 36

# %% [markdown]
# Now its memory and time, against the same lengths as before. The cell also checks the
# claim this section is built on: at $T = 4096$ the tiled version needs at most a tenth of
# the naive version's peak memory.

# %% tags=["nbval-ignore-output"]
BLOCK = 256
tiled_cost = measure(
    {"tiled": lambda q, k, v: tiled_attention(q, k, v, block_size=BLOCK)}, LENGTHS
)
cost = pd.concat([cost, tiled_cost], ignore_index=True)
table = cost.pivot(index="T", columns="kernel")
at_longest = cost[cost["T"] == LENGTHS[-1]].set_index("kernel")
memory_ratio = at_longest.loc["tiled", "peak MiB"] / at_longest.loc["naive", "peak MiB"]
glue("ch11_tiled_peak_mib", round(at_longest.loc["tiled", "peak MiB"], 1))
glue("ch11_memory_ratio", f"1/{1 / memory_ratio:.0f}")
glue(
    "ch11_tiled_over_fused",
    round(at_longest.loc["tiled", "ms"] / at_longest.loc["fused", "ms"], 1),
)
glue(
    "ch11_tiled_over_naive",
    round(at_longest.loc["tiled", "ms"] / at_longest.loc["naive", "ms"], 2),
)
glue("ch11_block", BLOCK)
# Margins (scripts/margins_long.py): 0.0185 (1/54) in every repeat, default and scalar numerics.
assert memory_ratio <= 0.1
table.round(2)

# %% tags=["hide-input", "nbval-ignore-output"]
fig, axes = plt.subplots(1, 2, figsize=(6.0, 2.8), layout="constrained")
for name, marker in (("naive", "o"), ("fused", "s"), ("tiled", "^")):
    rows = cost[cost["kernel"] == name]
    axes[0].plot(rows["T"], rows["ms"], marker=marker, label=name)
    axes[1].plot(rows["T"], rows["peak MiB"], marker=marker, label=name)
axes[0].set(ylabel="milliseconds per call", title="time")
axes[1].set(ylabel="peak MiB", title="memory")
for ax in axes:
    ax.set(xscale="log", yscale="log", xlabel="sequence length T")
    ax.set_xticks(LENGTHS, [str(T) for T in LENGTHS], fontsize=7)
    ax.minorticks_off()
axes[0].legend()
plt.show()

# %% [markdown]
# **Figure.** Time and peak memory of one call against $T$ ({glue:text}`ch11_cost_heads`
# heads of width {glue:text}`ch11_cost_width`, log-log axes). Look at the right panel: the
# naive kernel's memory rises with slope 2 (quadratic), the fused and the tiled ones with
# slope 1 at most (linear; the tiled one starts from the fixed cost of its tiles): at $T = 4096$ the tiled version peaks at {glue:text}`ch11_tiled_peak_mib` MiB,
# {glue:text}`ch11_memory_ratio` of the naive one. On the left, all three grow about
# quadratically at long lengths.
#
# The time needs an honest reading. The tiled loop is written in Python: for each of its
# $(T / {\rm block})^2$ tiles, the interpreter dispatches a handful of small PyTorch
# operations, each of which reads its inputs from memory and writes its result back. It is
# {glue:text}`ch11_tiled_over_fused` times slower than PyTorch's fused kernel at
# $T = 4096$, which runs the *same* algorithm as compiled code, keeping a tile's scores in
# registers and cache from the product through the softmax to the weighted sum. (Against the
# naive version the loop is at {glue:text}`ch11_tiled_over_naive` of its time here: the naive
# one pays for moving a 64 MiB matrix several times.) On a GPU the gap is the whole point:
# FlashAttention is faster than naive attention not because it does less arithmetic (it
# does slightly more) but because it reads and writes the slow main memory far less
# {cite}`dao2022flashattention`. A Python loop shows the algorithm; only a fused kernel
# shows its speed.
#
# ```{admonition} Pitfall: "attention needs $O(T^2)$ memory"
# :class: warning
# {ref}`The PyTorch Lightning notebook <source-000>` motivates a maximum sequence length by
# saying that attention has an $O(T^2)$ memory requirement. That is true of the naive
# implementation, which materializes the weights, and not of attention itself
# {cite}`rabe2021self`: the tiled version above computes the same output in memory that
# grows linearly with $T$, and PyTorch's fused kernel does too. The time stays quadratic.
# The test `test_efficient.py::test_tiled_attention_never_holds_the_weight_matrix` pins
# the difference (at most a tenth of the naive peak at $T = 1024$ already).
# ```
#
# ## Grouped-query and multi-query attention
#
# Chapter 10's key/value cache stores, for every layer and every position generated so far,
# one key and one value vector per head. With long contexts and many sequences served at
# once, that cache, not the weights, fills the GPU's memory, and reading it at every step is
# what limits generation speed. *Multi-query attention* {cite}`shazeer2019mqa` keeps all the
# query heads but only one key head and one value head, shared by all of them;
# *grouped-query attention* {cite}`ainslie2023gqa` is the middle ground: $H_{kv}$ key/value
# heads, each shared by a group of $H / H_{kv}$ query heads. `helpers.gpt.CausalSelfAttention`
# (chapter 10) takes `num_kv_heads`: equal to `num_heads` it is plain multi-head attention,
# 1 is multi-query. Its projection produces $H$ query heads and $H_{kv}$ key and value
# heads; before the product, each key/value head is repeated for the query heads of its
# group. PyTorch's kernel does the same when asked with `enable_gqa=True`; the layer agrees
# with it:

# %%
torch.manual_seed(0)
x = torch.randn(2, 10, 64)
for num_kv_heads in (8, 2, 1):
    layer = CausalSelfAttention(64, 8, num_kv_heads=num_kv_heads).eval()
    q, k, v = layer.qkv_proj(x).split([64, 8 * num_kv_heads, 8 * num_kv_heads], dim=-1)
    q = q.view(2, 10, 8, 8).transpose(1, 2)  # (B, H, T, d_head)
    k, v = (
        t.view(2, 10, num_kv_heads, 8).transpose(1, 2) for t in (k, v)
    )  # (B, H_kv, T, d_head)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    theirs = layer.out_proj(heads.transpose(1, 2).reshape(2, 10, 64))
    same = torch.allclose(layer(x), theirs, atol=1e-6)
    print(f"num_kv_heads={num_kv_heads}: weights {tuple(layer.qkv_proj.weight.shape)}, "
          f"equals enable_gqa within 1e-6: {same}")  # fmt: skip
    assert same

# %% [markdown]
# The tests in `tests/test_gqa.py` also compare it with key/value heads repeated by hand, one
# query head at a time through the book's own kernel, and with `MultiHeadAttention` when
# `num_kv_heads == num_heads`. A number of key/value heads that does not divide the number of
# query heads has no sensible grouping, and the layer says so:

# %%
with expect_error(ValueError):
    CausalSelfAttention(64, 8, num_kv_heads=3)

# %% [markdown]
# ### What the cache costs
#
# Per token, the cache holds $2 \times L \times H_{kv} \times d_{\rm head}$ numbers (a key
# and a value per key/value head, per layer), so its size in bytes is that times the
# sequence length, the batch size and the bytes per number (`helpers.efficient.kv_cache_bytes`).
# For chapter 10's model and for three published models, from their configuration numbers
# (Llama 2 {cite}`touvron2023llama2`: the 7B model uses multi-head attention, the 70B model
# grouped-query attention with 8 key/value heads; Mistral 7B {cite}`jiang2023mistral`: 8
# key/value heads for 32 query heads), at each model's full context, one sequence, 16-bit
# numbers. The published choice is marked; the other two columns are what the same shape
# would need with multi-head or multi-query attention (in MiB for the whole context; the
# per-token column is for the published choice). **Computed, not measured.**

# %%
ch10 = BracketConfig()  # chapter 10's model, as trained there
MODELS = {  # layers, query heads, key/value heads as published, d_head, context
    "chapter 10 (float32)": (ch10.num_layers, ch10.num_heads, ch10.num_heads,
                             ch10.d_model // ch10.num_heads, ch10.context_length),
    "Llama-2-7B": (32, 32, 32, 128, 4096),
    "Llama-2-70B": (80, 64, 8, 128, 4096),
    "Mistral-7B": (32, 32, 8, 128, 8192),
}  # fmt: skip
rows = []
for name, (layers, heads, published, d_head, context) in MODELS.items():
    size = 4 if "float32" in name else 2
    mib = {f"{kind} MiB": kv_cache_bytes(layers, kv, d_head, context, bytes_per_element=size) / 2**20
           for kind, kv in (("MHA", heads), ("GQA-8", min(8, heads)), ("MQA", 1))}  # fmt: skip
    per_token = kv_cache_bytes(layers, published, d_head, 1, bytes_per_element=size)
    rows.append({"model": name, "context": context, "kv heads": f"{published} of {heads}",
                 "KiB/token": per_token / 2**10, **mib})  # fmt: skip
cache_table = pd.DataFrame(rows).set_index("model")
llama7 = kv_cache_bytes(32, 32, 128, 4096)
glue("ch11_llama7_cache_gib", llama7 // 2**30)
glue("ch11_llama70_cache_gib", round(kv_cache_bytes(80, 8, 128, 4096) / 2**30, 2))
glue("ch11_llama70_mha_gib", kv_cache_bytes(80, 64, 128, 4096) // 2**30)
assert llama7 == 2 * 2**30  # 0.5 MiB per token, exactly
cache_table.round(2)

# %% [markdown]
# Llama-2-7B's cache at its 4,096-token context is {glue:text}`ch11_llama7_cache_gib` GiB
# per sequence: a batch of 32 such sequences needs 64 GiB, most of an 80 GB GPU, on top of
# the model's weights. With 8 key/value heads, Llama-2-70B needs {glue:text}`ch11_llama70_cache_gib` GiB per sequence,
# where multi-head attention in the same shape would need
# {glue:text}`ch11_llama70_mha_gib`. The price is in quality, which the GQA paper measured:
# grouped-query models come close to multi-head ones, multi-query ones lose more
# {cite}`ainslie2023gqa`.
#
# On this CPU we can measure the other half of the story: generation speed. Three untrained
# models of the same shape, {glue:text}`ch11_gen_layers` layers of width
# {glue:text}`ch11_gen_width` with {glue:text}`ch11_gen_heads` query heads, differ only in
# their number of key/value heads; each generates {glue:text}`ch11_gen_new` tokens after a
# prompt of {glue:text}`ch11_gen_prompt`, with the cache, and, for reference, multi-head
# attention without it. The cache each one holds at the end is measured exactly.

# %%
GEN = {"vocab": 512, "width": 256, "layers": 4, "heads": 8, "prompt": 64, "new": 64}
for key in ("width", "layers", "heads", "prompt", "new"):
    glue(f"ch11_gen_{key}", GEN[key])
prompt = torch.randint(GEN["vocab"], (1, GEN["prompt"]), generator=generator)
generators, held = {}, {}
for kind, num_kv_heads in (("MHA", 8), ("GQA-2", 2), ("MQA", 1)):
    torch.manual_seed(0)
    model = GPT(GEN["vocab"], GEN["prompt"] + GEN["new"], GEN["width"], GEN["layers"],
                GEN["heads"], num_kv_heads=num_kv_heads, positions="rope").eval()  # fmt: skip
    caches = model.new_caches(1)
    with torch.no_grad():
        model(
            torch.cat([prompt, prompt[:, : GEN["new"]]], dim=1), caches
        )  # a full context
    held[kind] = sum(cache.memory_bytes() for cache in caches)
    d_head = GEN["width"] // GEN["heads"]
    total = GEN["prompt"] + GEN["new"]
    assert held[kind] == kv_cache_bytes(
        GEN["layers"], num_kv_heads, d_head, total, bytes_per_element=4
    )
    generators[kind] = model
print("cache bytes at the full context:", held)

# %% tags=["nbval-ignore-output"]
speed = {}
for kind, model in generators.items():
    seconds = median_seconds(model.generate, prompt, GEN["new"], greedy=True, repeats=3)
    speed[kind] = GEN["new"] / seconds
seconds = median_seconds(generators["MHA"].generate, prompt, GEN["new"], greedy=True,
                         use_cache=False, repeats=3)  # fmt: skip
speed["MHA, no cache"] = GEN["new"] / seconds
glue("ch11_cache_speedup", round(speed["MHA"] / speed["MHA, no cache"], 1))
glue("ch11_mqa_over_mha", round(speed["MQA"] / speed["MHA"], 2))
# Margins (scripts/margins_long.py): with the cache, 3.2 to 3.6 times faster than without
# (2.6 to 8.9 under scalar numerics, on a busy machine).
assert speed["MHA"] > 1.3 * speed["MHA, no cache"]
pd.Series(speed, name="tokens per second").round(0).to_frame()

# %% [markdown]
# The cache makes generation {glue:text}`ch11_cache_speedup` times faster than recomputing
# the prefix at every step. Between the three kinds of heads the CPU shows little difference
# (multi-query runs at {glue:text}`ch11_mqa_over_mha` times the speed of multi-head here): at
# this size a step's time goes into the weights' matrix products and Python's dispatch, not
# into reading a cache of a few hundred kilobytes. The saving of grouped-query attention is in
# the *memory* column above, which decides how many sequences, and how long ones, fit on a
# GPU at once; on a GPU serving long contexts, where each step is limited by reading the
# cache, it also shows in speed.
#
# ## Local attention: sliding windows
#
# Chapter 2's first exercise built a causal mask in which each query sees only the last few
# keys. `helpers.efficient.sliding_window_mask` is that mask, and Mistral 7B uses it with a
# window of 4,096 tokens {cite}`jiang2023mistral`. With a window of $w$ keys a layer costs
# $T \times w$ scores instead of $T^2$: linear in $T$. (`tiled_attention` takes a `window`
# too and skips the tiles outside it.)

# %%
print(sliding_window_mask(8, 3).int())

# %% [markdown]
# A token sees only $w$ positions in one layer, but the tokens it sees have themselves seen
# $w$ positions in the layer below. After $L$ layers information can travel
# $L \times (w - 1)$ positions: `helpers.efficient.receptive_field`. The figure draws it for a
# window of 3 by composing the masks, and the cell checks the formula against the
# composition:

# %%
T_SMALL, WINDOW_SMALL = 16, 3
step = sliding_window_mask(T_SMALL, WINDOW_SMALL).long()
reach = [step]
for _ in range(2):
    reach.append(((step @ reach[-1]) > 0).long())  # one more layer
for layers, seen in enumerate(reach, start=1):
    assert seen[-1].sum().item() == receptive_field(WINDOW_SMALL, layers)
mistral_reach = receptive_field(4096, 32)
glue("ch11_mistral_reach", f"{mistral_reach:,}")
print(
    "positions the last token can draw on after 1, 2, 3 layers:",
    [r[-1].sum().item() for r in reach],
)

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 3, figsize=(6.0, 2.3), sharey=True, layout="constrained")
for layers, (ax, seen) in enumerate(zip(axes, reach, strict=True), start=1):
    heatmap(seen, ax=ax, vmin=0, vmax=1, colorbar=False, xlabel="key position",
            ylabel="query position" if layers == 1 else None,
            title=f"after {layers} layer{'s' * (layers > 1)}")  # fmt: skip
plt.show()

# %% [markdown]
# **Figure.** Which positions (columns) each position (rows) can draw on after one, two and
# three causal layers with a window of 3. The band widens by $w - 1 = 2$ per layer: the last
# token reaches 3, 5 and 7 positions. By the same formula, Mistral 7B's 32 layers with a
# window of 4,096 reach {glue:text}`ch11_mistral_reach` positions, although no single layer
# looks further back than 4,096.
#
# ### A window too small for the task
#
# Chapter 8's task asks each triangle and each box to find the other shape of its kind,
# anywhere in a signal of 100 samples. Its attention model reads every position; its CNN sees
# 21 samples and fails, ending near the *local oracle*, the best a model can do that never
# sees the partner. Give the attention layer a window instead
# (`make_shapes_attention_model(window=w)`: position $i$ reads positions less than $w$ away)
# and the model sits in between. The two convolutions before the attention and the two after
# it each see 5 samples, so an output sees $\pm(w - 1 + 8)$ samples: with $w = $
# {glue:text}`ch11_window_small` that is the CNN's 21, and we expect the CNN's failure; with a
# window as long as the signal it is chapter 8's model. We train both with chapter 8's
# recipe, on a smaller budget ({glue:text}`ch11_shapes_train:,` sequences, one pass):

# %%
SHAPES_TRAIN, SHAPES_EPOCHS = 16_000, 1
WINDOWS = (3, 100)
glue("ch11_window_small", WINDOWS[0])
glue("ch11_window_large", WINDOWS[1])
glue("ch11_shapes_train", SHAPES_TRAIN)
data = {name: make_shapes_dataset(n, seed=seed)
        for name, n, seed in (("train", SHAPES_TRAIN, 1), ("val", 1000, 2), ("test", 1000, 3))}  # fmt: skip
values = torch.cat([data["train"].inputs, data["train"].targets])
MEAN, STD = values.mean().item(), values.std().item()
sets = {
    name: TensorDataset((d.inputs - MEAN) / STD, (d.targets - MEAN) / STD)
    for name, d in data.items()
}
oracle_mse = (
    (((local_oracle(data["test"]) - data["test"].targets) / STD) ** 2).mean().item()
)
glue("ch11_oracle_mse", round(oracle_mse, 3))

# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
windowed = run_in_processes(
    train_shapes_model,
    [dict(window=window) for window in WINDOWS],
    workers=2 if device.type == "cpu" else 1,
    name="CNN + attention", seed=0, epochs=SHAPES_EPOCHS, device=device,
    train_set=sets["train"], val_set=sets["val"], test_set=sets["test"],
)  # fmt: skip
window_mse = {
    window: mse for window, (_, _, mse) in zip(WINDOWS, windowed, strict=True)
}
glue("ch11_shapes_seconds", round(time.perf_counter() - start))
for window, mse in window_mse.items():
    glue(f"ch11_window_{window}_mse", round(mse, 3))
    glue(f"ch11_window_{window}_ratio", round(mse / oracle_mse, 2))
    print(
        f"window {window:3}: test MSE {mse:.4f}, {mse / oracle_mse:.2f} of the local oracle"
    )
# Margins (scripts/margins_long.py, seeds 0-2, default and scalar numerics): the small window
# ended at 1.02 times the oracle's error on every seed, the full one at 0.26 to 0.38.
assert window_mse[WINDOWS[0]] > 0.9 * oracle_mse
assert window_mse[WINDOWS[1]] < 0.6 * oracle_mse

# %% [markdown]
# With a window of {glue:text}`ch11_window_small` the model ends at
# {glue:text}`ch11_window_3_ratio` times the local oracle's error
# ({glue:text}`ch11_oracle_mse`): like the CNN, it cannot see the partner, and no amount of
# training changes that. With the full window it reaches {glue:text}`ch11_window_100_ratio`
# of the oracle after the same short training. A sliding window is a bet that what matters
# is near; on this task, half of the time, it is not. Stacking windowed layers widens the
# reach, as the figure above shows, which is why a deep model with a window of 4,096 can
# still use a longer context, at the price of passing information along in several hops.
#
# ## Length generalization: train short, test long
#
# A model trained on sequences of length $T$ may be asked to read longer ones. Whether it can
# depends on how it knows positions. We train the same small GPT with each of chapter 5's
# kinds (learned, sinusoidal, RoPE, ALiBi) and with none at all (the causal mask alone) on a
# task whose rule does not depend on the length: at each position, predict the token that
# followed the *previous occurrence* of the current token (`helpers.tasks.retrieval`). A
# sequence is $T/2$ distinct random tokens followed by the same tokens again, rotated by a
# random amount, so every token of the second half has exactly one earlier occurrence, at a
# distance that changes from sequence to sequence: no fixed offset answers the task, only the
# rule does. (Positions of the first half have nothing to retrieve and no target.) Solving it
# takes two hops of attention, the pattern known as an *induction head*: one head writes each
# token's predecessor into its position, a later one finds the current token among those
# predecessors and reads what sits there.

# %%
RETRIEVAL = RetrievalConfig()
example_tokens, example_targets = make_retrieval_data(
    1, 12, RETRIEVAL.vocab_size, 0, True
)
print("tokens ", example_tokens[0].tolist())
print("targets", example_targets[0].tolist(), "(-100: nothing to retrieve)")

# %% [markdown]
# {ref}`The PyTorch Lightning notebook <source-000>` shows the ALiBi paper's figure
# {cite}`press2022alibi`, in which sinusoidal positions degrade as soon as the inference
# length exceeds the training length while ALiBi keeps its quality to many times that length.
# We test the claim on this task: each model trains on length {glue:text}`ch11_train_len`
# and is tested on {glue:text}`ch11_test_lengths` with {glue:text}`ch11_retrieval_seeds`
# seeds. Every model is built with a context of the longest test length, so that every kind
# can at least run there; a learned table's rows beyond the training length are never
# trained.

# %%
KINDS = ("learned", "sinusoidal", "rope", "alibi", "none")
RETRIEVAL_SEEDS = (0, 1)
glue("ch11_train_len", RETRIEVAL.train_len)
glue("ch11_test_lengths", ", ".join(map(str, RETRIEVAL.test_lengths)))
glue("ch11_retrieval_seeds", len(RETRIEVAL_SEEDS))
glue("ch11_retrieval_steps", RETRIEVAL.steps)
jobs = [dict(positions=kind, seed=seed) for seed in RETRIEVAL_SEEDS for kind in KINDS]

# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
trained = run_in_processes(train_retrieval, jobs, workers=2 if device.type == "cpu" else 1,
                           config=RETRIEVAL)  # fmt: skip
glue("ch11_retrieval_seconds", round(time.perf_counter() - start))
results = pd.DataFrame([{"positions": job["positions"], "seed": job["seed"], **accuracy}
                        for job, (_, accuracy) in zip(jobs, trained, strict=True)])  # fmt: skip
generalization = results.groupby("positions", sort=False)[
    list(RETRIEVAL.test_lengths)
].agg(["mean", "min"])
generalization.round(3)

# %% [markdown]
# **Table.** Accuracy on the positions that have a target, at the training length and at two
# and four times it: mean and worst over the seeds. Each run trains for
# {glue:text}`ch11_retrieval_steps` steps; the {glue:text}`ch11_retrieval_runs` runs took
# {glue:text}`ch11_retrieval_seconds` s of wall time, two at a time.

# %% tags=["hide-input", "nbval-ignore-output"]
glue("ch11_retrieval_runs", len(jobs))
fig, ax = plt.subplots(figsize=(4.6, 2.8), layout="constrained")
means = results.groupby("positions", sort=False)[list(RETRIEVAL.test_lengths)].mean()
for kind, row in means.iterrows():
    ax.plot(RETRIEVAL.test_lengths, row.values, marker="o", label=kind)
ax.axvline(RETRIEVAL.train_len, color="0.6", ls=":")
ax.set(xscale="log", xlabel="test sequence length", ylabel="accuracy", ylim=(0, 1.02))
ax.set_xticks(RETRIEVAL.test_lengths, [str(T) for T in RETRIEVAL.test_lengths])
ax.minorticks_off()
ax.legend(fontsize=8, ncols=2)
plt.show()

# %% [markdown]
# **Figure.** Mean accuracy against the test length (log scale); the dotted line is the
# training length. Look at where each line goes right of it.

# %% tags=["nbval-ignore-output"]
mean_at = means.to_dict(orient="index")
longest = RETRIEVAL.test_lengths[-1]
glue("ch11_longest", longest)
glue("ch11_longest_distance", longest - 1)
for kind in KINDS:
    glue(f"ch11_{kind}_at_train", round(mean_at[kind][RETRIEVAL.train_len], 2))
    glue(f"ch11_{kind}_at_longest", round(mean_at[kind][longest], 2))
alibi_kept = mean_at["alibi"][longest] / mean_at["alibi"][RETRIEVAL.train_len]
glue("ch11_alibi_kept", f"{alibi_kept:.0%}")
worst = (
    results.groupby("positions")[list(RETRIEVAL.test_lengths)].min().to_dict("index")
)
best = results.groupby("positions")[list(RETRIEVAL.test_lengths)].max().to_dict("index")
# Margins (scripts/margins_long.py, seeds 0-2, default and scalar numerics), accuracy at
# 32 / 128: ALiBi 0.86-0.91 / 0.56-0.68 (it keeps 64-75%); RoPE 0.79-0.91 / 0.07-0.13;
# learned 0.13-1.00 / 0.02-0.25 (per seed at most 25% kept); sinusoidal at most 0.09 / 0.02;
# none 0.20-0.23 / 0.06-0.07. The best of the others at 128 was 0.3 below ALiBi's worst.
others = [kind for kind in KINDS if kind != "alibi"]
assert all(worst["alibi"][longest] > best[kind][longest] + 0.1 for kind in others)
assert 0.4 < alibi_kept < 0.9  # better than the rest, but not unchanged
assert worst["rope"][RETRIEVAL.train_len] > 0.6 and best["rope"][longest] < 0.3
assert best["sinusoidal"][RETRIEVAL.train_len] < 0.3
learned = results[results["positions"] == "learned"]
assert (learned[longest] < 0.5 * learned[RETRIEVAL.train_len]).all()

# %% [markdown]
# The table answers three questions. **Does the rule get learned at the training length?**
# With RoPE ({glue:text}`ch11_rope_at_train`) and ALiBi ({glue:text}`ch11_alibi_at_train`),
# mostly, in this budget; with sinusoidal positions ({glue:text}`ch11_sinusoidal_at_train`)
# hardly, and without positions ({glue:text}`ch11_none_at_train`) only in part. Learned
# positions ({glue:text}`ch11_learned_at_train` on average) depend on the seed: in our
# margin runs one seed of three learned the rule perfectly and the others hardly at all. The
# first hop, "copy the previous token", is a fixed *relative* offset: RoPE and ALiBi express
# it directly, while absolute positions must learn it separately at every position. **Does it survive four times the length?**
# RoPE falls to {glue:text}`ch11_rope_at_longest`: its rotations at distances never seen in
# training are new inputs to the heads that learned the rule, and a learned table that did
# learn it falls too (to {glue:text}`ch11_learned_at_longest` on average). ALiBi keeps
# {glue:text}`ch11_alibi_kept` of its accuracy ({glue:text}`ch11_alibi_at_longest` at
# length {glue:text}`ch11_longest`), more than any other kind. **So is the claim of the ALiBi
# paper, shown in the source notebook, confirmed?** In part: ALiBi is the kind that
# extrapolates best here, as claimed, but it does not keep its quality unchanged at four times
# the training length. Its penalty, $-m_h \times$ distance, is the same function at every
# length, so the previous-token hop transfers; but the second hop must reach an occurrence up
# to {glue:text}`ch11_longest_distance` positions back, where the penalty of every head but
# the flattest drowns the match. (The ALiBi paper measured perplexity on text, where most of
# what matters is near.) An absolute position beyond the training length, finally, is an
# input the model has never seen: an untrained row of the learned table, a new combination
# of phases of the sinusoidal one.
#
# Why do sinusoidal positions not even learn the rule at the training length? One reason is
# a matter of scale, not of the encoding. The table's entries are sines and cosines, of
# root-mean-square size about 0.7, while the token embeddings start at a standard deviation
# of 0.02 (GPT-2's initialization, which `helpers.gpt.GPT` follows):

# %%
torch.manual_seed(0)
probe = GPT(RETRIEVAL.vocab_size, max(RETRIEVAL.test_lengths), RETRIEVAL.d_model,
            positions="sinusoidal")  # fmt: skip
position_rms = probe.position_embedding.pe.pow(2).mean().sqrt().item()
token_rms = probe.token_embedding.weight.pow(2).mean().sqrt().item()
glue("ch11_position_to_token", round(position_rms / token_rms))
assert position_rms / token_rms > 20  # ~0.71 / ~0.02
print(f"positions / tokens, initial size: {position_rms / token_rms:.0f}")

# %% [markdown]
# The positions are {glue:text}`ch11_position_to_token` times louder than the tokens they
# are added to, so at first the model hears mostly *where* a token is, hardly *which* it is.
# The Transformer paper multiplies its embeddings by $\sqrt{D}$, which narrows the gap; a
# learned table starts at the tokens' own scale. The sinusoidal row of the table above
# measures this initialization as much as the encoding itself.
#
# A learned table cannot even be *read* beyond its rows. The model above was built with a
# table of the longest test length; a table sized for the training data, as one would
# normally build it, refuses the longer sequence with a clear error:

# %%
table = LearnedPositionalEmbedding(64, max_len=RETRIEVAL.train_len)
with expect_error(ValueError):
    table(torch.zeros(1, 2 * RETRIEVAL.train_len, 64))

# %% [markdown]
# ## Exercises
#
# 1. **Merging two partial softmaxes.** Split the keys of one query into two halves, and
#    suppose each half was processed separately (on two devices, say, as FlashDecoding does
#    for long caches), giving two states $(m_1, \ell_1, a_1)$ and $(m_2, \ell_2, a_2)$ as in
#    the online softmax above. Write `merge(state_1, state_2)` that returns the state of all
#    the keys, and check it with `check_softmax_merge(merge)`. States are tuples of tensors
#    `(running_max (..., 1), running_sum (..., 1), accumulator (..., dv))`.
#
# :::{admonition} Solution
# :class: dropdown
# ```python
# def merge(state_1, state_2):
#     (m1, l1, a1), (m2, l2, a2) = state_1, state_2
#     m = torch.maximum(m1, m2)
#     r1, r2 = torch.exp(m1 - m), torch.exp(m2 - m)  # both halves against the common maximum
#     return m, l1 * r1 + l2 * r2, a1 * r1 + a2 * r2
#
# check_softmax_merge(merge)
# ```
# It is the online update with a whole second state in place of one block: each half's sums
# are rescaled to the common maximum before they are added. (A half whose keys are all masked
# has $m = -\infty$; the checker also tries that case.)
# :::
#
# 2. **The cache of a model you know.** Llama-2-13B has 40 layers of 40 heads of width 128
#    and multi-head attention {cite}`touvron2023llama2`. How many GiB does its cache take for
#    a batch of 8 sequences of 4,096 tokens in 16-bit numbers? With 8 key/value heads?
#
# :::{admonition} Solution
# :class: dropdown
# `kv_cache_bytes(40, 40, 128, 4096, batch_size=8) / 2**30` is 25 GiB; with 8 key/value
# heads, five times less, 5 GiB.
# :::
#
# 3. **How deep for a million tokens?** With a window of 4,096, how many layers does a model
#    need before its last token can draw on a million positions? Why might it still not use
#    them?
#
# :::{admonition} Solution
# :class: dropdown
# `receptive_field(4096, L)` is $L \times 4095 + 1 \ge 10^6$ for $L \ge 245$. Reaching a
# position is not using it: what arrives from 200 layers back has been squeezed, hop by hop,
# through every intermediate token's vector, and nothing in training needs to teach the model
# to carry it that far.
# :::


# %% tags=["remove-cell"]
def merge_solution(state_1, state_2):
    (m1, l1, a1), (m2, l2, a2) = state_1, state_2
    m = torch.maximum(m1, m2)
    r1, r2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return m, l1 * r1 + l2 * r2, a1 * r1 + a2 * r2


print(check_softmax_merge(merge_solution))
assert kv_cache_bytes(40, 40, 128, 4096, batch_size=8) == 25 * 2**30
assert kv_cache_bytes(40, 8, 128, 4096, batch_size=8) == 5 * 2**30
assert receptive_field(4096, 245) >= 10**6 > receptive_field(4096, 244)
