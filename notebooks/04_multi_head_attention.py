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
# # Multi-head attention
#
# One attention head gives every query one set of weights over the keys: one question asked
# of the sequence, one weighted average as the answer. A layer of a Transformer asks several
# questions at once. *Multi-head attention* runs $H$ attention heads side by side, each in its
# own low-dimensional projection of the inputs, and mixes their answers with one output
# projection {cite}`vaswani2017attention`.
#
# This chapter builds multi-head attention twice, once as a list of separate heads (the way
# most first implementations look) and once fused into a few big matrix products (the way
# every library does it), proves the two equal, and then checks the book's canonical module
# against both and against `torch.nn.MultiheadAttention`. Along the way: the shape of every
# tensor at every reshape, attention maps per head, self- versus cross-attention, the
# symmetries that make positional encodings necessary (chapter 5), why a `Conv1d` with
# `kernel_size=1` is a linear layer, how many parameters the layer has, and what its output
# looks like through the lens of singular values.

# %% tags=["hide-cell"]
# Setup: on Colab, install the book's helpers; everywhere, import, seed and pick a device.
import sys

# The book's package at the book's version (a release tag, kept in step by a test).
HELPERS = "attention-book-helpers @ git+https://github.com/attention-book/attention-book@v0.1.0"
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
import math

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from helpers import checks
from helpers.analysis import count_parameters, stable_rank
from helpers.attention import (
    MultiHeadAttention,
    PerHeadMultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from helpers.plotting import heatmap, to_numpy


def error_of(call) -> str:
    """Run ``call()``, which must fail; return its error's type and first line."""
    try:
        call()
    except (RuntimeError, ValueError) as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    raise AssertionError("expected this call to fail")


# %% [markdown]
# ## The formula
#
# Queries $Q \in \mathbb{R}^{T_q \times D}$, keys $K \in \mathbb{R}^{T_k \times D}$ and values
# $V \in \mathbb{R}^{T_k \times D}$ all have the model width $D$ (`d_model`). Head $h$
# projects each of them to a smaller width $d_\text{head} = D / H$ with its own matrices and
# runs the scaled dot-product attention of chapter 3 there:
#
# $$
# \text{head}_h = \operatorname{Attention}\left(Q W^Q_h,\; K W^K_h,\; V W^V_h\right)
# \in \mathbb{R}^{T_q \times d_\text{head}},
# \qquad W^Q_h, W^K_h, W^V_h \in \mathbb{R}^{D \times d_\text{head}}.
# $$
#
# The $H$ outputs are concatenated side by side, which gives width $H d_\text{head} = D$
# again, and one output matrix mixes them:
#
# $$
# \operatorname{MultiHead}(Q, K, V) = \left[\text{head}_1, \ldots, \text{head}_H\right] W^O,
# \qquad W^O \in \mathbb{R}^{D \times D}.
# $$
#
# $H$ must divide $D$. Splitting the width instead of giving every head the full width keeps
# the cost of $H$ heads equal to the cost of one head of width $D$; a later section counts
# the parameters. In code a linear layer stores its matrix as `weight` of shape
# (out, in) and computes `x @ weight.T`, so $W^Q_h$ is the transpose of a
# $(d_\text{head}, D)$ weight.

# %% [markdown]
# ## The per-head view: a list of heads
#
# The most literal reading of the formula is a module per head, kept in an `nn.ModuleList`,
# as sources written for teaching often do. Each head owns three small linear layers and calls
# the `scaled_dot_product_attention` of chapter 3 (queries first, then keys: the order
# matters, see the pitfall in the section on cross-attention).


# %%
class Head(nn.Module):
    """One attention head: its own projections D -> d_head for queries, keys, values."""

    def __init__(self, d_model: int, d_head: int):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_head, bias=False)
        self.w_k = nn.Linear(d_model, d_head, bias=False)
        self.w_v = nn.Linear(d_model, d_head, bias=False)

    def forward(self, query, key, value, mask=None):
        # -> output (B, Tq, d_head), weights (B, Tq, Tk)
        return scaled_dot_product_attention(
            self.w_q(query), self.w_k(key), self.w_v(value), mask
        )


