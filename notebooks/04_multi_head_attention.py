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
# After this chapter you will be able to:
#
# - build multi-head attention twice, as a list of heads and as one fused projection
#   reshaped into heads, and show that the two compute the same function;
# - explain what several narrow heads can do that one wide head cannot, and use the layer
#   for self- and cross-attention;
# - predict what the layer does to permuted inputs, and say why that makes positional
#   encodings necessary.
#
# ```{figure} ../book/_static/diagrams/map_04.svg
# :alt: The book's map of the Transformer: the multi-head attention boxes of the encoder and the decoder are highlighted.
# :width: 60%
# :name: fig-map-04
#
# Where this chapter sits in the Transformer: the multi-head attention boxes, in the encoder
# and in the decoder.
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
import textwrap
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

import helpers
from helpers import checks
from helpers.analysis import count_parameters, stable_rank
from helpers.attention import (
    MultiHeadAttention,
    PerHeadMultiHeadAttention,
    scaled_dot_product_attention,
)
from helpers.interop import fuse_heads, load_multihead_attention
from helpers.masks import causal_mask, padding_mask
from helpers.plotting import to_numpy
from helpers.tasks.lookups import lookup_weights, two_lookup_batch

device = helpers.get_device()  # a GPU if there is one, else the CPU

# The models trained here are so small that splitting each matrix product
# over several CPU threads costs more in synchronization than it saves.
helpers.use_one_thread(device)


def error_of(call) -> str:
    """Run ``call()``, which must fail; return its error's first line, wrapped."""
    try:
        call()
    except (RuntimeError, ValueError) as error:
        message = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        return textwrap.fill(message, width=78)
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
# \begin{aligned}
# \text{head}_h &= \operatorname{Attention}\left(Q W^Q_h,\; K W^K_h,\; V W^V_h\right)
# \in \mathbb{R}^{T_q \times d_\text{head}},\\
# W^Q_h, W^K_h, W^V_h &\in \mathbb{R}^{D \times d_\text{head}}.
# \end{aligned}
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
# as first implementations often do. Each head owns three small linear layers and calls
# the `scaled_dot_product_attention` of chapter 3, queries first, then keys.
#
# ```{figure} ../book/_static/diagrams/mha_per_head.svg
# :alt: A flow chart. The input x of shape (B, T, D) feeds H separate heads, drawn as head 1, head 2, dots and head H. Each head has its own three small projections q, k and v and its own attention, and outputs a tensor of shape (B, T, d_head). The head outputs are concatenated along the last dimension into (B, T, D), and an output Linear W O from D to D gives the output, again (B, T, D).
# :name: fig-mha-per-head
#
# The per-head view: every head owns its projections (blue, orange, green: its queries, keys
# and values, each of width $d_\text{head}$) and runs its own attention. Look at the widths:
# $H$ heads of width $d_\text{head} = D / H$ side by side make the width $D$ again, which is
# why the concatenation can be followed by a $D \times D$ output projection.
# ```


# %%
class Head(nn.Module):
    """One attention head: projections D -> d_head for q, k and v."""

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
    """Multi-head attention as H heads, concatenated, then mixed by W_o."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        d_head = d_model // num_heads
        self.heads = nn.ModuleList(
            Head(d_model, d_head) for _ in range(num_heads)
        )
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
out_per_head.shape, weights_per_head.shape

# %% tags=["remove-cell"]
assert out_per_head.shape == (batch_size, seq_len, d_model)
assert weights_per_head.shape == (batch_size, num_heads, seq_len, seq_len)

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
# ```{figure} ../book/_static/diagrams/mha_fused.svg
# :alt: A flow chart from top to bottom with the shape on every arrow. The input x of shape (B, T, D) goes through one Linear from D to 3D, which is split into q, k and v, each (B, T, D). Each is viewed as (B, T, H, d_head) and transposed to (B, H, T, d_head); one attention call handles all heads and gives (B, H, T, d_head); a transpose and a reshape give (B, T, D); the output Linear W O keeps (B, T, D).
# :name: fig-mha-fused
#
# The fused view of the same module (self-attention: queries, keys and values all come from
# `x`). Compare it with the per-head figure above: the $3H$ small projections became one
# `Linear(D, 3D)`, and the loop over heads became a reshape. Look at the shapes on the arrows:
# the heads move into the second dimension, where one batched attention call treats them like
# the batch, and the reshape back to $(B, T, D)$ is the concatenation.
# ```
#
# Step by step, each step followed by `record`, which checks the shape against the one
# expected and adds a row to the table printed at the end:

# %%
steps = []


def record(step: str, tensor: torch.Tensor, expected: tuple) -> None:
    """Check a tensor's shape and note it in the table of steps."""
    assert tensor.shape == expected, (step, tuple(tensor.shape), expected)
    steps.append({"step": step, "shape": str(tuple(tensor.shape))})


# %%
w_qkv = torch.randn(3 * d_model, d_model, generator=generator)
w_qkv = w_qkv / math.sqrt(d_model)
# three (D, D) blocks; a weight's rows are output features
w_q, w_k, w_v = w_qkv.split(d_model, dim=0)
B, T, H = batch_size, seq_len, num_heads

q = x @ w_q.T
record("project: x @ W_q.T", q, (B, T, d_model))
q = q.view(B, T, H, d_head)
record("split the width: view(B, T, H, d_head)", q, (B, T, H, d_head))
q = q.transpose(1, 2)
record("heads to the front: transpose(1, 2)", q, (B, H, T, d_head))

# %% [markdown]
# Keys and values go through the same three steps. Then one call to scaled dot-product
# attention treats $(B, H)$ as batch dimensions, and the heads are merged back:

# %%
k = (x @ w_k.T).view(B, T, H, d_head).transpose(1, 2)
v = (x @ w_v.T).view(B, T, H, d_head).transpose(1, 2)
record("keys and values, same steps", k, (B, H, T, d_head))
heads, attn_weights = scaled_dot_product_attention(q, k, v)
record("attention weights", attn_weights, (B, H, T, T))
record("attention output per head", heads, (B, H, T, d_head))
heads = heads.transpose(1, 2)
record("positions to the front: transpose(1, 2)", heads, (B, T, H, d_head))
concat = heads.reshape(B, T, d_model)
record("concatenate heads: reshape(B, T, D)", concat, (B, T, d_model))
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
print("contiguous after the transpose:", heads.is_contiguous())
print(error_of(lambda: heads.view(B, T, d_model)))

