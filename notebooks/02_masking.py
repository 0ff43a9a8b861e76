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
# # Masking: who may attend to whom
#
# Attention lets every query look at every key. Often that is too much: a language model
# predicting token $t$ must not see tokens after $t$; a batch of sentences padded to a common
# length must not attend to the padding; a decoder reading an encoder's output must skip the
# encoder's padding too. A **mask** says, for each (query, key) pair, whether the query may
# attend to that key.
#
# This chapter shows where the mask enters (before the softmax, and why not after), the two
# ways of writing one (boolean and additive) and what `-inf` and large negative numbers do,
# then builds causal masks, padding masks from sequence lengths and masks for
# cross-attention, each drawn next to the attention weights it produces. It ends with two traps:
# PyTorch's two attention APIs use *opposite* boolean conventions, and a query with no key to
# attend to needs a defined answer.
#
# The book uses one convention everywhere: **a boolean mask, `True` = may attend**, the
# convention of `torch.nn.functional.scaled_dot_product_attention`.

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

from helpers import expect_error, glue, show_source
from helpers.attention import (
    MultiHeadAttention,
    additive_mask,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from helpers.checks import check_sliding_window_mask
from helpers.plotting import heatmap

torch.set_printoptions(precision=2, sci_mode=False)
generator = torch.Generator().manual_seed(0)


# %% [markdown]
# Several cells below show an error on purpose. They run inside `helpers.expect_error`, which
# prints the error and fails loudly if nothing is raised, so each demonstration is also a check.
#
# ## Where the mask enters
#
# Attention turns scores $s_{ij}$ into weights with a softmax over the keys $j$. To forbid a
# pair, set its score to $-\infty$ **before** the softmax: $\exp(-\infty) = 0$, so the pair
# gets exactly zero weight, and the remaining weights of the row are renormalized among the
# allowed keys. With a boolean mask $m_{ij} \in \{0, 1\}$:
#
# $$
# a_{ij} = \frac{m_{ij} \exp(s_{ij})}{\sum_{l} m_{il} \exp(s_{il})} .
# $$
#
# From scratch, on four queries and four keys with the causal mask (query $i$ may see keys
# $0, \dots, i$):


# %%
def masked_softmax(scores, mask):
    """Softmax over the last axis where mask is True; masked entries get weight 0."""
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


scores = torch.randn(4, 4, generator=generator)
mask = torch.ones(4, 4, dtype=torch.bool).tril()
print("mask (True = may attend)\n", mask)
print("masked scores\n", scores.masked_fill(~mask, float("-inf")))
weights = masked_softmax(scores, mask)
print("weights\n", weights)
assert (weights[~mask] == 0).all()
torch.testing.assert_close(weights.sum(dim=-1), torch.ones(4))

# %% [markdown]
# ```{admonition} Pitfall: masking after the softmax
# :class: warning
# Source 002 explains masking as multiplying the attention weights by a 0/1 mask vector. Done
# literally, after the softmax, that zeroes the forbidden weights but leaves each row with a
# hidden key summing to less than one, and, worse, the forbidden keys still entered the softmax's denominator: the
# first query's weight still depends on the scores of future keys. The cell below shows both
# symptoms, the second through a gradient that should be zero and is not. The fix is to mask
# the **scores** (as the source's own code then does); `helpers.attention` does so, and the
# test `test_causal_mha_leaks_nothing_from_the_future` in `tests/test_attention.py` checks
# through gradients that no output depends on a later position.
# ```

# %%
scores_leaf = scores.clone().requires_grad_()
multiplied = scores_leaf.softmax(dim=-1) * mask  # masking after the softmax
print("row sums after multiplying:", multiplied.sum(dim=-1).detach())
multiplied[0, 0].backward()
leak = scores_leaf.grad[0, 1:].abs().max().item()
print(f"largest gradient of weight (0, 0) with respect to future scores: {leak:.3f}")
assert leak > 0 and (multiplied.sum(dim=-1)[:-1] < 1).all()

scores_leaf.grad = None
masked_softmax(scores_leaf, mask)[0, 0].backward()
assert (scores_leaf.grad[0, 1:] == 0).all()  # masking the scores: nothing leaks

# %% [markdown]
# ## Boolean and additive masks
#
# The same mask can be written as a matrix $M$ of $0$ (allowed) and $-\infty$ (forbidden)
# that is *added* to the scores: $\operatorname{softmax}(S + M)$. (The Transformer paper says
# it in words, setting the scores of illegal connections to $-\infty$ before the softmax
# {cite}`vaswani2017attention`; the sum $S + M$ is a common way to write that, and the form
# PyTorch's float `attn_mask` takes.) The additive form can carry more than yes/no (a finite
# bias per pair, as ALiBi does in chapter 5). `helpers.attention.additive_mask` converts a
# boolean mask into it:

# %%
additive = additive_mask(mask)
print(additive)
torch.testing.assert_close((scores + additive).softmax(dim=-1), weights)

# %% [markdown]
# PyTorch's `F.scaled_dot_product_attention` accepts both and tells them apart by dtype: a
# boolean `attn_mask` means True = take part, a float `attn_mask` is added to the scores.
# That makes a 0/1 **float** mask dangerous. The cell below also calls the book's
# `scaled_dot_product_attention(q, k, v, mask)` from `helpers.attention` (built in chapter 3):
# it returns `(output, weights)` and takes a boolean mask, True = may attend.
#
# ```{admonition} Pitfall: a 0/1 float mask is added, not applied
# :class: warning
# `torch.ones(T, T).tril()` is a float tensor. Passed as `attn_mask`, it adds 1 to the allowed
# scores and 0 to the forbidden ones: it masks nothing, and every query sees the future (the
# cell below measures how much weight goes to future keys). Source 000 warns about this in a
# comment and converts with `mask.bool()`. `helpers.attention` refuses float masks with a
# `TypeError` that names both fixes, `mask.bool()` for 0/1 indicators and `mask == 0` for an
# additive mask; `test_sdpa_errors` pins the message.
# ```

# %%
q, k = (
    torch.randn(2, 4, 8, generator=generator),
    torch.randn(2, 4, 8, generator=generator),
)
identity = torch.eye(4)  # with v = I the output is the weight matrix itself
float_mask = torch.ones(4, 4).tril()
as_float = F.scaled_dot_product_attention(q, k, identity, attn_mask=float_mask)
as_bool = F.scaled_dot_product_attention(q, k, identity, attn_mask=float_mask.bool())
future = ~causal_mask(4)
print(
    f"weight on future keys: float mask {as_float[:, future].sum():.2f}, "
    f"boolean mask {as_bool[:, future].sum():.2f}"
)
assert as_float[:, future].sum() > 1 and (as_bool[:, future] == 0).all()
with expect_error(TypeError):
    scaled_dot_product_attention(q, k, identity, float_mask)

# %% [markdown]
# ## Minus infinity, or a large negative number?
#
# Many implementations fill forbidden scores with a large negative constant instead of
# $-\infty$, often $-10^9$. For a row with at least one allowed key, in float32 that gives the
# same weights: $\exp(-10^9 - \max_j s_{ij})$ underflows to exactly 0.

# %%
minus_1e9 = scores.masked_fill(~mask, -1e9).softmax(dim=-1)
assert torch.equal(minus_1e9, weights)

# %% [markdown]
# ```{admonition} Pitfall: source 003 fills with -1e9, before scaling, in its own convention
# :class: warning
# Source 003's attention fills the *unscaled* scores with $-10^9$ and divides by $\sqrt{d}$
# afterwards, with a mask whose True means "hide". Three separate questions:
#
# - **Fill before scaling** is harmless: $-10^9/\sqrt{d}$ is still so negative that the
#   weight underflows to 0 (checked below for $d = 64$).
# - **The constant $-10^9$** does not fit in float16 (largest magnitude 65504): the fill raises
#   an overflow error, so the same model cannot run in half precision. $-\infty$ works in every
#   dtype. `test_masked_keys_get_exactly_zero_weight_even_in_half_precision` pins it.
# - A **row with every key hidden** gets uniform weights $1/T_k$ from a $-10^9$ fill, silently
#   averaging the very positions it meant to hide (next-to-last section of this chapter).
#   That is harmless in source 003 itself, which builds only causal masks (every row keeps at
#   least its own position), and a bug as soon as padding masks are added;
#   `test_minus_1e9_fill_averages_fully_masked_rows_uniformly` pins that `helpers` returns
#   zeros instead.
#
# Its mask builder also deserves a look: it creates `torch.full((T, T), float('-inf'),
# dtype=torch.bool)`, and $-\infty$ cast to bool is `True`, so after `torch.triu(...,
# diagonal=1)` the mask is right, by accident, in the source's True = hide convention. In this
# book's convention that mask is `~causal_mask(T)`.
# ```

# %%
d = 64
# raw q.k scores have variance d
unscaled = torch.randn(4, 4, generator=generator) * math.sqrt(d)
fill_then_scale = (unscaled.masked_fill(~mask, -1e9) / math.sqrt(d)).softmax(dim=-1)
scale_then_fill = masked_softmax(unscaled / math.sqrt(d), mask)
torch.testing.assert_close(fill_then_scale, scale_then_fill)
with expect_error(RuntimeError):  # float16 with -1e9
    unscaled.half().masked_fill(~mask, -1e9)
half_weights = masked_softmax(unscaled.half(), mask)
print(
    "float16 with -inf: weights on hidden keys",
    half_weights[~mask].float().abs().max().item(),
)
assert half_weights.dtype == torch.float16 and (half_weights[~mask] == 0).all()
source_003_mask = torch.full((4, 4), float("-inf"), dtype=torch.bool).triu(diagonal=1)
assert torch.equal(source_003_mask, ~causal_mask(4))

# %% [markdown]
# ## Causal masks
#
# In a model that predicts the next token, position $t$ may use positions $0, \dots, t$ and
# nothing later: the mask is lower-triangular, `causal_mask(T)` in `helpers`. To see masks at
# work we draw each one next to the weights it produces for random queries and keys.


# %% tags=["hide-input"]
def show_mask_and_weights(masks, weights, titles):
    """One column per example: the mask on top, the attention weights it produces below."""
    fig, axes = plt.subplots(
        2, len(masks), figsize=(3.1 * len(masks), 5.4), squeeze=False
    )
    for column, (mask_2d, weights_2d, title) in enumerate(
        zip(masks, weights, titles, strict=True)
    ):
        heatmap(
            mask_2d.float(),
            ax=axes[0, column],
            title=f"mask: {title}",
            cmap="Greys",
            vmin=0,
            vmax=1,
            colorbar=False,
        )
        heatmap(
            weights_2d,
            ax=axes[1, column],
            title="weights",
            vmin=0,
            vmax=1,
            colorbar=column == len(masks) - 1,
        )
    fig.tight_layout()
    plt.show()


# %%
T = 8
q8, k8, v8 = (torch.randn(T, 16, generator=generator) for _ in range(3))
causal = causal_mask(T)
_, causal_weights = scaled_dot_product_attention(q8, k8, v8, causal)
_, free_weights = scaled_dot_product_attention(q8, k8, v8)
show_mask_and_weights(
    [torch.ones(T, T, dtype=torch.bool), causal],
    [free_weights, causal_weights],
    ["none", "causal"],
)

# %% [markdown]
# **Figure.** Top: the masks (black = may attend). Bottom: the weights they produce for the
# same random queries and keys. Without a mask every row spreads over all 8 keys; with the
# causal mask the upper triangle is exactly zero, the first query puts all its weight on
# itself, and later queries share theirs among more and more keys.
#
# The claim "nothing leaks from the future" can be checked exactly: the gradient of output
# $t$ with respect to every key and value after $t$ must be zero, not just small.

# %%
k_leaf, v_leaf = k8.clone().requires_grad_(), v8.clone().requires_grad_()
for t in range(T):
    output, _ = scaled_dot_product_attention(q8, k_leaf, v_leaf, causal)
    k_grad, v_grad = torch.autograd.grad(output[t].sum(), (k_leaf, v_leaf))
    assert (k_grad[t + 1 :] == 0).all() and (v_grad[t + 1 :] == 0).all()
    assert (v_grad[: t + 1].abs().sum(dim=-1) > 0).all()
print("output t depends on keys and values 0..t only, for every t")

# %% [markdown]
# ## Padding masks from sequence lengths
#
# Sequences in a batch have different lengths; we pad them to a common length $T$ and record
# each one's true length. Key $j$ of sequence $b$ is real when $j < \text{length}_b$.
# `padding_mask(lengths)` returns that as a `(B, 1, 1, T)` tensor: the two size-1 axes
# broadcast over the heads and over the queries, because every query of a sequence must ignore
# the same padded keys.

# %%
show_source(padding_mask)

# %%
lengths = [8, 5, 3]
pad = padding_mask(lengths, max_len=T)
print(f"padding mask {tuple(pad.shape)}:\n{pad[:, 0, 0].int()}")
batch_q, batch_k, batch_v = (
    torch.randn(3, T, 16, generator=generator) for _ in range(3)
)
_, pad_weights = scaled_dot_product_attention(batch_q, batch_k, batch_v, pad[:, 0])
both = causal & pad[:, 0]  # (T, T) & (B, 1, T) -> (B, T, T)
_, both_weights = scaled_dot_product_attention(batch_q, batch_k, batch_v, both)
for b, length in enumerate(lengths):
    assert (pad_weights[b, :, length:] == 0).all() and (
        both_weights[b, :, length:] == 0
    ).all()
show_mask_and_weights(
    [pad[1, 0].expand(T, T), both[1]],
    [pad_weights[1], both_weights[1]],
    ["padding, length 5", "causal and padding"],
)

# %% [markdown]
# **Figure.** The sequence of length 5 from the batch. Left: with the padding mask, keys 5 to
# 7 get no weight from any query. Right: combined with the causal mask (a logical *and*), each
# query sees the real keys up to itself. Queries 5 to 7 are padding themselves: they still
# compute an output, which is meaningless and must be left out of the loss, as training code
# does by ignoring padded targets.
#
# ## Masks for cross-attention
#
# In cross-attention the queries come from one sequence (say a decoder's $T_q$ tokens) and the
# keys and values from another (an encoder's $T_k$ tokens), so the mask is $T_q \times T_k$.
# What must be hidden is usually the encoder's padding, and the padding mask built from the
# *encoder's* lengths already has the right shape: its query axis has size 1 and broadcasts
# to any $T_q$.

# %%
decoder_len, encoder_lengths = 4, [6, 3]
encoder_pad = padding_mask(encoder_lengths)  # (2, 1, 1, 6)
dec_q = torch.randn(2, decoder_len, 16, generator=generator)
enc_k, enc_v = (
    torch.randn(2, 6, 16, generator=generator),
    torch.randn(2, 6, 16, generator=generator),
)
cross_out, cross_weights = scaled_dot_product_attention(
    dec_q, enc_k, enc_v, encoder_pad[:, 0]
)
print(
    f"queries {tuple(dec_q.shape)}, keys {tuple(enc_k.shape)} -> weights {tuple(cross_weights.shape)}"
)
assert (cross_weights[1, :, 3:] == 0).all()
show_mask_and_weights(
    [
        encoder_pad[0, 0].expand(decoder_len, 6),
        encoder_pad[1, 0].expand(decoder_len, 6),
    ],
    [cross_weights[0], cross_weights[1]],
    ["encoder length 6", "encoder length 3"],
)

# %% [markdown]
# **Figure.** Four decoder queries attend to six encoder positions. Each column of the mask
# is one encoder position, shared by all queries; for the second sequence the last three
# columns are padding and get zero weight from every decoder query.
#
# A lower-triangular mask on a non-square shape, such as `torch.ones(4, 6).tril()`, is
# legal but means "query $i$ may see keys $0, \dots, i$": causal only if query $i$ and key $i$
# stand for the same moment in time, which two different sequences rarely do.
#
# ## Mask shapes and broadcasting
#
# Inside multi-head attention (chapter 4; `helpers.attention.MultiHeadAttention` is the
# module built there) scores have shape $(B, H, T_q, T_k)$. `helpers` accepts masks of shape
# $(T_q, T_k)$ (one pattern for everything), $(B, T_q, T_k)$ (one per sequence, shared by the
# heads) and $(B, H, T_q, T_k)$, with size-1 axes broadcasting.
#
# Plain broadcasting gets the 3-D case wrong. It aligns shapes from the right, so a
# $(B, T_q, T_k)$ mask against $(B, H, T_q, T_k)$ scores lines $B$ up with $H$: mask $b$ goes
# to head $b$ of *every* sequence. With $B \ne H$ that is a shape error; with $B = H$ it runs
# silently. `F.scaled_dot_product_attention` broadcasts this way. The cell below runs the trap
# with $B = H = 2$ and the two sequences of lengths 8 and 5 from above, causal and padded:
# sequence 1's head 0 gets sequence 0's mask, which is causal but lets it see sequence 1's
# padding, and sequence 0's head 1 gets sequence 1's mask.

# %%
per_sequence = causal & padding_mask([8, 5])[:, 0]  # (B=2, T, T), True = may attend
q4, k4, v4 = (torch.randn(2, 2, T, 16, generator=generator) for _ in range(3))  # H = 2
identity8 = torch.eye(T)  # with v = I the output is the weight matrix itself
lined_up = F.scaled_dot_product_attention(q4, k4, identity8, attn_mask=per_sequence)
leaked = lined_up[1, 0, :, 5:].sum().item()  # sequence 1, head 0, on its padding
print(
    f"plain broadcasting: sequence 1, head 0, total weight on its padding {leaked:.2f}"
)
assert leaked > 0.5
_, right = scaled_dot_product_attention(q4, k4, v4, per_sequence[:, None])
assert (right[1, :, :, 5:] == 0).all()  # every head of sequence 1 skips its padding

# %% [markdown]
# `helpers` removes the ambiguity by documenting it: against 4-D scores a 3-D mask **is**
# $(B, T_q, T_k)$, and both `scaled_dot_product_attention` and `MultiHeadAttention` insert
# the head axis themselves, using it as `mask[:, None]`. A mask per head that is shared by the
# batch is written $(1, H, T_q, T_k)$. `test_3d_mask_against_4d_scores_is_per_sequence_shared_by_heads`
# pins both the rule and the trap, for $B = H$ and $B \ne H$.

# %%
ours_3d, _ = scaled_dot_product_attention(q4, k4, v4, per_sequence)
ours_4d, _ = scaled_dot_product_attention(q4, k4, v4, per_sequence[:, None])
assert torch.equal(ours_3d, ours_4d)
torch.manual_seed(0)
mha = MultiHeadAttention(d_model=16, num_heads=2)
x = torch.randn(2, T, 16, generator=generator)
torch.testing.assert_close(
    mha(x, x, x, per_sequence), mha(x, x, x, per_sequence[:, None])
)

# %% [markdown]
# ## The opposite convention of `torch.nn.MultiheadAttention`
#
# PyTorch has two attention APIs, and their boolean masks mean opposite things:
#
# | API | boolean mask argument | `True` means |
# | --- | --- | --- |
# | `F.scaled_dot_product_attention` | `attn_mask` | take part (may attend) |
# | `torch.nn.MultiheadAttention` | `key_padding_mask` $(B, T_k)$, `attn_mask` | ignore |
# | this book's `helpers` | `mask` | may attend |
#
# ```{admonition} Pitfall: passing a "may attend" mask to torch.nn.MultiheadAttention
# :class: warning
# A padding mask in this book's convention, handed to `nn.MultiheadAttention` as
# `key_padding_mask`, hides the real tokens and keeps the padding. The cell below runs it: the
# full-length sequence has every key hidden and comes out as NaN, and the shorter one attends
# *only* to its padding. The fix is `~mask` (and, for a `(B, 1, 1, T)` mask, the `(B, T)`
# slice `mask[:, 0, 0]`). `test_torch_mha_uses_the_opposite_convention` pins that with the
# inversion both modules agree.
# ```

# %%
torch.manual_seed(0)
torch_mha = nn.MultiheadAttention(16, num_heads=2, batch_first=True)
ours = MultiHeadAttention(16, num_heads=2, bias=True).load_from_torch(torch_mha)
x = torch.randn(2, 5, 16, generator=generator)
lengths_2 = padding_mask([5, 3])  # (2, 1, 1, 5), True = real token
wrong_out, wrong_weights = torch_mha(x, x, x, key_padding_mask=lengths_2[:, 0, 0])
right_out, right_weights = torch_mha(x, x, x, key_padding_mask=~lengths_2[:, 0, 0])
print("without ~, full sequence is NaN:", torch.isnan(wrong_out[0]).all().item())
print(
    "without ~, weight of the short sequence on its padding:",
    wrong_weights[1, :, 3:].sum(-1).detach().round(decimals=3),
)
assert torch.isnan(wrong_out[0]).all()
torch.testing.assert_close(wrong_weights[1, :, 3:].sum(-1), torch.ones(5))
torch.testing.assert_close(right_out, ours(x, x, x, lengths_2))
torch.testing.assert_close(
    torch_mha(x, x, x, attn_mask=~causal_mask(5))[0], ours(x, x, x, causal_mask(5))
)

# %% [markdown]
# ## Rows with nothing to attend to
#
# Sometimes a query may attend to no key at all: an empty sequence in a batch, a query-side
# mask in cross-attention, a window that falls outside the sequence. The softmax of a row of
# $-\infty$ is $0/0$. Different implementations answer differently:

# %%
q_row = torch.randn(3, 4, generator=generator)  # Tq = 3 queries
k_row, v_row = (
    torch.randn(4, 4, generator=generator),
    torch.randn(4, 4, generator=generator),
)
empty_row = torch.ones(3, 4, dtype=torch.bool)
empty_row[1] = False  # query 1 may see no key
raw = q_row @ k_row.T / math.sqrt(q_row.shape[-1])
outputs = {
    "softmax of -inf fill": masked_softmax(raw, empty_row) @ v_row,
    "softmax of -1e9 fill": raw.masked_fill(~empty_row, -1e9).softmax(-1) @ v_row,
    "F.scaled_dot_product_attention": F.scaled_dot_product_attention(
        q_row, k_row, v_row, attn_mask=empty_row
    ),
}
outputs["helpers.attention"], _ = scaled_dot_product_attention(
    q_row, k_row, v_row, empty_row
)

# %% [markdown]
# `nn.MultiheadAttention` has no per-row mask in the book's sense; its own way of emptying a
# row is a sequence whose keys are all padding. The next cell builds one (in its convention,
# True = ignore) and feeds it to a fresh layer; the cell after it tabulates what each
# implementation returns for the empty row.

# %%
torch.manual_seed(0)
empty_mha = nn.MultiheadAttention(16, num_heads=2, batch_first=True)
x_empty = torch.randn(2, 5, 16, generator=generator)
all_padding = torch.zeros(2, 5, dtype=torch.bool)
all_padding[0] = True  # sequence 0: every key ignored
with torch.no_grad():
    empty_out, _ = empty_mha(x_empty, x_empty, x_empty, key_padding_mask=all_padding)
mha_row = empty_out[0, 1]  # sequence 0, query 1


# %%
def describe(row):
    if torch.isnan(row).any():
        return "NaN"
    if (row == 0).all():
        return "zero vector"
    if torch.allclose(row, v_row.mean(dim=0)):
        return "uniform average of all values"
    return "something else"


answers = {name: describe(output[1]) for name, output in outputs.items()}
answers["nn.MultiheadAttention"] = describe(mha_row)
behaviour = pd.DataFrame({"output of the empty row": answers})
glue("ch2_torch_version", torch.__version__.split("+")[0])
behaviour

# %% [markdown]
# NaN is the worst answer: it spreads through every later layer into the loss, and one
# backward pass later every parameter is NaN. The uniform average of $-10^9$ is quieter and as
# wrong, since it reads exactly the positions the mask was meant to hide. PyTorch's fused
# kernel returns zeros with the version this page was built with
# ({glue:text}`ch2_torch_version`, on the CPU), but that is version- and backend-dependent:
# it has not always done so and need not on every device, so the cell below asserts it for
# this build only. `helpers.attention` therefore fixes the answer itself, on every path: **a
# query with no allowed key gets all-zero weights and a zero output**, with finite gradients.
# The module docstring says so and
# `test_fully_masked_row_gives_zero_weights_and_zero_output_without_nan` pins it.

# %%
assert behaviour.loc["softmax of -inf fill"].item() == "NaN"
assert behaviour.loc["softmax of -1e9 fill"].item() == "uniform average of all values"
assert behaviour.loc["nn.MultiheadAttention"].item() == "NaN"
assert behaviour.loc["helpers.attention"].item() == "zero vector"
# version-dependent: what the pinned PyTorch does on the CPU
assert behaviour.loc["F.scaled_dot_product_attention"].item() == "zero vector"
q_leaf = q_row.clone().requires_grad_()
output, weights_row = scaled_dot_product_attention(q_leaf, k_row, v_row, empty_row)
output.sum().backward()
assert torch.isfinite(q_leaf.grad).all() and (weights_row[1] == 0).all()

# %% [markdown]
# The naive version, a softmax over a row of $-\infty$, poisons the gradients as well:

# %%
k_leaf, v_leaf = k_row.clone().requires_grad_(), v_row.clone().requires_grad_()
naive_scores = q_row @ k_leaf.T / math.sqrt(q_row.shape[-1])
nan_weights = naive_scores.masked_fill(~empty_row, float("-inf")).softmax(-1)
(nan_weights @ v_leaf).sum().backward()
nan_fraction = v_leaf.grad.isnan().float().mean().item()
assert nan_fraction == 1.0  # one empty row poisons the gradient of every value
num_empty, num_rows = int((~empty_row.any(-1)).sum()), empty_row.shape[0]
glue("ch2_nan_fraction", round(100 * nan_fraction))
glue("ch2_empty_rows", num_empty)
glue("ch2_query_rows", num_rows)
print(f"naive version: {100 * nan_fraction:.0f}% of the value gradients are NaN")

# %% [markdown]
# In the naive version {glue:text}`ch2_empty_rows` empty row out of
# {glue:text}`ch2_query_rows` already makes {glue:text}`ch2_nan_fraction`% of the gradients
# of the values NaN, since every value receives gradient through that row's NaN weights; after
# the next optimizer step, the whole model would be.
#
# ## Exercises
#
# 1. Write `sliding_window_mask(T, window)`: a causal mask in which query $t$ may attend only
#    to keys $t - \text{window} + 1, \dots, t$ (local attention, as in Longformer-style
#    models). Check it with `check_sliding_window_mask(sliding_window_mask)` from
#    `helpers.attention`.
# 2. A batch has lengths `[4, 0]`. What does `scaled_dot_product_attention` return for the
#    second sequence under `padding_mask([4, 0])`, and why is that better for training than
#    what `nn.MultiheadAttention` returns?
# 3. You have a `(B, 1, 1, T)` padding mask and a `(T, T)` causal mask in this book's
#    convention. Write the `key_padding_mask` and `attn_mask` arguments for
#    `nn.MultiheadAttention`.
#
# ```{admonition} Solution 1
# :class: dropdown
# Compare key and query positions: keys at or before the query, and fewer than `window` steps
# back.
#
#     def sliding_window_mask(T, window):
#         query = torch.arange(T)[:, None]
#         key = torch.arange(T)[None, :]
#         return (key <= query) & (key > query - window)
#
# A cell not shown on the site runs the checker on exactly this function.
# ```


# %% tags=["remove-cell"]
def sliding_window_mask(T, window):
    query = torch.arange(T)[:, None]
    key = torch.arange(T)[None, :]
    return (key <= query) & (key > query - window)


assert check_sliding_window_mask(sliding_window_mask).startswith("Correct")

# %% [markdown]
# ```{admonition} Solution 2
# :class: dropdown
# Every query of the second sequence has no allowed key, so its weights are all zero and its
# outputs are zero vectors, with finite gradients. `nn.MultiheadAttention` returns NaN there,
# which would turn the loss and then every parameter into NaN. (Either way the outputs of an
# empty sequence carry no information, and the loss should skip them.)
# ```
#
# ```{admonition} Solution 3
# :class: dropdown
# Invert both, and drop the broadcast axes of the padding mask:
# `key_padding_mask=~pad[:, 0, 0]` of shape `(B, T)` and `attn_mask=~causal_mask(T)`.
# ```