class PerHeadMHA(nn.Module):
    """Multi-head attention as H separate heads, concatenated, then mixed by W_o."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        d_head = d_model // num_heads
        self.heads = nn.ModuleList(Head(d_model, d_head) for _ in range(num_heads))
        self.w_o = nn.Linear(num_heads * d_head, d_model, bias=False)

    def forward(self, query, key, value, mask=None):
        results = [head(query, key, value, mask) for head in self.heads]
        # H outputs (B, Tq, d_head) side by side -> (B, Tq, D)
        concat = torch.cat([output for output, _ in results], dim=-1)
        # H weights (B, Tq, Tk) stacked -> (B, H, Tq, Tk)
        weights = torch.stack([weights for _, weights in results], dim=1)
        return self.w_o(concat), weights


# %% [markdown]
# A small example to carry through the chapter: a batch of $B=2$ sequences, model width
# $D=12$ split into $H=3$ heads of width 4. For now it is self-attention: the queries, keys
# and values are all the same sequence `x` of length 6.

# %%
batch_size, seq_len, d_model, num_heads = 2, 6, 12, 3
d_head = d_model // num_heads
generator = torch.Generator().manual_seed(0)
x = torch.randn(batch_size, seq_len, d_model, generator=generator)

torch.manual_seed(0)
per_head = PerHeadMHA(d_model, num_heads)
out_per_head, weights_per_head = per_head(x, x, x)
assert out_per_head.shape == (batch_size, seq_len, d_model)
assert weights_per_head.shape == (batch_size, num_heads, seq_len, seq_len)
out_per_head.shape, weights_per_head.shape

# %% [markdown]
# ## The fused view: one matrix product, then reshape into heads
#
# Looping over heads launches $3H$ small matrix products where three big ones would do. The
# $H$ query matrices $W^Q_h$ are just column blocks of one $D \times D$ matrix
# $W^Q = [W^Q_1, \ldots, W^Q_H]$, so $Q W^Q$ computes every head's queries at once, and head
# $h$'s queries are the columns $h\,d_\text{head}$ to $(h+1)\,d_\text{head}$ of the result.
# The same goes for keys and values, and the three matrices can be stacked into one weight of
# shape $(3D, D)$. What remains is bookkeeping: reshape so that the heads become a batch
# dimension, let one batched attention call handle every head, and undo the reshape.
#
# Step by step, with the shape after every step checked:

# %%
w_qkv = torch.randn(3 * d_model, d_model, generator=generator) / math.sqrt(d_model)
# three (D, D) blocks; a weight's rows are output features
w_q, w_k, w_v = w_qkv.split(d_model, dim=0)

steps = []


def record(step: str, tensor: torch.Tensor, expected: tuple) -> torch.Tensor:
    assert tensor.shape == expected, (step, tuple(tensor.shape), expected)
    steps.append({"step": step, "shape": str(tuple(tensor.shape))})
    return tensor


q = record("project: x @ W_q.T", x @ w_q.T, (batch_size, seq_len, d_model))
q = record(
    "split the width: view(B, T, H, d_head)",
    q.view(batch_size, seq_len, num_heads, d_head),
    (batch_size, seq_len, num_heads, d_head),
)
q = record(
    "heads to the front: transpose(1, 2)",
    q.transpose(1, 2),
    (batch_size, num_heads, seq_len, d_head),
)

# %% [markdown]
# Keys and values go through the same three steps. Then one call to scaled dot-product
# attention treats $(B, H)$ as batch dimensions, and the heads are merged back:

# %%
k = (x @ w_k.T).view(batch_size, seq_len, num_heads, d_head).transpose(1, 2)
v = (x @ w_v.T).view(batch_size, seq_len, num_heads, d_head).transpose(1, 2)
record("keys and values, same steps", k, (batch_size, num_heads, seq_len, d_head))
heads, attn_weights = scaled_dot_product_attention(q, k, v)
record("attention weights", attn_weights, (batch_size, num_heads, seq_len, seq_len))
record("attention output per head", heads, (batch_size, num_heads, seq_len, d_head))
heads = record(
    "positions to the front: transpose(1, 2)",
    heads.transpose(1, 2),
    (batch_size, seq_len, num_heads, d_head),
)
concat = record(
    "concatenate heads: reshape(B, T, D)",
    heads.reshape(batch_size, seq_len, d_model),
    (batch_size, seq_len, d_model),
)
pd.DataFrame(steps)

# %% [markdown]
# Two details deserve a second look. The split is `view(B, T, H, d_head)` followed by a
# transpose, not a direct `view(B, H, T, d_head)`: the direct view has the right shape but
# cuts the numbers into consecutive pieces in memory order, so "head 0" would receive *all*
# the features of the first few positions instead of the first $d_\text{head}$ features of
# every position (exercise 1 makes this concrete). And after the transpose the tensor is no
# longer contiguous in memory, which is why merging uses `reshape` (it copies when it must)
# where `view` raises an error:

# %%
assert not heads.is_contiguous()
print(error_of(lambda: heads.view(batch_size, seq_len, d_model)))

# %% [markdown]
# Packaged as a module, the fused view is a dozen lines. The three projection matrices live in
# one `nn.Linear(D, 3D)`, in the row order $[W^Q; W^K; W^V]$; for cross-attention the query,
# key and value inputs differ, so the weight is split into its three blocks and each block is
# applied to its own input.


# %%
class FusedMHA(nn.Module):
    """Multi-head attention with one (3D, D) projection and a reshape into heads."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        # one weight of shape (3D, D), rows [W_q; W_k; W_v]
        self.w_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)

    def split_heads(self, x):  # (B, T, D) -> (B, T, H, d_head) -> (B, H, T, d_head)
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.d_head).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        w_q, w_k, w_v = self.w_qkv.weight.chunk(3, dim=0)
        q = self.split_heads(F.linear(query, w_q))  # (B, H, Tq, d_head)
        k = self.split_heads(F.linear(key, w_k))  # (B, H, Tk, d_head)
        v = self.split_heads(F.linear(value, w_v))  # (B, H, Tk, d_head)
        # one call for every head: (B, H) are batch dimensions -> (B, H, Tq, d_head)
        heads, weights = scaled_dot_product_attention(q, k, v, mask)
        concat = heads.transpose(1, 2).flatten(2)  # (B, Tq, H, d_head) -> (B, Tq, D)
        return self.w_o(concat), weights


# %% [markdown]
# ## The two views compute the same function
#
# Claim: with the right weights, `FusedMHA` and `PerHeadMHA` agree exactly. The mapping is
# the block structure above: head $h$'s query weight, of shape $(d_\text{head}, D)$, is rows
# $h\,d_\text{head}$ to $(h+1)\,d_\text{head}$ of the fused $W^Q$ block, and likewise for keys
# and values; $W^O$ is shared as is.


# %%
@torch.no_grad()
def fuse(per_head: PerHeadMHA, fused: FusedMHA) -> FusedMHA:
    """Copy a PerHeadMHA's weights into a FusedMHA of the same size."""
    for block, name in enumerate(["w_q", "w_k", "w_v"]):
        # H blocks of shape (d_head, D), stacked into (D, D)
        stacked = torch.cat([getattr(head, name).weight for head in per_head.heads])
        fused.w_qkv.weight[block * d_model : (block + 1) * d_model] = stacked
    fused.w_o.weight.copy_(per_head.w_o.weight)
    return fused


fused = fuse(per_head, FusedMHA(d_model, num_heads))
out_fused, weights_fused = fused(x, x, x)
fused_vs_per_head = (out_fused - out_per_head).abs().max().item()
assert torch.allclose(out_fused, out_per_head, atol=1e-6)
assert torch.allclose(weights_fused, weights_per_head, atol=1e-6)
print("the two views agree within 1e-6:", fused_vs_per_head < 1e-6)

# %% [markdown]
# What difference there is (below $10^{-6}$; its exact size depends on the CPU) is
# floating-point rounding: the two views add the same products in a different order. They are one function written
# two ways, and the fused one is what runs fast.

# %% [markdown]
# ## The canonical module: `helpers.attention.MultiHeadAttention`
#
# The rest of the book uses the package's version. It is the fused view plus what a library
# needs: input validation (one line here; every check of the package lives in
# `helpers/_validate.py`, with messages that say how to fix the call), the book's mask
# convention (boolean, `True` = may attend, 2-D, 3-D or 4-D), attention dropout, optional
# biases, a single matrix product when `query is key is value`, and PyTorch's fused
# `F.scaled_dot_product_attention` kernel unless the weights are asked for with
# `return_attention=True`. Copying weights from PyTorch's own layer (`load_from_torch`, used
# below) is in `helpers.interop`.

# %%
helpers.show_source(MultiHeadAttention)

# %% [markdown]
# Its `qkv_proj` has exactly the layout of `FusedMHA.w_qkv`, so copying the two weights over
# must give the same outputs and the same attention weights, with and without the fast path:

# %%
mha = MultiHeadAttention(d_model, num_heads)
with torch.no_grad():
    mha.qkv_proj.weight.copy_(fused.w_qkv.weight)
    mha.out_proj.weight.copy_(fused.w_o.weight)

out_package, weights_package = mha(x, x, x, return_attention=True)
assert torch.allclose(out_package, out_fused, atol=1e-6)
assert torch.allclose(weights_package, weights_fused, atol=1e-6)
# without return_attention the module runs F.scaled_dot_product_attention instead
assert torch.allclose(mha(x, x, x), out_fused, atol=1e-6)

# %% [markdown]
# The package also keeps a per-head version, `PerHeadMultiHeadAttention`, for when a head as a
# module of its own is handy; its `fused()` method performs the weight mapping of `fuse` above.
# `test_per_head_modules_equal_fused` in `tests/test_interop.py` checks the two against each
# other on random shapes.

# %%
torch.manual_seed(1)
package_per_head = PerHeadMultiHeadAttention(d_model, num_heads)
assert torch.allclose(
    package_per_head(x, x, x), package_per_head.fused()(x, x, x), atol=1e-6
)