# %% tags=["remove-cell"]
assert not heads.is_contiguous()

# %% [markdown]
# Packaged as a module, the fused view is a dozen lines. The three projection matrices live in
# one `nn.Linear(D, 3D)`, in the row order $[W^Q; W^K; W^V]$; for cross-attention the query,
# key and value inputs differ, so the weight is split into its three blocks and each block is
# applied to its own input.


# %%
class FusedMHA(nn.Module):
    """Multi-head attention: one (3D, D) projection, reshaped into heads."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        # one weight of shape (3D, D), rows [W_q; W_k; W_v]
        self.w_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)

    def split_heads(self, x):
        # (B, T, D) -> (B, T, H, d_head) -> (B, H, T, d_head)
        batch, length, _ = x.shape
        x = x.view(batch, length, self.num_heads, self.d_head)
        return x.transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        w_q, w_k, w_v = self.w_qkv.weight.chunk(3, dim=0)
        q = self.split_heads(F.linear(query, w_q))  # (B, H, Tq, d_head)
        k = self.split_heads(F.linear(key, w_k))  # (B, H, Tk, d_head)
        v = self.split_heads(F.linear(value, w_v))  # (B, H, Tk, d_head)
        # one call for every head: (B, H) act as batch dimensions
        heads, weights = scaled_dot_product_attention(q, k, v, mask)
        # (B, H, Tq, d_head) -> (B, Tq, H, d_head) -> (B, Tq, D)
        concat = heads.transpose(1, 2).flatten(2)
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
        stacked = torch.cat(
            [getattr(head, name).weight for head in per_head.heads]
        )
        rows = slice(block * d_model, (block + 1) * d_model)
        fused.w_qkv.weight[rows] = stacked
    fused.w_o.weight.copy_(per_head.w_o.weight)
    return fused


fused = fuse(per_head, FusedMHA(d_model, num_heads))
out_fused, weights_fused = fused(x, x, x)
fused_vs_per_head = (out_fused - out_per_head).abs().max().item()
print("the two views agree within 1e-6:", fused_vs_per_head < 1e-6)

# %% tags=["remove-cell"]
assert torch.allclose(out_fused, out_per_head, atol=1e-6)
assert torch.allclose(weights_fused, weights_per_head, atol=1e-6)

# %% [markdown]
# What difference there is (below $10^{-6}$) is floating-point rounding: the two views add
# the same products in a different order. They are one function written two ways, and the
# fused one is what runs fast.

# %% [markdown]
# ## The book's module, and PyTorch's
#
# The rest of the book uses `helpers.attention.MultiHeadAttention`. It is the fused view plus
# what a library needs: input checks with messages that say how to fix the call, the book's
# mask convention (boolean, `True` = may attend), attention dropout, optional biases, one
# matrix product when `query is key is value`, and PyTorch's fast
# `F.scaled_dot_product_attention` kernel unless the weights are asked for with
# `return_attention=True`.

# %% tags=["hide-output"]
helpers.show_source(MultiHeadAttention)

# %% [markdown]
# Its `qkv_proj` has exactly the layout of `FusedMHA.w_qkv`, so with the two weights copied
# over it gives the same outputs and attention weights, with and without the fast kernel:

# %%
mha = MultiHeadAttention(d_model, num_heads)
with torch.no_grad():
    mha.qkv_proj.weight.copy_(fused.w_qkv.weight)
    mha.out_proj.weight.copy_(fused.w_o.weight)

out_package, weights_package = mha(x, x, x, return_attention=True)

# %% tags=["remove-cell"]
assert torch.allclose(out_package, out_fused, atol=1e-6)
assert torch.allclose(weights_package, weights_fused, atol=1e-6)
# without return_attention the module runs F.scaled_dot_product_attention instead
assert torch.allclose(mha(x, x, x), out_fused, atol=1e-6)
# the package's per-head module, fused by the package's own weight mapping
torch.manual_seed(1)
package_per_head = PerHeadMultiHeadAttention(d_model, num_heads)
assert torch.allclose(
    package_per_head(x, x, x), fuse_heads(package_per_head)(x, x, x), atol=1e-6
)

# %% [markdown]
# PyTorch ships the same layer as `torch.nn.MultiheadAttention`, with the same matrices under
# other names: its `in_proj_weight` holds $[W^Q; W^K; W^V]$ in the row order of our
# `qkv_proj`, and its `out_proj` is $W^O$. Two arguments need care. It expects `(T, B, D)`
# inputs unless built with `batch_first=True`. And its boolean `attn_mask` means the
# opposite of ours, `True` = *may not* attend (chapter 2), so our mask goes in as `~mask`.
# With the weights copied and a causal mask:

# %%
torch.manual_seed(2)
torch_mha = nn.MultiheadAttention(
    d_model, num_heads, bias=True, batch_first=True
)
ours = MultiHeadAttention(d_model, num_heads, bias=True)
with torch.no_grad():  # the same numbers, in the same layout
    ours.qkv_proj.weight.copy_(torch_mha.in_proj_weight)
    ours.qkv_proj.bias.copy_(torch_mha.in_proj_bias)
    ours.out_proj.weight.copy_(torch_mha.out_proj.weight)
    ours.out_proj.bias.copy_(torch_mha.out_proj.bias)

mask = causal_mask(seq_len)  # ours: True = may attend
out_ours = ours(x, x, x, mask=mask)
out_torch, _ = torch_mha(x, x, x, attn_mask=~mask)  # True = may NOT attend
torch_vs_ours = (out_torch - out_ours).abs().max().item()
print("agrees with nn.MultiheadAttention within 1e-6:", torch_vs_ours < 1e-6)

# %% tags=["remove-cell"]
# Outputs, per-head weights and head-averaged weights all agree.
out_ours, weights_ours = ours(x, x, x, mask=mask, return_attention=True)
out_torch, weights_torch = torch_mha(
    x, x, x, attn_mask=~mask, average_attn_weights=False
)
_, mean_weights_torch = torch_mha(x, x, x, attn_mask=~mask)  # head average
assert torch.allclose(out_ours, out_torch, atol=1e-6)
assert torch.allclose(weights_ours, weights_torch, atol=1e-6)
assert torch.allclose(weights_ours.mean(dim=1), mean_weights_torch, atol=1e-6)

# %% [markdown]
# ```{admonition} Pitfall: passing a "may attend" mask to torch.nn.MultiheadAttention
# :class: warning
# A padding mask in this book's convention, handed to `nn.MultiheadAttention` as
# `key_padding_mask`, hides the real tokens and keeps the padding. The cell below runs it:
# the full-length sequence has every key hidden and comes out as NaN, and the shorter one
# attends *only* to its padding. The fix is `~mask` (and, for a `(B, 1, 1, T)` mask, the
# `(B, T)` slice `mask[:, 0, 0]`).
# ```

# %%
x5 = torch.randn(2, 5, d_model, generator=generator)
lengths_2 = padding_mask([5, 3])  # (2, 1, 1, 5), True = real token
wrong_out, wrong_weights = torch_mha(
    x5, x5, x5, key_padding_mask=lengths_2[:, 0, 0]
)
right_out, _ = torch_mha(x5, x5, x5, key_padding_mask=~lengths_2[:, 0, 0])
on_padding = wrong_weights[1, :, 3:].sum(-1).detach()
print(
    "without ~, full sequence is NaN:", torch.isnan(wrong_out[0]).all().item()
)
print("without ~, short sequence's weight on its padding:", on_padding.round())

# %% tags=["remove-cell"]
assert torch.isnan(wrong_out[0]).all()
torch.testing.assert_close(wrong_weights[1, :, 3:].sum(-1), torch.ones(5))
torch.testing.assert_close(right_out, ours(x5, x5, x5, lengths_2))

# %% [markdown]
# :::{admonition} Going deeper: a 3-D mask against four-dimensional scores
# :class: dropdown
# Inside the module the scores have shape $(B, H, T_q, T_k)$, one matrix per sequence and
# head. The masks of chapter 2 have fewer axes: $(T_q, T_k)$ (one pattern for everything) or
# $(B, T_q, T_k)$ (one per sequence). The book's modules accept those two and
# $(B, H, T_q, T_k)$, with size-1 axes broadcasting; a padding mask's $(B, 1, 1, T_k)$ shape
# was made for this.
#
# Plain broadcasting gets the 3-D case wrong. It aligns shapes from the right, so a
# $(B, T_q, T_k)$ mask against $(B, H, T_q, T_k)$ scores lines $B$ up with $H$: mask $b$ goes
# to head $b$ of *every* sequence. With $B \ne H$ that is a shape error; with $B = H$ it runs
# silently. `F.scaled_dot_product_attention` broadcasts this way. The folded cell below runs
# the trap with $B = H = 2$ and two sequences of lengths 8 and 5, causal and padded: sequence
# 1's head 0 gets sequence 0's mask, which is causal but lets it see sequence 1's padding.
#
# The book's modules remove the ambiguity by a rule: against 4-D scores a 3-D mask **is**
# $(B, T_q, T_k)$, and the head axis is inserted as `mask[:, None]`. A mask per head that is
# shared by the batch is written $(1, H, T_q, T_k)$.
# :::

# %% tags=["hide-cell"]
per_sequence = causal_mask(8) & padding_mask([8, 5])[:, 0]  # (B=2, T, T)
q_heads, k_heads = (
    torch.randn(2, 2, 8, 4, generator=generator) for _ in range(2)
)
identity8 = torch.eye(8)  # with v = I the output is the weight matrix itself
lined_up = F.scaled_dot_product_attention(
    q_heads, k_heads, identity8, attn_mask=per_sequence
)
leaked = lined_up[1, 0, :, 5:].sum().item()  # sequence 1, head 0, on padding
print(f"plain broadcasting: sequence 1, head 0, weight on padding {leaked:.2f}")
_, right = scaled_dot_product_attention(
    q_heads, k_heads, identity8, per_sequence[:, None]
)
print("with mask[:, None], weight on padding:", right[1, :, :, 5:].sum().item())

# %% tags=["remove-cell"]
assert leaked > 0.5
# every head of sequence 1 skips its padding
assert (right[1, :, :, 5:] == 0).all()
ours_3d, _ = scaled_dot_product_attention(
    q_heads, k_heads, identity8, per_sequence
)
torch.testing.assert_close(ours_3d, right)
with torch.random.fork_rng():  # leave the page's random state as the reader's
    two_heads_16 = MultiHeadAttention(d_model=16, num_heads=2)
x16 = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
torch.testing.assert_close(
    two_heads_16(x16, x16, x16, per_sequence),
    two_heads_16(x16, x16, x16, per_sequence[:, None]),
)

# %% [markdown]
# :::{admonition} Going deeper: a query with no key to attend to
# :class: dropdown
# Chapter 2 fixed what `scaled_dot_product_attention` returns for a query whose every key is
# masked: zero weights and a zero output. A layer adds its output projection on top, so the
# zero vector of the heads becomes $0 \cdot W^O + b^O = b^O$: with `bias=True` the row comes
# out as the output projection's bias, the same for every such query, and without biases as
# zero. `nn.MultiheadAttention`, given a sequence whose keys are all padding, returns NaN
# (the folded cell below).
# :::

# %% tags=["hide-cell"]
all_padding = torch.zeros(2, 5, dtype=torch.bool)  # torch's: True = ignore
all_padding[0] = True  # sequence 0: every key ignored
with torch.no_grad():
    torch_empty, _ = torch_mha(x5, x5, x5, key_padding_mask=all_padding)
    ours_empty, ours_empty_weights = ours(
        x5, x5, x5, ~all_padding[:, None, None, :], return_attention=True
    )
bias_rows = ours.out_proj.bias.expand(5, d_model)
print(
    "nn.MultiheadAttention, every key padding -> NaN:",
    torch.isnan(torch_empty[0]).all().item(),
)
print(
    "ours -> the output bias in every row:",
    torch.allclose(ours_empty[0], bias_rows),
)

# %% tags=["remove-cell"]
assert torch.isnan(torch_empty[0]).all()
assert (ours_empty_weights[0] == 0).all()
torch.testing.assert_close(ours_empty[0], bias_rows)

# %% [markdown]
# ## Why several heads: two lookups at once
#
# For each query, one head returns *one* weighted average of the values. That is a limit, and
# a small hand-built example shows it. Four tokens each carry an *address* (a one-hot code in
# their first 4 features) and a *content* (4 random features). One query asks for the
# contents of tokens 1 and 3. Two heads of width 4 can split the job: head 0 looks for
# address 1, head 1 for address 3, both read out the content, and the concatenation holds
# both contents side by side. One head of width 8 can only split its weight between the two
# tokens and return the *average* of the two contents, from which neither can be recovered;
# swapping the two contents does not even change its output. The weights are set by hand, a
# large factor `sharp` in the queries making the softmax nearly one-hot.

# %%
addresses = torch.eye(4)
contents = torch.randn(4, 4, generator=generator)
# (1, 4 tokens, 8 features): address, then content
memory = torch.cat([addresses, contents], dim=-1)[None]
request = torch.tensor([[[0.0, 1, 0, 1, 0, 0, 0, 0]]])  # tokens 1 and 3
sharp = 40.0


def two_lookup_layer(num_heads: int) -> MultiHeadAttention:
    """Hand-set weights; rows are output features, head h owns a slice."""
    w_q, w_k, w_v = torch.zeros(3, 8, 8)
    if num_heads == 2:  # head 0: rows 0-3 of each block, head 1: rows 4-7
        w_q[1, 1] = sharp  # head 0 looks for address 1
        w_q[4 + 3, 3] = sharp  # head 1 looks for address 3
        w_k[:4, :4] = w_k[4:, :4] = torch.eye(4)  # keys = addresses
        w_v[:4, 4:] = w_v[4:, 4:] = torch.eye(4)  # values = contents
    else:  # one head of width 8 looks for both addresses at once
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
one_head, two_heads = two_lookup_layer(1), two_lookup_layer(2)
with torch.no_grad():
    out_one, weights_one = one_head(
        request, memory, memory, return_attention=True
    )
    out_two, weights_two = two_heads(
        request, memory, memory, return_attention=True
    )
    out_one_swapped = one_head(request, swapped, swapped)
    out_two_swapped = two_heads(request, swapped, swapped)
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
# it between tokens 1 and 3, each of the two heads picks one of them. What comes out:

# %%
both = torch.cat([contents[1], contents[3]])
average = (contents[1] + contents[3]) / 2
print(
    "two heads return both contents:", out_two[0, 0].allclose(both, atol=1e-3)
)
print(
    "one head returns their average:",
    out_one[0, 0, 4:].allclose(average, atol=1e-3),
)
print(
    "one head cannot tell them apart:",
    out_one.allclose(out_one_swapped, atol=1e-6),
)

# %% tags=["remove-cell"]
both_contents = torch.cat([contents[1], contents[3]])
assert torch.allclose(out_two[0, 0], both_contents, atol=1e-3)
assert torch.allclose(
    out_one[0, 0, 4:], (contents[1] + contents[3]) / 2, atol=1e-3
)
assert torch.allclose(out_one, out_one_swapped, atol=1e-6)
assert not torch.allclose(out_two, out_two_swapped, atol=1e-2)

# %% [markdown]
# The last line means that swapping the two contents leaves the one-head output unchanged,
# while the two-head output swaps its halves.
#
# ## Do trained heads split the work?
#
# Those weights were set by hand. Does training find the division of labour? The same task,
# learned: 8 memory tokens, each an address and a *symbol* (one of 8, drawn afresh for every
# example, so nothing can be memorized); the request holds two addresses, and the layer's 16
# outputs are two sets of 8 logits, one per answer. A layer of width 16 is trained with one
# head, then with two heads of width 8, five seeds each:


# %%
def train_lookups(num_heads: int, seed: int, steps: int = 300):
    """Train one attention layer of width 16 on the two-lookup task."""
    torch.manual_seed(seed)
    layer = MultiHeadAttention(16, num_heads)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        request, memory, targets, _ = two_lookup_batch(256, generator=data)
        logits = layer(request, memory, memory).view(-1, 2, 8)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return layer


# %% tags=["nbval-ignore-output"]
test = two_lookup_batch(2000, generator=torch.Generator().manual_seed(99))
test_request, test_memory, test_targets, test_addresses = test
results, learned_weights = [], {}
start = time.perf_counter()
for seed in range(5):
    for heads in (1, 2):
        layer = train_lookups(heads, seed)
        with torch.no_grad():
            logits, weights = layer(
                test_request, test_memory, test_memory, return_attention=True
            )
        correct = logits.view(-1, 2, 8).argmax(-1) == test_targets
        accuracy = correct.float().mean(dim=0)
        results.append(
            {
                "heads": heads,
                "seed": seed,
                "first": accuracy[0].item(),
                "second": accuracy[1].item(),
            }
        )
        learned_weights[heads, seed] = weights
print(f"10 trainings in {time.perf_counter() - start:.1f} s")
lookup_results = pd.DataFrame(results)
lookup_results.groupby("heads")[["first", "second"]].agg(["min", "max"])

# %% tags=["hide-input", "nbval-ignore-output"]
fig, (ax_acc, ax_map) = plt.subplots(
    1,
    2,
    figsize=(6.2, 2.9),
    layout="constrained",
    gridspec_kw={"width_ratios": [1, 1.5]},
)
for offset, (column, marker) in enumerate([("first", "o"), ("second", "s")]):
    for heads in (1, 2):
        rows = lookup_results[lookup_results["heads"] == heads]
        ax_acc.scatter(
            [heads - 0.1 + 0.2 * offset] * len(rows),
            rows[column],
            marker=marker,
            color=f"C{offset}",
            alpha=0.7,
            label=f"{column} answer" if heads == 1 else None,
        )
ax_acc.axhline(1 / 8, color="gray", linestyle=":", label="chance")
ax_acc.set_xticks([1, 2], ["1 head", "2 heads"])
ax_acc.set_xlim(0.5, 2.5)
ax_acc.set_ylim(0, 1.05)
ax_acc.set_ylabel("test accuracy")
ax_acc.set_title("five seeds each")
ax_acc.legend(fontsize=8, loc="center right")
example = 0
a, b = test_addresses[example].tolist()
rows = torch.stack(
    [
        learned_weights[1, 0][example, 0, 0],
        learned_weights[2, 0][example, 0, 0],
        learned_weights[2, 0][example, 1, 0],
    ]
)
image = ax_map.imshow(rows, cmap="viridis", vmin=0, vmax=1, aspect="auto")
ax_map.set_yticks(range(3), ["1 head", "2 heads: 0", "2 heads: 1"])
labels = [str(i) for i in range(8)]
labels[a], labels[b] = f"{a}\nfirst", f"{b}\nsecond"
ax_map.set_xticks(range(8), labels)
ax_map.set_xlabel("memory token")
ax_map.set_title("learned weights, seed 0")
ax_map.grid(False)
fig.colorbar(image, ax=ax_map, label="attention weight")
plt.show()

# %% [markdown]
# **Figure.** Left: test accuracy on each of the two answers, five seeds per layer. Right:
# the trained layers' weights (seed 0) for one request. The single head spreads its weight
# over both requested tokens; each of the two heads picks one of them.
#
# Two heads answer both lookups on every seed (lowest accuracy
# {glue:text}`ch4_two_heads_min:.1%`), each head taking one address (at least
# {glue:text}`ch4_split_min:.0%` of its weight). The single head favours one address, answers
# it ({glue:text}`ch4_one_head_best:.0%`) and guesses at the other
# ({glue:text}`ch4_one_head_worst:.0%`; chance is 12.5%): one average cannot return two
# symbols, trained or not.

# %% tags=["remove-cell", "nbval-ignore-output"]
# The claims, on every seed. Measured: two heads 100.0% on every seed; a head's weight on
# its address >= 0.91, on the other <= 0.05; one head: best answer >= 0.93, worst
# <= 0.29 (seeds 0-9, default and scalar one-thread numerics).
two = lookup_results[lookup_results["heads"] == 2]
one = lookup_results[lookup_results["heads"] == 1]
assert two[["first", "second"]].min().min() > 0.97
one_best = one[["first", "second"]].max(axis=1)
one_worst = one[["first", "second"]].min(axis=1)
assert one_best.min() > 0.8 and one_worst.max() < 0.45
split = []
for seed in range(
    5
):  # (heads, addresses): one head per address, a different one
    on = lookup_weights(learned_weights[2, seed], test_addresses)
    owner = on.argmax(dim=1)
    assert owner.tolist() in ([0, 1], [1, 0]), (seed, on)
    split.append(on.max(dim=1).values.min().item())
    assert on.min(dim=1).values.max() < 0.1, (seed, on)
assert min(split) > 0.75
helpers.glue("ch4_two_heads_min", two[["first", "second"]].min().min())
helpers.glue("ch4_split_min", math.floor(100 * min(split)) / 100)
helpers.glue("ch4_one_head_best", one_best.mean())
helpers.glue("ch4_one_head_worst", one_worst.mean())

# %% [markdown]
# ## Attention maps, one per head
#
# `return_attention=True` returns every head's weights, shape $(B, H, T_q, T_k)$. Even
# untrained heads attend differently: give a fresh layer a sentence, each word a fixed random
# embedding (the same word, the same vector), scaled up so that the attention is not almost
# uniform.

# %%
text = "the cat sat on the mat and the dog sat on the cat"
sentence = text.split()
vocabulary = sorted(set(sentence))
word_vectors = 3.0 * torch.randn(
    len(vocabulary), 32, generator=torch.Generator().manual_seed(3)
)
word_ids = [vocabulary.index(word) for word in sentence]
tokens = word_vectors[word_ids][None]  # (1, T, 32)

torch.manual_seed(3)
map_mha = MultiHeadAttention(d_model=32, num_heads=4)
with torch.no_grad():
    _, sentence_weights = map_mha(tokens, tokens, tokens, return_attention=True)

# %% tags=["remove-cell"]
assert sentence_weights.shape == (1, 4, len(sentence), len(sentence))

# %% tags=["hide-input"]
fig, axes = plt.subplots(
    2, 2, figsize=(6.2, 6.6), sharex=True, sharey=True, layout="constrained"
)
for head, ax in enumerate(axes.flat):
    image = ax.imshow(sentence_weights[0, head], cmap="viridis", vmin=0, vmax=1)
    ax.set_title(f"head {head}")
    ax.set_xticks(range(len(sentence)), sentence, rotation=90)
    ax.set_yticks(range(len(sentence)), sentence)
    ax.grid(False)
for ax in axes[1]:
    ax.set_xlabel("key")
for ax in axes[:, 0]:
    ax.set_ylabel("query")
fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
plt.show()

# %% [markdown]
# **Figure.** Attention weights of the four heads for one sentence (rows: queries, columns:
# keys), on one colour scale from 0 to 1 (colour bar). Each head has its own pattern. Within
# a head, every row of "the" is identical, and so are the columns of "the": the layer sees
# *which* word sits at a position but not *where*, so two copies of a word are
# indistinguishable to it.

# %% tags=["remove-cell"]
# The caption's claim: in every head, the rows of the occurrences of "the" are equal,
# and so are their columns.
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
    name="head",
    value=0,
    bind=alt.binding_select(options=[0, 1, 2, 3], name="head "),
)
(
    alt.Chart(attention_records)
    .mark_rect()
    .encode(
        x=alt.X("key:O", sort=None, title="key"),
        y=alt.Y("query:O", sort=None, title="query"),
        color=alt.Color(
            "weight:Q",
            scale=alt.Scale(domain=[0, 1], scheme="viridis"),
            legend=alt.Legend(
                orient="bottom"
            ),  # below: the chart fits a phone's column
        ),
        tooltip=["head:O", "query:N", "key:N", "weight:Q"],
    )
    .add_params(head_choice)
    .transform_filter(alt.datum.head == head_choice)
    .properties(width=290, height=290)
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
# from another (an encoder's output, of length $T_k$). Only the lengths of keys and values
# must agree. The output has one row per *query*, and the weights are $T_q \times T_k$:

# %%
decoder_len, encoder_len = 4, 9
decoder_states = torch.randn(
    batch_size, decoder_len, d_model, generator=generator
)
encoder_states = torch.randn(
    batch_size, encoder_len, d_model, generator=generator
)
# the second encoder sequence has 3 padding positions
lengths = torch.tensor([9, 6])
key_mask = padding_mask(lengths)  # (B, 1, 1, Tk): for every head and query

cross_out, cross_weights = mha(
    decoder_states,
    encoder_states,
    encoder_states,
    mask=key_mask,
    return_attention=True,
)
cross_out.shape, cross_weights.shape

# %% tags=["remove-cell"]
assert cross_out.shape == (batch_size, decoder_len, d_model)
assert cross_weights.shape == (batch_size, num_heads, decoder_len, encoder_len)
assert torch.allclose(
    cross_weights.sum(dim=-1), torch.ones(batch_size, num_heads, decoder_len)
)
assert (cross_weights[1, :, :, 6:] == 0).all()  # padding gets no weight

# %% [markdown]
# Here the order of the arguments is not a convention but the meaning. In self-attention,
# exchanging the query and key inputs changes nothing that matters: both come from the same
# tokens, so it only trades the roles of $W^Q$ and $W^K$, which learn either way. In
# cross-attention it is a bug: a shape error when $T_q \ne T_k$, silently wrong output when
# they are equal.
#
# ## Permutations: attention sees a set, not a sequence
#
# Reorder the queries with a permutation matrix $P$ and the output rows come out reordered
# the same way; reorder the keys and values together and the output does not change at all:
#
# $$
# \begin{aligned}
# \operatorname{MultiHead}(PQ, K, V) &= P\,\operatorname{MultiHead}(Q, K, V),\\
# \operatorname{MultiHead}(Q, PK, PV) &= \operatorname{MultiHead}(Q, K, V).
# \end{aligned}
# $$
#
# The first is *equivariance* in the queries: every query is processed on its own, by the
# same weights. The second is *invariance* in the key-value pairs: the softmax-weighted sum
# runs over a set, and a sum does not care about order. Both are easy to check:

# %%
query_order = torch.randperm(decoder_len, generator=generator)
key_order = torch.randperm(encoder_len, generator=generator)
reference = mha(decoder_states, encoder_states, encoder_states)

permuted_queries = mha(
    decoder_states[:, query_order], encoder_states, encoder_states
)
permuted_keys = mha(
    decoder_states, encoder_states[:, key_order], encoder_states[:, key_order]
)
print(
    "queries permuted -> rows permuted:",
    permuted_queries.allclose(reference[:, query_order], atol=1e-6),
)
print(
    "keys and values permuted -> unchanged:",
    permuted_keys.allclose(reference, atol=1e-6),
)

# %% tags=["remove-cell"]
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
same_vectors = out_mbd.allclose(out_dbm[:, [2, 1, 0]], atol=1e-6)
print("same three vectors, in the other order:", same_vectors)

# %% tags=["remove-cell"]
assert torch.allclose(out_mbd, out_dbm[:, [2, 1, 0]], atol=1e-6)

# %% [markdown]
# This is why Transformers need *positional encodings*: something in the input that says
# where each element sits, which chapter 5 adds. Without it the model treats its input as a
# set, which is exactly right for some data (points in a cloud, items in a basket) and wrong
# for language.
#
# ```{admonition} Pitfall: permuting the inputs but not the mask
# :class: warning
# With a mask, the statements above hold only if the mask's rows move with the queries and
# its columns with the keys: `mask[order][:, order]`. Permute the inputs but keep a causal
# mask fixed and the outputs change, because the mask itself encodes positions: causal
# attention is *not* blind to order. The cell below shows both.
# ```

# %%
order = torch.randperm(seq_len, generator=generator)
causal = causal_mask(seq_len)
masked = mha(x, x, x, mask=causal)
fixed_mask = mha(x[:, order], x[:, order], x[:, order], mask=causal)
moved_mask = mha(
    x[:, order], x[:, order], x[:, order], mask=causal[order][:, order]
)
fixed_mask_gap = (fixed_mask - masked[:, order]).abs().max().item()
print(f"mask kept in place: off by up to {fixed_mask_gap:.2f}")
print(
    "mask permuted too: equal", moved_mask.allclose(masked[:, order], atol=1e-6)
)

# %% tags=["remove-cell"]
assert fixed_mask_gap > 0.01
assert torch.allclose(moved_mask, masked[:, order], atol=1e-6)

# %% [markdown]
# :::{admonition} Going deeper: a `Conv1d` with `kernel_size=1` is a linear layer
# :class: dropdown
# {ref}`A fastai blog post <source-004>`, whose task chapter 8 takes up, computes its
# queries, keys and values with `nn.Conv1d(..., kernel_size=1)` on channels-first tensors of
# shape $(B, C, T)$. A convolution whose kernel covers one position applies the same
# $C_\text{out} \times C_\text{in}$ matrix at every position, which is exactly what
# `nn.Linear` does to a $(B, T, C)$ tensor. The two store the same numbers, the convolution
# with a trailing kernel dimension of size 1 (first folded cell below).
#
# So that post's attention layer is one attention head in disguise. Written channels-first
# with `Conv1d`, and without the $1/\sqrt{d}$ scaling (chapter 3 shows why that scaling
# matters), it equals our scaled dot-product attention with `scale=1` on the transposed
# input (second folded cell). The choice between the two is about which axis holds the
# features. The rest of the book keeps the features last, $(B, T, D)$, where `nn.Linear`,
# `nn.LayerNorm` and `torch.nn.MultiheadAttention` expect them.
# :::

# %% tags=["hide-cell"]
conv = nn.Conv1d(in_channels=8, out_channels=12, kernel_size=1)
linear = nn.Linear(in_features=8, out_features=12)
with torch.no_grad():
    linear.weight.copy_(conv.weight.squeeze(-1))  # (12, 8, 1) -> (12, 8)
    linear.bias.copy_(conv.bias)

channels_first = torch.randn(16, 8, 50, generator=generator)  # (B, C, T)
by_conv = conv(channels_first)  # (B, 12, T)
# via (B, T, C) and back
by_linear = linear(channels_first.transpose(1, 2)).transpose(1, 2)
print("Conv1d equals Linear:", by_conv.allclose(by_linear, atol=1e-6))
conv.weight.shape, linear.weight.shape

# %% tags=["remove-cell"]
assert torch.allclose(by_conv, by_linear, atol=1e-6)


# %% tags=["hide-cell"]
def conv_attention(x, conv_q, conv_k, conv_v):
    """The fastai post's layer: x (B, C, T) -> (B, C_out, T), unscaled."""
    queries, keys, values = conv_q(x), conv_k(x), conv_v(x)  # (B, C', T)
    # (B, T, T)
    weights = queries.transpose(1, 2).matmul(keys).softmax(dim=2)
    return weights.matmul(values.transpose(1, 2)).transpose(1, 2)