# %% [markdown]
# ## Against `torch.nn.MultiheadAttention`
#
# PyTorch ships its own layer. Its parameters map onto ours one to one:
#
# | ours (`MultiHeadAttention`) | `torch.nn.MultiheadAttention` | shape |
# | --- | --- | --- |
# | `qkv_proj.weight`, rows $[W^Q; W^K; W^V]$ | `in_proj_weight`, same rows | $(3D, D)$ |
# | `qkv_proj.bias` (with `bias=True`) | `in_proj_bias` | $(3D,)$ |
# | `out_proj.weight` | `out_proj.weight` | $(D, D)$ |
# | `out_proj.bias` (with `bias=True`) | `out_proj.bias` | $(D,)$ |
#
# Three more differences matter when comparing them. PyTorch's layer expects
# `(T, B, D)` inputs unless built with `batch_first=True`. Its boolean `attn_mask` means the
# opposite of ours, `True` = *may not* attend (chapter 2), so our mask is passed as `~mask`.
# And the weights it returns are averaged over the heads unless
# `average_attn_weights=False`. With biases and a causal mask, to test all of it at once:

# %%
torch.manual_seed(2)
torch_mha = nn.MultiheadAttention(d_model, num_heads, bias=True, batch_first=True)
ours = MultiHeadAttention(d_model, num_heads, bias=True)
with torch.no_grad():
    ours.qkv_proj.weight.copy_(torch_mha.in_proj_weight)
    ours.qkv_proj.bias.copy_(torch_mha.in_proj_bias)
    ours.out_proj.weight.copy_(torch_mha.out_proj.weight)
    ours.out_proj.bias.copy_(torch_mha.out_proj.bias)

mask = causal_mask(seq_len)  # True = may attend
out_ours, weights_ours = ours(x, x, x, mask=mask, return_attention=True)
out_torch, weights_torch = torch_mha(
    x, x, x, attn_mask=~mask, average_attn_weights=False
)
_, mean_weights_torch = torch_mha(x, x, x, attn_mask=~mask)  # averaged over heads
torch_vs_ours = (out_torch - out_ours).abs().max().item()
assert torch.allclose(out_ours, out_torch, atol=1e-6)
assert torch.allclose(weights_ours, weights_torch, atol=1e-6)
assert torch.allclose(weights_ours.mean(dim=1), mean_weights_torch, atol=1e-6)
helpers.glue("ch4_torch_vs_ours", float(f"{torch_vs_ours:.0e}"))
print("agrees with torch.nn.MultiheadAttention within 1e-6:", torch_vs_ours < 1e-6)

# %% [markdown]
# The outputs agree within the assert's tolerance of $10^{-6}$ (largest difference
# {glue:text}`ch4_torch_vs_ours:.1g`), and so do the per-head and the head-averaged weights.
# `MultiHeadAttention.load_from_torch(torch_mha)` does the copying above in one call, and
# `test_mha_matches_torch_multihead_attention` in `tests/test_interop.py` repeats this
# comparison on random shapes.

# %% [markdown]
# ## Why several heads: two lookups at once
#
# For each query, one head returns *one* weighted average of the values. That is a limit, and
# a small hand-built example shows it. Four tokens each carry an *address* (a one-hot code in
# their first 4 features) and a *content* (4 random features). One query asks for the
# contents of tokens 1 and 3. Two heads of width 4 can split the job: head 0 looks for
# address 1, head 1 for address 3, both read out the content, and the concatenation holds
# both contents side by side. One head of width 8 can only put half of its weight on each
# token and return the *average* of the two contents, from which neither can be recovered,
# and swapping the two contents does not even change its output. The weights are set by
# hand, with a large factor `sharp` in the queries so that the softmax is nearly one-hot.

# %%
addresses = torch.eye(4)
contents = torch.randn(4, 4, generator=generator)
memory = torch.cat([addresses, contents], dim=-1)[None]  # (1, 4 tokens, 8 features)
request = torch.tensor([[[0.0, 1, 0, 1, 0, 0, 0, 0]]])  # one query: tokens 1 and 3
sharp = 40.0


def two_lookup_layer(num_heads: int) -> MultiHeadAttention:
    """Hand-set weights; rows of each block are output features, head h owns a slice."""
    w_q, w_k, w_v = torch.zeros(3, 8, 8)
    if num_heads == 2:  # head 0 uses rows 0-3 of each block, head 1 rows 4-7
        w_q[1, 1], w_q[4 + 3, 3] = sharp, sharp  # head 0: address 1, head 1: address 3
        w_k[:4, :4], w_k[4:, :4] = torch.eye(4), torch.eye(4)  # keys = addresses
        w_v[:4, 4:], w_v[4:, 4:] = torch.eye(4), torch.eye(4)  # values = contents
    else:  # one head of width 8: looks for both addresses at once
        w_q[:4, :4] = sharp * torch.eye(4)
        w_k[:4, :4] = torch.eye(4)
        w_v[4:, 4:] = torch.eye(4)
    layer = MultiHeadAttention(8, num_heads)
    with torch.no_grad():
        layer.qkv_proj.weight.copy_(torch.cat([w_q, w_k, w_v]))
        layer.out_proj.weight.copy_(torch.eye(8))
    return layer


# %%
swapped = memory.clone()
# exchange the contents of tokens 1 and 3, keep their addresses
swapped[0, [1, 3], 4:] = memory[0, [3, 1], 4:]
with torch.no_grad():
    one_head, two_heads = two_lookup_layer(1), two_lookup_layer(2)
    out_one, weights_one = one_head(request, memory, memory, return_attention=True)
    out_two, weights_two = two_heads(request, memory, memory, return_attention=True)
    out_one_swapped = one_head(request, swapped, swapped)
    out_two_swapped = two_heads(request, swapped, swapped)

both_contents = torch.cat([contents[1], contents[3]])
assert torch.allclose(out_two[0, 0], both_contents, atol=1e-3)
assert torch.allclose(out_one[0, 0, 4:], (contents[1] + contents[3]) / 2, atol=1e-3)
assert torch.allclose(out_one, out_one_swapped, atol=1e-6)
assert not torch.allclose(out_two, out_two_swapped, atol=1e-2)
pd.DataFrame(
    {
        "one head": weights_one[0, 0, 0].numpy(),
        "two heads: head 0": weights_two[0, 0, 0].numpy(),
        "two heads: head 1": weights_two[0, 1, 0].numpy(),
    },
    index=pd.Index(range(4), name="token"),
).round(3)

# %% [markdown]
# The table shows where each head puts its weight for the one query: the single head splits
# it between tokens 1 and 3, each of the two heads picks one of them. The asserts above check
# the consequences: the two-head layer returns both contents exactly, the one-head layer
# their average, unchanged when the contents are swapped. Trained models learn such division
# of labour on their own; the next figure shows that even untrained heads attend differently.

# %% [markdown]
# ## Attention maps, one per head
#
# `return_attention=True` returns the weights of every head, shape $(B, H, T_q, T_k)$. To see
# what different heads do, give the layer a sentence. Each word gets a fixed random embedding
# (the same word, the same vector), scaled up so that the attention at initialization is not
# almost uniform; no training happens here, so what the heads "look for" is random, but each
# head looks for something different.