conv_q, conv_k, conv_v = (
    nn.Conv1d(8, n, kernel_size=1, bias=False) for n in (6, 6, 10)
)
as_linear = [layer.weight.squeeze(-1) for layer in (conv_q, conv_k, conv_v)]
tokens_last = channels_first.transpose(1, 2)  # (B, T, C)
head_out, _ = scaled_dot_product_attention(
    *(tokens_last @ weight.T for weight in as_linear), scale=1.0
)
by_conv_attention = conv_attention(channels_first, conv_q, conv_k, conv_v)
print(
    "equals one unscaled head:",
    by_conv_attention.allclose(head_out.transpose(1, 2), atol=1e-5),
)

# %% tags=["remove-cell"]
assert torch.allclose(
    conv_attention(channels_first, conv_q, conv_k, conv_v),
    head_out.transpose(1, 2),
    atol=1e-5,
)

# %% [markdown]
# ## Counting parameters
#
# Each of $W^Q, W^K, W^V, W^O$ is $D \times D$, so multi-head attention has
#
# $$
# 4D^2 \text{ weights} \quad (+\,4D \text{ biases}),
# $$
#
# whatever the number of heads: more heads means narrower heads, not more weights. The table
# counts the parameters of the book's fused and per-head modules and of
# `torch.nn.MultiheadAttention`, with and without biases, next to the formula.