# %%
text = "the cat sat on the mat and the dog sat on the cat"
sentence = text.split()
vocabulary = sorted(set(sentence))
word_vectors = 3.0 * torch.randn(
    len(vocabulary), 32, generator=torch.Generator().manual_seed(3)
)
tokens = word_vectors[[vocabulary.index(word) for word in sentence]][None]  # (1, T, 32)

torch.manual_seed(3)
map_mha = MultiHeadAttention(d_model=32, num_heads=4)
with torch.no_grad():
    _, sentence_weights = map_mha(tokens, tokens, tokens, return_attention=True)
assert sentence_weights.shape == (1, 4, len(sentence), len(sentence))

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 4, figsize=(12, 3.4), sharey=True)
for head, ax in enumerate(axes):
    heatmap(
        sentence_weights[0, head],
        ax=ax,
        title=f"head {head}",
        colorbar=False,
        vmin=0,
        vmax=1,
    )
    ax.set_xticks(range(len(sentence)), sentence, rotation=90)
    ax.set_yticks(range(len(sentence)), sentence)
    ax.set_xlabel("key")
    ax.set_ylabel("query" if head == 0 else "")
fig.tight_layout()

# %% [markdown]
# **Figure.** Attention weights of the four heads for one sentence (rows: queries,
# columns: keys; brighter = more weight). Each head has its own pattern. Within a head, every
# row of "the" is identical, and so are the columns of "the": the layer sees *which* word sits
# at a position but not *where*, so two copies of a word are indistinguishable to it.

# %% [markdown]
# The last sentence of the caption is a claim, so here is its check: in every head, the
# rows of the occurrences of "the" are equal, and so are their columns.

# %%
the = [i for i, word in enumerate(sentence) if word == "the"]
for head in range(4):
    rows = sentence_weights[0, head, the]
    columns = sentence_weights[0, head, :, the]
    assert torch.allclose(rows, rows[:1].expand_as(rows), atol=1e-6)
    assert torch.allclose(columns, columns[:, :1].expand_as(columns), atol=1e-6)

# %% [markdown]
# The same weights as an interactive chart: pick a head in the menu below the chart and hover
# over a cell to read the query word, the key word and the weight.

# %% tags=["hide-input"]
import altair as alt

attention_records = pd.DataFrame(
    [
        {
            "head": head,
            "query": f"{i:2d} {query_word}",
            "key": f"{j:2d} {key_word}",
            "weight": round(float(sentence_weights[0, head, i, j]), 3),
        }
        for head in range(4)
        for i, query_word in enumerate(sentence)
        for j, key_word in enumerate(sentence)
    ]
)
head_choice = alt.param(
    name="head", value=0, bind=alt.binding_select(options=[0, 1, 2, 3], name="head ")
)
(
    alt.Chart(attention_records)
    .mark_rect()
    .encode(
        x=alt.X("key:O", sort=None, title="key"),
        y=alt.Y("query:O", sort=None, title="query"),
        color=alt.Color("weight:Q", scale=alt.Scale(domain=[0, 1], scheme="viridis")),
        tooltip=["head:O", "query:N", "key:N", "weight:Q"],
    )
    .add_params(head_choice)
    .transform_filter(alt.datum.head == head_choice)
    .properties(width=320, height=320)
)

# %% [markdown]
# **Figure.** Interactive version of the figure above, one head at a time (the menu picks
# it). Hovering shows each weight; the numbers before the words are positions, so the rows of
# the occurrences of "the" can be compared cell by cell.

# %% [markdown]
# ## Self-attention and cross-attention
#
# Nothing in the layer requires queries and keys to come from the same sequence. In
# *self-attention* they do: $Q = K = V = X$, and $T_q = T_k$. In *cross-attention* the
# queries come from one sequence (a decoder's, say, of length $T_q$) and the keys and values
# from another (an encoder's output, of length $T_k$); chapter 9 builds an encoder-decoder
# with it. Only the lengths of keys and values must agree. The output has one row per
# *query*, and the weights are $T_q \times T_k$:

# %%
decoder_len, encoder_len = 4, 9
decoder_states = torch.randn(batch_size, decoder_len, d_model, generator=generator)
encoder_states = torch.randn(batch_size, encoder_len, d_model, generator=generator)
lengths = torch.tensor([9, 6])  # the second encoder sequence has 3 padding positions
key_mask = padding_mask(lengths)  # (B, 1, 1, Tk): shared by every head and every query

cross_out, cross_weights = mha(
    decoder_states, encoder_states, encoder_states, mask=key_mask, return_attention=True
)
assert cross_out.shape == (batch_size, decoder_len, d_model)
assert cross_weights.shape == (batch_size, num_heads, decoder_len, encoder_len)
assert torch.allclose(
    cross_weights.sum(dim=-1), torch.ones(batch_size, num_heads, decoder_len)
)
assert (cross_weights[1, :, :, 6:] == 0).all()  # padding gets no weight
cross_out.shape, cross_weights.shape

# %% [markdown]
# ```{admonition} Pitfall: queries and keys swapped in a per-head module (source 003)
# :class: warning
# One of the source texts writes its per-head module as
# `scaled_dot_product_attention(k, q, v, mask)`, that is, keys in the place of queries (its
# attention function also uses undefined names, which we correct just enough to run it). In
# self-attention this runs and returns tensors of the right shape, but the softmax then
# normalizes each *key's* scores over the queries: the output is not attention. In
# cross-attention the symptom is louder, the weights come out $T_k \times T_q$ and the product
# with the $T_k$ values fails. The fix is the argument order; `Head` above and the package's
# `SingleHeadAttention` call `(query, key, value)`. The test
# `test_per_head_cross_attention` in `tests/test_attention.py` pins it: a per-head
# layer on $T_q \ne T_k$ returns weights of shape $(B, H, T_q, T_k)$ whose rows sum to one.
# ```


# %%
def swapped_head_attention(q, k, v):
    """Source 003's attention as its SelfAttention calls it: q and k swapped."""
    scores = torch.bmm(k, q.transpose(1, 2))  # (B, Tk, Tq): one row per KEY
    # softmax along the last axis, which here runs over the queries
    weights = (scores / q.shape[-1] ** 0.5).softmax(dim=-1)
    return torch.bmm(weights, v), weights


head = Head(d_model, d_head)
q_self, k_self, v_self = head.w_q(x), head.w_k(x), head.w_v(x)
swapped_out, _ = swapped_head_attention(q_self, k_self, v_self)
correct_out, _ = scaled_dot_product_attention(q_self, k_self, v_self)
swapped_gap = (swapped_out - correct_out).abs().max().item()
assert swapped_out.shape == correct_out.shape and swapped_gap > 0.1

q_cross = head.w_q(decoder_states)
k_cross, v_cross = head.w_k(encoder_states), head.w_v(encoder_states)
print(
    "cross-attention:",
    error_of(lambda: swapped_head_attention(q_cross, k_cross, v_cross)),
)
print(f"self-attention: right shape, but off by up to {swapped_gap:.2f}")

# %% [markdown]
# ## Permutations: attention sees a set, not a sequence
#
# Reorder the queries with a permutation matrix $P$ and the output rows come out reordered
# the same way; reorder the keys and values together and the output does not change at all:
#
# $$
# \operatorname{MultiHead}(PQ, K, V) = P\,\operatorname{MultiHead}(Q, K, V),
# \qquad
# \operatorname{MultiHead}(Q, PK, PV) = \operatorname{MultiHead}(Q, K, V).
# $$
#
# The first is *equivariance* in the queries: every query is processed on its own, by the
# same weights. The second is *invariance* in the key-value pairs: the softmax-weighted sum
# runs over a set, and a sum does not care about order. Both are easy to check:

# %%
query_order = torch.randperm(decoder_len, generator=generator)
key_order = torch.randperm(encoder_len, generator=generator)
reference = mha(decoder_states, encoder_states, encoder_states)

permuted_queries = mha(decoder_states[:, query_order], encoder_states, encoder_states)
permuted_keys = mha(
    decoder_states, encoder_states[:, key_order], encoder_states[:, key_order]
)
assert torch.allclose(permuted_queries, reference[:, query_order], atol=1e-6)
assert torch.allclose(permuted_keys, reference, atol=1e-6)

# %% [markdown]
# For self-attention, where the same $X$ provides queries, keys and values, the two combine:
# $\operatorname{MultiHead}(PX, PX, PX) = P \operatorname{MultiHead}(X, X, X)$. A layer that
# only sees $X$ cannot tell "dog bites man" from "man bites dog": the two sentences get the
# same three output vectors, in a different order.

# %%
dog, bites, man = torch.randn(3, d_model, generator=generator)
dog_bites_man = torch.stack([dog, bites, man])[None]
man_bites_dog = torch.stack([man, bites, dog])[None]
out_dbm = mha(dog_bites_man, dog_bites_man, dog_bites_man)
out_mbd = mha(man_bites_dog, man_bites_dog, man_bites_dog)
assert torch.allclose(out_mbd, out_dbm[:, [2, 1, 0]], atol=1e-6)

# %% [markdown]
# This is why Transformers need *positional encodings*: something in the input that says
# where each element sits, which chapter 5 adds. Without it the model treats its input as a
# set, which is exactly right for some data (points in a cloud, items in a basket) and wrong
# for language.
#
# ```{admonition} Pitfall: a mask is part of the input, and must be permuted too
# :class: warning
# Source 000 demonstrates these symmetries and builds a causal mask for the demonstration,
# but leaves it unused (a comment hints at permuting it). With a mask, the statements above hold only if the mask's
# rows move with the queries and its columns with the keys: `mask[query_order][:, key_order]`.
# Permute the inputs but keep a causal mask fixed and the outputs change, because the mask
# itself encodes positions: causal attention is *not* blind to order. The cell below shows
# both; `test_permutation_symmetries_with_mask` in `tests/test_attention.py` pins
# them.
# ```

# %%
order = torch.randperm(seq_len, generator=generator)
causal = causal_mask(seq_len)
masked = mha(x, x, x, mask=causal)
fixed_mask = mha(x[:, order], x[:, order], x[:, order], mask=causal)
moved_mask = mha(x[:, order], x[:, order], x[:, order], mask=causal[order][:, order])
fixed_mask_gap = (fixed_mask - masked[:, order]).abs().max().item()
assert fixed_mask_gap > 0.01
assert torch.allclose(moved_mask, masked[:, order], atol=1e-6)
print(f"mask kept in place: off by up to {fixed_mask_gap:.2f}; mask permuted: equal")

# %% [markdown]
# ## A `Conv1d` with `kernel_size=1` is a linear layer
#
# Source 004 computes its queries, keys and values with `nn.Conv1d(..., kernel_size=1)` on
# channels-first tensors of shape $(B, C, T)$. A convolution whose kernel covers one position
# applies the same $C_\text{out} \times C_\text{in}$ matrix at every position, which is exactly
# what `nn.Linear` does to a $(B, T, C)$ tensor. The two store the same numbers, the
# convolution with a trailing kernel dimension of size 1:

# %%
conv = nn.Conv1d(in_channels=8, out_channels=12, kernel_size=1)
linear = nn.Linear(in_features=8, out_features=12)
with torch.no_grad():
    linear.weight.copy_(conv.weight.squeeze(-1))  # (12, 8, 1) -> (12, 8)
    linear.bias.copy_(conv.bias)

channels_first = torch.randn(16, 8, 50, generator=generator)  # (B, C, T)
by_conv = conv(channels_first)  # (B, 12, T)
by_linear = linear(channels_first.transpose(1, 2)).transpose(1, 2)  # via (B, T, C)
assert torch.allclose(by_conv, by_linear, atol=1e-6)
conv.weight.shape, linear.weight.shape

# %% [markdown]
# So source 004's attention layer is one attention head in disguise. Written channels-first
# with `Conv1d`, and without the $1/\sqrt{d}$ scaling (chapter 3 shows why that scaling
# matters), it equals our scaled dot-product attention with `scale=1` on the transposed input:


# %%
def conv_attention(x, conv_q, conv_k, conv_v):
    """Source 004's layer: x (B, C, T) -> (B, C_out, T), unscaled attention."""
    queries, keys, values = conv_q(x), conv_k(x), conv_v(x)  # (B, C', T)
    weights = queries.transpose(1, 2).matmul(keys).softmax(dim=2)  # (B, T, T)
    return weights.matmul(values.transpose(1, 2)).transpose(1, 2)


conv_q, conv_k, conv_v = (
    nn.Conv1d(8, n, kernel_size=1, bias=False) for n in (6, 6, 10)
)
as_linear = [layer.weight.squeeze(-1) for layer in (conv_q, conv_k, conv_v)]
tokens_last = channels_first.transpose(1, 2)  # (B, T, C)
head_out, _ = scaled_dot_product_attention(
    *(tokens_last @ weight.T for weight in as_linear), scale=1.0
)
assert torch.allclose(
    conv_attention(channels_first, conv_q, conv_k, conv_v),
    head_out.transpose(1, 2),
    atol=1e-5,
)

# %% [markdown]
# The choice between the two is about which axis holds the features. The rest of the book
# keeps the features last, $(B, T, D)$, where `nn.Linear`, `nn.LayerNorm` and
# `torch.nn.MultiheadAttention` expect them.

# %% [markdown]
# ## Counting parameters
#
# Each of $W^Q, W^K, W^V, W^O$ is $D \times D$, so multi-head attention has
#
# $$
# 4D^2 \text{ weights} \quad (+\,4D \text{ biases}),
# $$
#
# whatever the number of heads: more heads means narrower heads, not more weights.
#
# Not every implementation splits the width. Source 001 gives each head projections to the
# full width $D$ (with biases) and an output layer from $HD$ features back to $D$. Its heads,
# ported with the masks left out, look like this; note that keys and values are set by a
# separate `init_keys` call before `forward` sees the queries:


# %%
class Source001Head(nn.Module):
    """Source 001's attention head, trimmed (no mask): projections to the full width."""

    def __init__(self, hidden_dim, input_dim=None, proj_values=False):
        super().__init__()
        self.d_k, self.proj_values = hidden_dim, proj_values
        input_dim = hidden_dim if input_dim is None else input_dim
        self.linear_query = nn.Linear(input_dim, hidden_dim)
        self.linear_key = nn.Linear(input_dim, hidden_dim)
        self.linear_value = nn.Linear(input_dim, hidden_dim)

    def init_keys(self, keys):
        self.proj_keys = self.linear_key(keys)
        self.values = self.linear_value(keys) if self.proj_values else keys

    def forward(self, query):
        proj_query = self.linear_query(query)
        scores = proj_query @ self.proj_keys.transpose(1, 2) / math.sqrt(self.d_k)
        return scores.softmax(dim=-1) @ self.values