# %%
rows = []
for d, h in [(64, 1), (64, 4), (64, 16), (512, 8)]:
    for bias in (False, True):
        counts = {
            "ours": count_parameters(MultiHeadAttention(d, h, bias=bias)),
            "per head": count_parameters(
                PerHeadMultiHeadAttention(d, h, bias=bias)
            ),
            "torch": count_parameters(nn.MultiheadAttention(d, h, bias=bias)),
        }
        formula = 4 * d * d + (4 * d if bias else 0)
        rows.append({"D": d, "H": h, "bias": bias, "4D² (+4D)": formula})
        rows[-1].update(counts)
parameter_table = pd.DataFrame(rows)
parameter_table

# %% tags=["remove-cell"]
module_counts = parameter_table[["ours", "per head", "torch"]]
assert module_counts.eq(parameter_table["4D² (+4D)"], axis=0).all().all()

# %% [markdown]
# Every count matches the formula, for every number of heads. (Some of the book's sources
# size their heads differently, one by mistake; see
# [Sources and errata](../book/sources.md).)
#
# ## What the output looks like: a singular-value picture
#
# A freshly built layer attends almost uniformly, so every query receives nearly the same
# average of the values: is its output then close to a single vector repeated? The singular
# values $\sigma_1 \ge \sigma_2 \ge \ldots$ of a $T \times D$ matrix measure this: a matrix of
# rank one has a single nonzero $\sigma_1$. A convenient single number is the *stable rank*
# $\sum_k \sigma_k^2 / \sigma_1^2$, which is at most the rank and is not fooled by tiny
# singular values. Here: $T=1024$ random tokens of width $D=128$ and a fresh layer with 8
# heads.


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
# The output is indeed close to rank one, while its queries and keys are not. But the layer
# is untrained: with small random weights the scores $q \cdot k / \sqrt{d_\text{head}}$ are
# small, the softmax is close to uniform, and every output row is close to the *average* of
# all value rows. Larger scores sharpen the attention. The cell below scales the input up and
# records the output's stable rank and how close to uniform the attention is (its entropy
# over the uniform one's, $\log T_k$: 1 means uniform).


# %%
def output_rank_and_entropy(scale: float) -> dict:
    inputs = scale * long_x
    with torch.no_grad():
        output, weights = rank_mha(
            inputs, inputs, inputs, return_attention=True
        )
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1).mean()
    return {
        "input scale": scale,
        "stable rank of MHA(x)": stable_rank(output[0]),
        "attention entropy / log T": (
            entropy / math.log(weights.shape[-1])
        ).item(),
    }


sharpness = pd.DataFrame(
    [output_rank_and_entropy(scale) for scale in (0.5, 1, 2, 3, 4, 6)]
)
sharpness.round(2)

# %% tags=["hide-input"]
fig = plt.figure(figsize=(6.2, 6.4), layout="constrained")
ax_spectrum, ax_rank, ax_entropy = fig.subplot_mosaic(
    [["spectrum", "spectrum"], ["rank", "entropy"]]
).values()
for name, matrix in spectra.items():
    sigma = singular_values(matrix)
    ax_spectrum.plot(to_numpy(sigma / sigma[0]), label=name)
ax_spectrum.set_xlabel("index k")
ax_spectrum.set_ylabel(r"$\sigma_k / \sigma_1$")
ax_spectrum.set_title("spectra at initialization, input scale 1")
ax_spectrum.legend()
ax_rank.plot(
    sharpness["input scale"],
    sharpness["stable rank of MHA(x)"],
    "o-",
    label="output MHA(x)",
)
ax_rank.axhline(
    stable_ranks["queries Q"], color="gray", linestyle=":", label="queries Q"
)
ax_rank.set_xlabel("input scale")
ax_rank.set_ylabel("stable rank")
ax_rank.set_title("output's stable rank")
ax_rank.legend(loc="lower right")
ax_entropy.plot(
    sharpness["input scale"],
    sharpness["attention entropy / log T"],
    "s--",
    color="C3",
)
ax_entropy.set_xlabel("input scale")
ax_entropy.set_ylabel("entropy / log T  (1 = uniform)")
ax_entropy.set_title("how uniform the attention is")
plt.show()