class Source001MHA(nn.Module):
    """Source 001's multi-head module: H full-width heads, then (H * D -> D)."""

    def __init__(self, n_heads, d_model, input_dim=None, proj_values=True):
        super().__init__()
        self.linear_out = nn.Linear(n_heads * d_model, d_model)
        self.attn_heads = nn.ModuleList(
            Source001Head(d_model, input_dim, proj_values) for _ in range(n_heads)
        )

    def init_keys(self, keys):
        for head in self.attn_heads:
            head.init_keys(keys)

    def forward(self, query):
        return self.linear_out(
            torch.cat([head(query) for head in self.attn_heads], dim=-1)
        )


# %% [markdown]
# The table checks the formula against the package's fused and per-head modules and against
# `torch.nn.MultiheadAttention`, with and without biases, and counts source 001's design
# next to them (it always has biases, so compare it with the $4D^2 + 4D$ rows).


# %%
rows = []
for d, h in [(64, 1), (64, 4), (64, 16), (512, 8)]:
    for bias in (False, True):
        formula = 4 * d * d + (4 * d if bias else 0)
        counts = {
            "ours": count_parameters(MultiHeadAttention(d, h, bias=bias)),
            "per head": count_parameters(PerHeadMultiHeadAttention(d, h, bias=bias)),
            "torch": count_parameters(nn.MultiheadAttention(d, h, bias=bias)),
        }
        assert all(value == formula for value in counts.values()), (d, h, bias, counts)
        assert checks.mha_parameter_count(d, h, bias) == formula
        wide = count_parameters(Source001MHA(h, d)) if bias else None
        rows.append({"D": d, "H": h, "bias": bias, "4D² (+4D)": formula, **counts})
        rows[-1]["source 001"] = wide
parameter_table = pd.DataFrame(rows).astype({"source 001": "Int64"})
parameter_table

# %% [markdown]
# Every count of the standard layer matches the formula. Source 001's design equals it for a
# single head, and with $H$ heads costs $3H(D^2 + D) + HD^2 + D$ parameters, about $H$ times
# as much: {glue:text}`ch4_wide_ratio_16:.1f` times for $D=64$, $H=16$. That is a legitimate
# design choice, not a bug, but it is not the layer of the Transformer paper, and these heads
# are not the $d_\text{head} = D/H$ heads the per-head and fused views above agree on.

# %%
wide_16 = count_parameters(Source001MHA(16, 64))
wide_ratio_16 = wide_16 / (4 * 64 * 64 + 4 * 64)
helpers.glue("ch4_wide_ratio_16", round(wide_ratio_16, 1))
assert wide_16 == 3 * 16 * (64 * 64 + 64) + 16 * 64 * 64 + 64
assert count_parameters(Source001MHA(1, 64)) == 4 * 64 * 64 + 4 * 64
assert 15 < wide_ratio_16 < 16

# %% [markdown]
# ```{admonition} Pitfall: a value width that only works by coincidence (source 001)
# :class: warning
# Source 001's head projects its values only when `proj_values=True`; otherwise the values
# are the raw inputs, of width `input_dim`. The output layer, however, always expects
# `n_heads * d_model` features. So with `proj_values=False` the module runs only when
# `input_dim == d_model`, and crashes in the output layer for any other input width. The
# source never hits this branch because its multi-head module always projects the values. The
# cell below shows the three cases. Our modules have no such switch: every head projects its
# values to `d_head`, whatever its input. `test_source_001_value_width` in
# `tests/test_attention.py` pins the fix (the cell below shows the crash).
# ```

# %%
narrow = torch.randn(2, 5, 3, generator=generator)  # inputs of width 3, d_model = 4
same_width = torch.randn(2, 5, 4, generator=generator)  # inputs of width d_model = 4
projected = Source001MHA(n_heads=2, d_model=4, input_dim=3, proj_values=True)
raw_same = Source001MHA(n_heads=2, d_model=4, proj_values=False)
raw_narrow = Source001MHA(n_heads=2, d_model=4, input_dim=3, proj_values=False)
projected.init_keys(narrow)
raw_same.init_keys(same_width)
raw_narrow.init_keys(narrow)

print("projected values, width 3:", tuple(projected(narrow).shape))
print("raw values, width 4:      ", tuple(raw_same(same_width).shape))
print("raw values, width 3:      ", error_of(lambda: raw_narrow(narrow)))

# %% [markdown]
# ```{admonition} Pitfall: the vocabulary size as the attention width (source 002)
# :class: warning
# Source 002 (written in JAX) builds its attention with `input_dim` equal to the *vocabulary
# size* while the tokens enter the model as embeddings of a different width `n_embd`; its
# `__init__` also uses a name it never defined (`qkv_size`) and takes a `dim` argument it never
# uses. Ported to PyTorch and corrected just enough to run (`qkv_size` defined), it shows three
# symptoms below. (1) Fed the embeddings, as the source's own `Transformer` does, it crashes:
# the query layer expects vocabulary-sized vectors. (2) The source's stand-alone demo hides
# this by feeding random vectors of vocabulary width with a vocabulary padded to 128; with the
# 65 characters of a character-level corpus and 4 heads, `65 // 4 = 16` per head gives
# concatenated heads of width 64 and the output layer, built for 65, crashes. (3) Even where it
# runs, its size is tied to the vocabulary: a GPT-2-sized vocabulary would give
# {glue:text}`ch4_vocab_width_params:,` weights to one attention layer. So this is a bug, not
# a harmless naming slip. The fix is to size the attention by the embedding width,
# `MultiHeadAttention(n_embd, num_heads)`, which also refuses a width the heads cannot split
# evenly. `test_attention_width_is_the_embedding_width` and
# `test_indivisible_width_is_refused` in `tests/test_attention.py` pin both.
# ```


# %%
class VocabWidthMHA(nn.Module):
    """Source 002's attention, ported: width = input_dim (the vocabulary size there).

    `dim` is accepted and ignored, as in the source.
    """

    def __init__(self, input_dim: int, dim: int, n_heads: int):
        super().__init__()
        self.n_heads, self.qkv_size = n_heads, input_dim // n_heads
        self.query, self.key, self.value = (
            nn.Linear(input_dim, self.qkv_size * n_heads, bias=False) for _ in range(3)
        )
        self.output = nn.Linear(input_dim, input_dim, bias=False)

    def forward(self, x):  # x: (T, input_dim), one sequence, as in the source
        seq = x.shape[0]
        q, k, v = (
            proj(x).reshape(seq, self.n_heads, -1)
            for proj in (self.query, self.key, self.value)
        )
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(self.qkv_size)
        heads = torch.einsum("hts,shd->thd", scores.softmax(dim=-1), v)
        return self.output(heads.reshape(seq, -1))


# %%
# a character-level vocabulary of 65 symbols, embedded in 32 dimensions, 4 heads
n_vocab, n_embd, n_heads_002 = 65, 32, 4
token_ids = torch.randint(0, n_vocab, (8,), generator=generator)
# (T, n_embd): what the source's model feeds its attention layer
embedded = nn.Embedding(n_vocab, n_embd)(token_ids)
vocab_wide = VocabWidthMHA(
    input_dim=n_vocab, dim=n_vocab // n_heads_002, n_heads=n_heads_002
)
vocab_inputs = torch.randn(8, n_vocab, generator=generator)
print("(1) fed the embeddings:", error_of(lambda: vocab_wide(embedded)))
print("(2) fed vocabulary-wide vectors:", error_of(lambda: vocab_wide(vocab_inputs)))

# %% [markdown]
# The source's own demo runs, because its vocabulary of 128 splits evenly into its 2 heads,
# and so does the fix, an attention layer as wide as the embeddings:

# %%
padded_demo = VocabWidthMHA(input_dim=128, dim=64, n_heads=2)
assert padded_demo(torch.randn(8, 128, generator=generator)).shape == (8, 128)
fixed = MultiHeadAttention(n_embd, n_heads_002)
assert fixed(embedded[None], embedded[None], embedded[None]).shape == (1, 8, n_embd)
gpt2_vocab = 50_304  # 50,257 tokens padded to a multiple of 64, as source 002 does
vocab_width_params = 4 * gpt2_vocab**2  # four (V, V) matrices
helpers.glue("ch4_vocab_width_params", vocab_width_params)
# the same formula, counted on a real module
assert count_parameters(padded_demo) == 4 * 128**2

# %% [markdown]
# ## What the output looks like: a singular-value picture
#
# Source 000 makes an observation about this layer: at initialization, its output on a long
# random sequence is nearly of rank one, while its queries and keys are not. The singular
# values $\sigma_1 \ge \sigma_2 \ge \ldots$ of a $T \times D$ matrix measure this: a matrix
# of rank one has a single nonzero $\sigma_1$. A convenient single number is the *stable
# rank* $\sum_k \sigma_k^2 / \sigma_1^2$ (`helpers.analysis.stable_rank`), which is at most the
# rank and is not fooled by tiny singular values. Take $T=1024$ random tokens of width $D=128$ and a fresh layer with 8
# heads:


# %%
def singular_values(matrix: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(matrix.detach())


torch.manual_seed(4)
rank_mha = MultiHeadAttention(d_model=128, num_heads=8)
long_x = torch.randn(1, 1024, 128, generator=generator)
with torch.no_grad():
    long_q, long_k, _ = rank_mha.qkv_proj(long_x).split(128, dim=-1)
    long_out = rank_mha(long_x, long_x, long_x)
spectra = {
    "queries Q": long_q[0],
    "keys K": long_k[0],
    "MHA(x)": long_out[0],
    "x + MHA(x)": (long_x + long_out)[0],
}
stable_ranks = {name: stable_rank(matrix) for name, matrix in spectra.items()}
pd.Series(stable_ranks, name="stable rank").round(1)

# %% [markdown]
# The source stops here and calls the layer "low rank". That is true of this layer *at
# initialization*, and the reason is worth knowing: with small random weights the scores
# $q \cdot k / \sqrt{d_\text{head}}$ are small, the softmax is close to uniform, and every
# output row is close to the *average* of all value rows, the same vector for every position.
# Larger scores make the attention sharper and the output richer. Scaling the input up is the
# simplest way to get larger scores, so the cell below does that and records the stable rank
# of the output along with how close to uniform the attention is (its entropy divided by the
# entropy $\log T_k$ of the uniform distribution: 1 means uniform).


# %%
def output_rank_and_entropy(scale: float) -> dict:
    inputs = scale * long_x
    with torch.no_grad():
        output, weights = rank_mha(inputs, inputs, inputs, return_attention=True)
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1).mean()
    return {
        "input scale": scale,
        "stable rank of MHA(x)": stable_rank(output[0]),
        "attention entropy / log T": (entropy / math.log(weights.shape[-1])).item(),
    }


sharpness = pd.DataFrame(
    [output_rank_and_entropy(scale) for scale in (0.5, 1, 2, 3, 4, 6)]
)
sharpness.round(2)

# %% tags=["hide-input"]
fig, (ax_spectrum, ax_scale) = plt.subplots(1, 2, figsize=(10, 3.6))
for name, matrix in spectra.items():
    sigma = singular_values(matrix)
    ax_spectrum.plot(to_numpy(sigma / sigma[0]), label=name)
ax_spectrum.set_xlabel("index k")
ax_spectrum.set_ylabel(r"$\sigma_k / \sigma_1$")
ax_spectrum.set_title("spectra at initialization, input scale 1")
ax_spectrum.legend()
ax_scale.plot(
    sharpness["input scale"], sharpness["stable rank of MHA(x)"], "o-", label="MHA(x)"
)
ax_scale.axhline(
    stable_ranks["queries Q"], color="gray", linestyle=":", label="queries Q"
)
ax_scale.set_xlabel("input scale")
ax_scale.set_ylabel("stable rank")
ax_scale.set_title("sharper attention, richer output")
ax_entropy = ax_scale.twinx()
ax_entropy.plot(
    sharpness["input scale"], sharpness["attention entropy / log T"], "s--", color="C3"
)
ax_entropy.set_ylabel("attention entropy / log T", color="C3")
ax_entropy.grid(False)
ax_scale.legend(loc="center right")
fig.tight_layout()

# %% [markdown]
# **Figure.** Left: normalized singular values of the queries, the keys, the layer's output
# and the output plus its input, for 1024 random tokens at initialization. The queries and
# keys decay slowly; the output's curve drops right after the first singular value (one
# direction dominates), and adding the input back, as a residual connection does (chapter 6),
# restores the slow decay. Right: as the inputs are scaled up, the attention moves away from
# uniform (red squares, right axis) and the output's stable rank (blue circles) climbs towards
# that of the queries (dotted line).

# %% [markdown]
# In numbers: at input scale 1 the attention entropy is
# {glue:text}`ch4_entropy_scale1:.2f` of the uniform one and the output has a stable rank of
# {glue:text}`ch4_srank_out:.1f`, against {glue:text}`ch4_srank_q:.1f` for the queries and
# {glue:text}`ch4_srank_residual:.1f` for the output plus its input. At scale 4 the entropy
# ratio drops to {glue:text}`ch4_entropy_scale4:.2f` and the output's stable rank rises to
# {glue:text}`ch4_srank_out_scale4:.1f`. So "multi-head attention is low rank" is a statement
# about near-uniform attention, typical at initialization, not about the layer itself; the
# residual connection keeps the rank of what flows through the network either way.