# %% [markdown]
# **Figure.** Top: normalized singular values $\sigma_k / \sigma_1$ of the queries, the keys,
# the layer's output and the output plus its input, for 1024 random tokens at initialization.
# The queries and keys decay slowly; the output's curve drops right after the first singular
# value (one direction dominates), and adding the input back, as a residual connection does
# (chapter 6), restores the slow decay. Bottom, as the inputs are scaled up: left, the
# output's stable rank climbs towards that of the queries (dotted line); right, the
# attention's entropy as a fraction of the uniform one's falls from 1 (uniform) as the
# attention sharpens.

# %% [markdown]
# In numbers: at input scale 1 the attention entropy is
# {glue:text}`ch4_entropy_scale1:.2f` of the uniform one and the output has a stable rank of
# {glue:text}`ch4_srank_out:.1f`, against {glue:text}`ch4_srank_q:.1f` for the queries and
# {glue:text}`ch4_srank_residual:.1f` for the output plus its input. At scale 4 the entropy
# ratio drops to {glue:text}`ch4_entropy_scale4:.2f` and the output's stable rank rises to
# {glue:text}`ch4_srank_out_scale4:.1f`. So a low-rank output comes with near-uniform
# attention, typical at initialization, and is not a property of the layer itself; the
# residual connection keeps the rank of what flows through the network either way.

# %% tags=["remove-cell"]
# The paragraph's claims, checked.
at = sharpness.set_index("input scale")
assert stable_ranks["MHA(x)"] < 0.25 * stable_ranks["queries Q"]
assert stable_ranks["x + MHA(x)"] > stable_ranks["queries Q"]
assert at.loc[1, "attention entropy / log T"] > 0.95
assert at.loc[4, "stable rank of MHA(x)"] > 5 * stable_ranks["MHA(x)"]
assert at["stable rank of MHA(x)"].is_monotonic_increasing
assert at["attention entropy / log T"].is_monotonic_decreasing

# %% tags=["remove-cell"]
# Numbers quoted in the paragraph.
helpers.glue("ch4_srank_out", round(float(stable_ranks["MHA(x)"]), 1))
helpers.glue("ch4_srank_q", round(float(stable_ranks["queries Q"]), 1))
helpers.glue("ch4_srank_residual", round(float(stable_ranks["x + MHA(x)"]), 1))
entropy, rank = "attention entropy / log T", "stable rank of MHA(x)"
helpers.glue("ch4_entropy_scale1", round(float(at.loc[1, entropy]), 2))
helpers.glue("ch4_entropy_scale4", round(float(at.loc[4, entropy]), 2))
helpers.glue("ch4_srank_out_scale4", round(float(at.loc[4, rank]), 1))
# the extremes, quoted by the Sources and errata page
helpers.glue("ch4_srank_scale_low", round(float(at.loc[0.5, rank]), 2))
helpers.glue("ch4_entropy_scale_low", round(float(at.loc[0.5, entropy]), 2))
helpers.glue("ch4_srank_scale_high", round(float(at.loc[6, rank]), 2))
helpers.glue("ch4_entropy_scale_high", round(float(at.loc[6, entropy]), 2))
helpers.glue("ch4_params_512", int(parameter_table["ours"].iloc[-1]))