# %%
at = sharpness.set_index("input scale")
helpers.glue("ch4_srank_out", round(float(stable_ranks["MHA(x)"]), 1))
helpers.glue("ch4_srank_q", round(float(stable_ranks["queries Q"]), 1))
helpers.glue("ch4_srank_residual", round(float(stable_ranks["x + MHA(x)"]), 1))
helpers.glue(
    "ch4_entropy_scale1", round(float(at.loc[1, "attention entropy / log T"]), 2)
)
helpers.glue(
    "ch4_entropy_scale4", round(float(at.loc[4, "attention entropy / log T"]), 2)
)
helpers.glue(
    "ch4_srank_out_scale4", round(float(at.loc[4, "stable rank of MHA(x)"]), 1)
)
assert stable_ranks["MHA(x)"] < 0.25 * stable_ranks["queries Q"]
assert stable_ranks["x + MHA(x)"] > stable_ranks["queries Q"]
assert at.loc[1, "attention entropy / log T"] > 0.95
assert at.loc[4, "stable rank of MHA(x)"] > 5 * stable_ranks["MHA(x)"]
assert at["stable rank of MHA(x)"].is_monotonic_increasing
assert at["attention entropy / log T"].is_monotonic_decreasing


# %% [markdown]
# ## Summary
#
# - Multi-head attention runs $H$ scaled dot-product attentions in $H$ projections of width
#   $D/H$, concatenates them and mixes them with $W^O$: $4D^2$ weights whatever $H$ is.
# - A list of heads and one fused projection reshaped into heads are the same function; the
#   fused one is fast. The reshape is `view(B, T, H, d_head).transpose(1, 2)`, and back.
# - `helpers.attention.MultiHeadAttention` equals both, and equals `torch.nn.MultiheadAttention`
#   with `in_proj_weight` = $[W^Q; W^K; W^V]$, the mask inverted and `batch_first=True`.
# - Queries and keys may come from different sequences (cross-attention, $T_q \ne T_k$).
# - Without a mask or positional information the layer is equivariant in the queries and
#   invariant in the key-value pairs: it sees a set. Chapter 5 gives it positions.

# %% [markdown]
# ## Exercises
#
# Some exercises come with a checker in `helpers.checks`: call it on your function and it
# either returns a line starting with "Correct" or raises an `AssertionError` whose message
# names the likely mistake. For instance, the `split_heads` method of this chapter's
# `FusedMHA` passes the checker of exercise 1:

# %%
checks.check_split_heads(
    lambda x, num_heads: FusedMHA(x.shape[-1], num_heads).split_heads(x)
)

# %% [markdown]
# **1. Splitting and merging heads.** Write `split_heads(x, num_heads)`, turning a
# $(B, T, D)$ tensor into $(B, H, T, D/H)$ where head $h$ holds features
# $h\,d_\text{head}$ to $(h+1)\,d_\text{head}$ of every position, and its inverse
# `merge_heads(x)`. Check them with `checks.check_split_heads(split_heads)` and
# `checks.check_merge_heads(merge_heads)`. Then try the tempting one-liner
# `x.reshape(B, H, T, D // H)` and read what the checker says.
#
# ```{admonition} Solution
# :class: dropdown
# Split the feature axis first, then move the head axis in front of the positions; merging
# undoes the two steps in reverse order. `reshape` is needed when merging, because the
# transposed tensor is not contiguous.
#
# ~~~python
# def split_heads(x, num_heads):
#     batch, seq_len, d_model = x.shape
#     return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)
#
# def merge_heads(x):
#     batch, num_heads, seq_len, d_head = x.shape
#     return x.transpose(1, 2).reshape(batch, seq_len, num_heads * d_head)
# ~~~
#
# The one-liner has the right shape but the wrong content: it cuts the memory of the
# $(B, T, D)$ tensor into consecutive pieces, so head 0 receives all the features of the first
# few positions instead of the first features of every position. The checker recognizes this
# mistake and says so.
# ```
#
# **2. Counting parameters.** Write `mha_count(d_model, num_heads, bias)` returning the number
# of parameters of multi-head attention and check it with
# `checks.check_parameter_count(mha_count)`.
# How many parameters has the attention layer of a model with $D=768$ and 12 heads, with
# biases?
#
# ```{admonition} Solution
# :class: dropdown
# `return 4 * d_model**2 + (4 * d_model if bias else 0)`; the number of heads does not enter.
# For $D = 768$ with biases: $4 \cdot 768^2 + 4 \cdot 768 =$ {glue:text}`ch4_params_768:,`.
# ```
#
# **3. Heads are interchangeable.** Show that reordering the heads of a `MultiHeadAttention`
# changes nothing: build a second module whose head $h$ is the first module's head
# $\pi(h)$ for a permutation $\pi$, and check that both give the same output. Which weights
# must move, and which must stay?
#
# ```{admonition} Solution
# :class: dropdown
# Head $h$ owns rows $h\,d_\text{head}$ to $(h+1)\,d_\text{head}$ of each of the three blocks
# of `qkv_proj.weight` and the same range of *columns* of `out_proj.weight` (the output layer
# reads the concatenated heads along its input axis). Move all four together:
#
# ~~~python
# def permute_heads(mha, order):
#     rows = torch.cat([torch.arange(h * mha.d_head, (h + 1) * mha.d_head) for h in order])
#     permuted = MultiHeadAttention(mha.d_model, mha.num_heads)
#     with torch.no_grad():
#         for block in range(3):
#             offset = block * mha.d_model
#             permuted.qkv_proj.weight[offset : offset + mha.d_model] = (
#                 mha.qkv_proj.weight[offset + rows])
#         permuted.out_proj.weight.copy_(mha.out_proj.weight[:, rows])
#     return permuted
# ~~~
#
# The outputs agree to rounding, and the attention weights come out with their head axis
# permuted. So the heads carry no identity of their own: "head 3" is a label, and a
# model with $H$ heads has $H!$ equivalent weight settings.
# ```
#
# **4. When does a causal mask allow reordering?** For causal self-attention with the mask
# kept fixed, for which permutations $P$ of the positions does
# $\operatorname{MultiHead}(PX, PX, PX; M) = P \operatorname{MultiHead}(X, X, X; M)$ hold for
# every input $X$? Guess first, then check all $4! = 24$ permutations of a length-4 sequence
# with `itertools.permutations`.
#
# ```{admonition} Solution
# :class: dropdown
# Only the identity. Permuting the inputs under a fixed mask is the same as keeping the inputs
# and using the permuted mask $P^\top M P$, so the equation holds for every $X$ exactly when
# $P^\top M P = M$: the permutation must map "$j \le i$" to "$j \le i$", that is, keep the
# order of every pair of positions, and the only such permutation is the identity. The brute
# force check agrees:
#
# ~~~python
# import itertools
# x = torch.randn(1, 4, d_model)
# causal = causal_mask(4)
# reference = mha(x, x, x, mask=causal)
# allowed = [
#     order for order in itertools.permutations(range(4))
#     if torch.allclose(mha(x[:, order], x[:, order], x[:, order], mask=causal),
#                       reference[:, order], atol=1e-6)
# ]
# print(allowed)  # [(0, 1, 2, 3)]
# ~~~
#
# This is the sense in which a causal mask already carries positional information: a decoder
# without positional encodings can still tell positions apart a little, through what each
# position is allowed to see.
# ```

# %%
helpers.glue("ch4_params_768", checks.mha_parameter_count(768, 12, bias=True))
assert checks.mha_parameter_count(768, 12, bias=True) == count_parameters(
    nn.MultiheadAttention(768, 12, bias=True)
)