# %% [markdown]
# ## Summary
#
# - Multi-head attention runs $H$ scaled dot-product attentions in $H$ projections of width
#   $D/H$, concatenates them and mixes them with $W^O$: $4D^2$ weights whatever $H$ is
#   ({glue:text}`ch4_params_512:,` for $D = 512$ with biases).
# - A list of heads and one fused projection reshaped into heads are the same function; the
#   fused one is fast. The reshape is `view(B, T, H, d_head).transpose(1, 2)`, and back.
# - The book's `MultiHeadAttention` equals both, and equals `torch.nn.MultiheadAttention`
#   with `in_proj_weight` = $[W^Q; W^K; W^V]$, the mask inverted and `batch_first=True`.
# - Several heads can retrieve several things for one query; one head returns one average.
#   Trained on two lookups, two heads split them between them on every seed.
# - Queries and keys may come from different sequences (cross-attention, $T_q \ne T_k$).
# - Without a mask or positional information the layer is equivariant in the queries and
#   invariant in the key-value pairs: it sees a set. Chapter 5 gives it positions.
# - An untrained layer's output is nearly rank one (stable rank
#   {glue:text}`ch4_srank_out:.1f`) because its attention is nearly uniform; sharper
#   attention gives a richer output.
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
#     d_head = d_model // num_heads
#     return x.view(batch, seq_len, num_heads, d_head).transpose(1, 2)
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
#     size = mha.d_head
#     rows = torch.cat([torch.arange(h * size, (h + 1) * size) for h in order])
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
#     if torch.allclose(
#         mha(x[:, order], x[:, order], x[:, order], mask=causal),
#         reference[:, order],
#         atol=1e-6,
#     )
# ]
# print(allowed)  # [(0, 1, 2, 3)]
# ~~~
#
# This is the sense in which a causal mask already carries positional information: a decoder
# without positional encodings can still tell positions apart a little, through what each
# position is allowed to see.
# ```
#
# **5. Masks for PyTorch's layer.** You have a `(B, 1, 1, T)` padding mask `pad` and a `(T, T)`
# causal mask in this book's convention. Write the `key_padding_mask` and `attn_mask`
# arguments for `nn.MultiheadAttention`, and check that its output then equals that of a
# `MultiHeadAttention` loaded from it with `load_multihead_attention`, given `causal & pad`.
#
# ```{admonition} Solution
# :class: dropdown
# Invert both, and drop the broadcast axes of the padding mask:
# `key_padding_mask=~pad[:, 0, 0]` of shape `(B, T)` and `attn_mask=~causal_mask(T)`.
# ```

# %% tags=["remove-cell"]
# Exercise 2's number, counted on the modules themselves (not computed from the formula).
params_768 = count_parameters(MultiHeadAttention(768, 12, bias=True))
assert params_768 == count_parameters(nn.MultiheadAttention(768, 12, bias=True))
assert params_768 == 4 * 768**2 + 4 * 768
assert checks.check_parameter_count(checks.mha_parameter_count).startswith(
    "Correct"
)
helpers.glue("ch4_params_768", params_768)

# %% tags=["remove-cell"]
# Exercise 5's solution, checked.
pad5, causal5 = padding_mask([5, 3]), causal_mask(5)
with torch.no_grad():
    torch_answer, _ = torch_mha(
        x5, x5, x5, key_padding_mask=~pad5[:, 0, 0], attn_mask=~causal5
    )
    loaded = load_multihead_attention(
        MultiHeadAttention(d_model, num_heads, bias=True), torch_mha
    )
    torch.testing.assert_close(torch_answer, loaded(x5, x5, x5, causal5 & pad5))
