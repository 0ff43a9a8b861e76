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
# After this chapter you will be able to:
#
# - apply a mask where it belongs, to the scores before the softmax, in its boolean or its
#   additive form, and avoid the float-mask trap of PyTorch's `attn_mask`;
# - build causal masks, padding masks from sequence lengths and cross-attention masks, and
#   combine them;
# - say what a query with no allowed key should return, and why NaN is the worst answer.
#
# ```{figure} ../book/_static/diagrams/map_02.svg
# :alt: The book's map of the Transformer: the encoder's self-attention box and the decoder's masked self-attention and cross-attention boxes are highlighted.
# :width: 60%
# :name: fig-map-02
#
# Where this chapter sits in the Transformer: every attention box takes a mask, causal in the
# decoder's self-attention, padding in the encoder's self-attention and in cross-attention.
# ```
#
# The book uses one convention everywhere: **a boolean mask, `True` = may attend**, the
# convention of PyTorch's `torch.nn.functional.scaled_dot_product_attention`.

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
import torch
import torch.nn.functional as F

import helpers
from helpers import expect_error, glue
from helpers.attention import scaled_dot_product_attention
from helpers.checks import check_sliding_window_mask
from helpers.masks import additive_mask, causal_mask, padding_mask
from helpers.plotting import show_mask_and_weights
from helpers.tasks.masking_lm import (
    HALF,
    VOCAB_SIZE,
    copy_sequences,
    loss_floor,
)

device = helpers.get_device()  # a GPU if there is one, else the CPU

torch.set_printoptions(precision=2, sci_mode=False)
generator = torch.Generator().manual_seed(0)

# The model trained here is so small that splitting each matrix product over
# several CPU threads costs more in synchronization than it saves.
helpers.use_one_thread(device)


# %% [markdown]
# A few cells below show an error on purpose: they run it inside `expect_error`, which prints
# the error message.
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
# The mask has the shape of the scores, $T_q \times T_k$. From scratch, on four queries and four keys with the causal mask (query $i$ may see keys
# $0, \dots, i$):


# %%
def masked_softmax(scores, mask):
    """Softmax over the last axis where mask is True; others get weight 0."""
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


scores = torch.randn(4, 4, generator=generator)
mask = torch.ones(4, 4, dtype=torch.bool).tril()
print("mask (True = may attend)\n", mask)
print("masked scores\n", scores.masked_fill(~mask, float("-inf")))
weights = masked_softmax(scores, mask)
print("weights\n", weights)

# %% tags=["remove-cell"]
assert (weights[~mask] == 0).all()
torch.testing.assert_close(weights.sum(dim=-1), torch.ones(4))

# %% [markdown]
# ```{admonition} Pitfall: masking after the softmax
# :class: warning
# "Multiply the attention weights by a 0/1 mask" sounds like masking, and it runs. Done after
# the softmax, it zeroes the forbidden weights but leaves each row with a hidden key summing
# to less than one, and, worse, the forbidden keys still entered the softmax's denominator:
# the first query's weight still depends on the scores of future keys. The cell below shows
# both symptoms, the second through a gradient that should be zero and is not. The fix is to
# mask the **scores**, as `masked_softmax` does.
# ```

# %%
scores_leaf = scores.clone().requires_grad_()
multiplied = scores_leaf.softmax(dim=-1) * mask  # masking after the softmax
print("row sums after multiplying:", multiplied.sum(dim=-1).detach())
multiplied[0, 0].backward()
leak = scores_leaf.grad[0, 1:].abs().max().item()
print(f"largest gradient of weight (0, 0) w.r.t. future scores: {leak:.3f}")
scores_leaf.grad = None
masked_softmax(scores_leaf, mask)[0, 0].backward()
fixed_leak = scores_leaf.grad[0, 1:].abs().max().item()
print(f"the same after masking the scores: {fixed_leak:.3f}")

# %% tags=["remove-cell"]
assert leak > 0 and (multiplied.sum(dim=-1)[:-1] < 1).all()
assert (scores_leaf.grad[0, 1:] == 0).all()  # masking the scores: nothing leaks

# %% [markdown]
# ## A masked attention function
#
# Chapter 1 ended with dot-product scores. With the masked softmax they make a complete
# attention function: scores $q_i \cdot k_j$ for every pair, divided by $\sqrt{d}$ (the width
# of queries and keys; chapter 3 explains why), masked, normalized over the keys, and used to
# average the values. It returns the weights too, so that we can look at them.


# %%
def masked_attention(q, k, v, mask=None):
    """Dot-product attention with a boolean mask (True = may attend)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


# %% [markdown]
# PyTorch has the same computation built in, `F.scaled_dot_product_attention(q, k, v,
# attn_mask=mask)`, which returns only the output, and the book's package has it as
# `scaled_dot_product_attention(q, k, v, mask)`, which returns the output and the weights. On
# a mask that leaves every query at least one key, all three agree:

# %%
q, k, v = (torch.randn(2, 4, 8, generator=generator) for _ in range(3))
ours, ours_weights = masked_attention(q, k, v, mask)
package, package_weights = scaled_dot_product_attention(q, k, v, mask)
pytorch = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
agree = torch.allclose(package, ours, atol=1e-6) and torch.allclose(
    pytorch, ours, atol=1e-6
)
print(f"ours, the package's and PyTorch's agree within 1e-6: {agree}")

# %% tags=["remove-cell"]
torch.testing.assert_close(package, ours)
torch.testing.assert_close(package_weights, ours_weights)
torch.testing.assert_close(pytorch, ours)
assert agree

# %% [markdown]
# ## Boolean and additive masks
#
# The same mask can be written as a matrix $M$ of $0$ (allowed) and $-\infty$ (forbidden)
# that is *added* to the scores: $\operatorname{softmax}(S + M)$. (The Transformer paper says
# it in words, setting the scores of illegal connections to $-\infty$ before the softmax
# {cite}`vaswani2017attention`; the sum $S + M$ is a common way to write that, and the form
# PyTorch's float `attn_mask` takes.) The additive form can carry more than yes/no (a finite
# bias per pair, as ALiBi does in chapter 5). `additive_mask` converts a boolean mask into
# it, and adding it to the scores gives the same weights as the boolean mask:

# %%
additive = additive_mask(mask)
print(additive)
same = torch.allclose((scores + additive).softmax(dim=-1), weights)
print("same weights as the boolean mask:", same)

# %% tags=["remove-cell"]
torch.testing.assert_close((scores + additive).softmax(dim=-1), weights)
assert same

# %% [markdown]
# PyTorch's `F.scaled_dot_product_attention` accepts both and tells them apart by dtype: a
# boolean `attn_mask` means True = take part, a float `attn_mask` is added to the scores.
# That makes a 0/1 **float** mask dangerous.
#
# ```{admonition} Pitfall: a 0/1 float mask is added, not applied
# :class: warning
# `torch.ones(T, T).tril()` is a float tensor. Passed as `attn_mask`, it adds 1 to the allowed
# scores and 0 to the forbidden ones: it masks nothing, and every query sees the future (the
# cell below measures how much weight goes to future keys). Convert with `mask.bool()`. The
# book's `scaled_dot_product_attention` refuses float masks with a `TypeError` that names both
# fixes, `mask.bool()` for 0/1 indicators and `mask == 0` for an additive mask.
# ```

# %%
identity = torch.eye(4)  # with v = I the output is the weight matrix itself
float_mask = torch.ones(4, 4).tril()
as_float = F.scaled_dot_product_attention(q, k, identity, attn_mask=float_mask)
as_bool = F.scaled_dot_product_attention(
    q, k, identity, attn_mask=float_mask.bool()
)
future = ~causal_mask(4)  # True above the diagonal
# per query: the share of its weight on keys after it (query 3 has none)
on_future = (as_float * future).sum(-1)[:, :3]
in_bool = (as_bool * future).sum(-1)[:, :3]
print(f"float mask: {on_future.mean():.2f} of a query's weight on the future")
print(f"boolean mask: {in_bool.mean():.2f}")

# %% tags=["remove-cell"]
assert on_future.mean() > 0.2 and (on_future > 0).all() and (in_bool == 0).all()

# %%
try:
    scaled_dot_product_attention(q, k, identity, float_mask)
except TypeError as error:
    print(textwrap.fill(f"TypeError: {error}", width=78))

# %% tags=["remove-cell"]
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
print("same weights as with -inf:", torch.equal(minus_1e9, weights))

# %% tags=["remove-cell"]
assert torch.equal(minus_1e9, weights)

# %% [markdown]
# The constant has two costs that $-\infty$ does not. It does not fit in float16 (largest
# magnitude 65504), so the fill itself fails and the same model cannot run in half precision,
# while $-\infty$ works in every dtype. And a row with every key hidden gets uniform weights
# $1/T_k$ from a $-10^9$ fill, silently averaging the very positions it meant to hide (last
# section of this chapter).

# %%
d = 64
# raw q.k scores have variance d
unscaled = torch.randn(4, 4, generator=generator) * math.sqrt(d)
with expect_error(RuntimeError):  # float16 with -1e9
    unscaled.half().masked_fill(~mask, -1e9)
half_weights = masked_softmax(unscaled.half(), mask)
hidden_max = half_weights[~mask].float().abs().max().item()
print("float16 with -inf: largest weight on a hidden key", hidden_max)

# %% tags=["remove-cell"]
assert half_weights.dtype == torch.float16 and (half_weights[~mask] == 0).all()
# The source audit (Sources and errata): filling the unscaled scores with -1e9 and
# scaling afterwards gives the same weights; the source's mask builder, -inf cast to bool,
# is right by accident in the True = hide convention.
fill_then_scale = (unscaled.masked_fill(~mask, -1e9) / math.sqrt(d)).softmax(
    dim=-1
)
scale_then_fill = masked_softmax(unscaled / math.sqrt(d), mask)
torch.testing.assert_close(fill_then_scale, scale_then_fill)
hide_mask_as_built = torch.full((4, 4), float("-inf"), dtype=torch.bool).triu(
    diagonal=1
)
assert torch.equal(hide_mask_as_built, ~causal_mask(4))

# %% [markdown]
# ## Causal masks
#
# In a model that predicts the next token, position $t$ may use positions $0, \dots, t$ and
# nothing later: the mask is lower-triangular, `causal_mask(T)`. To see masks at
# work we draw each one next to the weights it produces for random queries and keys. Cells a
# mask hides are drawn hatched grey in both rows: there the weight is exactly zero, which the
# colour scale (for weights that are merely small) never shows.

# %%
T = 8
q8, k8, v8 = (torch.randn(T, 16, generator=generator) for _ in range(3))
causal = causal_mask(T)
_, causal_weights = masked_attention(q8, k8, v8, causal)
_, free_weights = masked_attention(q8, k8, v8)
show_mask_and_weights(
    [torch.ones(T, T, dtype=torch.bool), causal],
    [free_weights, causal_weights],
    ["none", "causal"],
)

# %% [markdown]
# **Figure.** Top: the masks (green = may attend, hatched grey = masked). Bottom: the weights
# they produce for the same random queries and keys, on one colour scale. Without a mask every
# row spreads over all 8 keys; with the causal mask the upper triangle is exactly zero, the
# first query puts all its weight on itself (the yellow corner), and later queries share
# theirs among more and more keys.
#
# The claim "nothing leaks from the future" can be checked exactly: the gradient of output
# $t$ with respect to every key and value after $t$ must be zero, not just small.

# %%
k_leaf, v_leaf = k8.clone().requires_grad_(), v8.clone().requires_grad_()
largest_leak = 0.0
for t in range(T - 1):
    output, _ = masked_attention(q8, k_leaf, v_leaf, causal)
    k_grad, v_grad = torch.autograd.grad(output[t].sum(), (k_leaf, v_leaf))
    later = torch.cat([k_grad[t + 1 :], v_grad[t + 1 :]])
    largest_leak = max(largest_leak, later.abs().max().item())
print(f"largest gradient w.r.t. a later key or value: {largest_leak}")

# %% tags=["remove-cell"]
assert largest_leak == 0.0
for t in range(T):
    output, _ = masked_attention(q8, k_leaf, v_leaf, causal)
    k_grad, v_grad = torch.autograd.grad(output[t].sum(), (k_leaf, v_leaf))
    assert (k_grad[t + 1 :] == 0).all() and (v_grad[t + 1 :] == 0).all()
    assert (v_grad[: t + 1].abs().sum(dim=-1) > 0).all()

# %% [markdown]
# ## A model trained with and without the mask
#
# Does the mask matter once a model learns? A tiny next-token model answers. Its data are
# sequences of 16 tokens: 8 random symbols out of 16, then the same 8 again
# (`copy_sequences` from the book's package). Predicting each next token from the tokens
# before it, a model can get the repeated half exactly right and can only guess the random
# half, one chance in 16: no model that reads only the past gets its mean loss (cross-entropy,
# in nats) below the floor `loss_floor()`, {glue:text}`ch2_loss_floor` nats.
#
# The model is the smallest that can copy: each token and each position gets a learned vector
# (chapter 5 is about better ways to encode positions), one `masked_attention` reads the
# other tokens with learned queries, keys and values, and a readout turns the result into 16
# scores for the next token. `causal=False` drops the mask and nothing else.


# %%
class TinyLM(torch.nn.Module):
    """Token and position vectors, one attention, a readout to the vocabulary."""

    def __init__(self, causal, d=32, max_len=2 * HALF):
        super().__init__()
        self.causal = causal
        self.embed = torch.nn.Embedding(VOCAB_SIZE, d)
        self.position = torch.nn.Embedding(max_len, d)
        self.q, self.k, self.v = (
            torch.nn.Linear(d, d, bias=False) for _ in range(3)
        )
        self.readout = torch.nn.Linear(d, VOCAB_SIZE)

    def forward(self, tokens):  # (B, T) -> (B, T, VOCAB_SIZE)
        T = tokens.shape[1]
        h = self.embed(tokens) + self.position.weight[:T]
        mask = causal_mask(T) if self.causal else None
        attended, _ = masked_attention(self.q(h), self.k(h), self.v(h), mask)
        return self.readout(h + attended)


# %% [markdown]
# Training is the usual loop: a fresh batch of sequences, the scores at every position for
# the token after it, the cross-entropy, a gradient step. Three seeds for each model:


# %%
def train(causal, seed, steps=200, batch_size=128):
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(seed)
    model = TinyLM(causal)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        tokens = copy_sequences(batch_size, generator=data)
        logits = model(tokens[:, :-1])  # position t scores token t + 1
        loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
runs = {
    (causal, seed): train(causal, seed)
    for causal in (True, False)
    for seed in range(3)
}
print(f"6 models trained in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# A model that generates text writes one token at a time: when it predicts token $t + 1$,
# the tokens after $t$ do not exist yet. `predict_from_prefixes` asks each trained model for
# every next token the way generation does, showing it only the prefix, on sequences it has
# never seen:


# %%
def predict_from_prefixes(model, tokens):
    """Scores for token t + 1 from tokens 0..t only, for every t."""
    T = tokens.shape[1]
    return torch.stack(
        [model(tokens[:, : t + 1])[:, -1] for t in range(T)], dim=1
    )


test = copy_sequences(500, generator=torch.Generator().manual_seed(1000))
inputs, targets = test[:, :-1], test[:, 1:]
copied = slice(HALF - 1, None)  # the targets in the repeated half

# %% tags=["nbval-ignore-output"]
results = []
print("mask    seed  training loss  loss from prefixes  copied half right")
for (with_mask, seed), (model, losses) in runs.items():
    with torch.no_grad():
        logits = predict_from_prefixes(model, inputs)
    prefix_loss = F.cross_entropy(logits.transpose(1, 2), targets).item()
    right = (logits.argmax(-1)[:, copied] == targets[:, copied]).float()
    final = sum(losses[-10:]) / 10  # the last 10 steps' mean
    results.append((with_mask, seed, final, prefix_loss, right.mean().item()))
    print(
        f"{'causal' if with_mask else 'none':6}  {seed:4}  {final:13.3f}"
        f"  {prefix_loss:18.2f}  {right.mean():17.1%}"
    )

# %% tags=["hide-input", "nbval-ignore-output"]
floor, uniform = loss_floor(), math.log(VOCAB_SIZE)
colours = {True: "C0", False: "C3"}
labels = {True: "causal mask", False: "no mask"}
fig, (left, right) = plt.subplots(
    1, 2, figsize=(6.2, 2.9), width_ratios=[3, 2], layout="constrained"
)
for (with_mask, seed), (_, losses) in runs.items():
    label = labels[with_mask] if seed == 0 else None
    left.plot(losses, color=colours[with_mask], lw=1, alpha=0.8, label=label)
left.axhline(floor, color="black", ls="--", lw=1, label="floor")
left.set(xlabel="training step", ylabel="training loss (nats)", ylim=(0, 3.5))
left.legend(loc="upper right")
for with_mask, _, final, prefix_loss, _ in results:
    x = 0 if with_mask else 1
    right.scatter(
        x - 0.15, final, s=25, facecolor="none", edgecolor=colours[with_mask]
    )
    right.scatter(x + 0.15, prefix_loss, s=25, color=colours[with_mask])
right.axhline(floor, color="black", ls="--", lw=1)
right.axhline(uniform, color="grey", ls=":", lw=1.2)
right.text(1.45, uniform, "uniform\nguess", va="bottom", ha="right", fontsize=8)
right.set_xticks([0, 1], [labels[True], labels[False]])
right.set(xlim=(-0.5, 1.5), ylabel="loss (nats)")
right.set_title("training (o), from prefixes (\u25cf)", fontsize=9)
plt.show()

# %% [markdown]
# **Figure.** Left: training loss over 200 steps, three seeds per model; the dashed line is
# the floor for a model that reads only the past. Right: for each seed, the training loss at
# the end (hollow) and the loss when predicting from prefixes on new sequences (filled); the
# dotted line is a uniform guess over the 16 symbols.
#
# Without the mask the training loss falls to {glue:text}`ch2_free_train_loss:.3f` nats or
# less, far below the floor: no rule predicts random tokens, so the model read them.
# Attention let position $t$ look at token $t + 1$, the very answer. Predicting from
# prefixes, where that token does not exist yet, the same model's loss is at least
# {glue:text}`ch2_free_prefix_loss:.1f` nats on every seed, worse than a uniform guess
# ({glue:text}`ch2_uniform_loss:.2f`). It did learn to copy along the way, more or less well
# depending on the seed (the table's last column), but on the random half it is confidently
# wrong, and its training loss says nothing about how well it generates.
#
# With the causal mask the training loss stops just above the floor, the model gets at least
# {glue:text}`ch2_causal_right:.1f`% of the repeated half right on each seed, and its loss
# from prefixes (at most {glue:text}`ch2_causal_prefix_loss:.2f`) is its training loss: every
# position already saw only its prefix in training, so the whole sequence at once gives the
# same scores as one prefix at a time. That is what lets a language model train on every
# position of a sequence in a single pass.

# %% tags=["remove-cell", "nbval-ignore-output"]
for with_mask, seed, final, prefix_loss, right_share in results:
    # with the mask: near the floor, in training and from prefixes alike
    if with_mask:
        assert floor - 0.02 < final < floor + 0.25, (seed, final)
        assert prefix_loss < floor + 0.25 and right_share > 0.97, seed
    # without: far below the floor in training, then worse than guessing
    else:
        assert final < 0.05 and prefix_loss > 2 * uniform, (seed, final)
# with the mask, the whole sequence at once and prefix by prefix give the same scores
with torch.no_grad():
    for seed in range(3):
        model = runs[(True, seed)][0]
        whole, by_prefix = model(inputs), predict_from_prefixes(model, inputs)
        torch.testing.assert_close(whole, by_prefix, atol=1e-4, rtol=0)
glue("ch2_loss_floor", round(floor, 2))
glue("ch2_uniform_loss", round(uniform, 2))
glue("ch2_free_train_loss", max(r[2] for r in results if not r[0]))
glue("ch2_free_prefix_loss", min(r[3] for r in results if not r[0]))
glue("ch2_causal_right", 100 * min(r[4] for r in results if r[0]))
glue("ch2_causal_prefix_loss", max(r[3] for r in results if r[0]))

# %% [markdown]
# ## Padding masks from sequence lengths
#
# Sequences in a batch have different lengths; we pad them to a common length $T$ and record
# each one's true length. Key $j$ of sequence $b$ is real when $j < \text{length}_b$.
# `padding_mask(lengths)` returns that as a tensor of shape $(B, 1, 1, T)$. The size-1 axis
# next to $T$ broadcasts over the queries, because every query of a sequence must ignore the
# same padded keys; the other one is for the attention heads of chapter 4. With one head we
# drop it: `pad[:, 0]` has shape $(B, 1, T)$.

# %%
lengths = [8, 5, 3]
pad = padding_mask(lengths, max_len=T)
print(f"padding mask {tuple(pad.shape)}:\n{pad[:, 0, 0].int()}")
batch_q, batch_k, batch_v = (
    torch.randn(3, T, 16, generator=generator) for _ in range(3)
)
_, pad_weights = masked_attention(batch_q, batch_k, batch_v, pad[:, 0])
both = causal & pad[:, 0]  # (T, T) & (B, 1, T) -> (B, T, T)
_, both_weights = masked_attention(batch_q, batch_k, batch_v, both)
show_mask_and_weights(
    [pad[1, 0].expand(T, T), both[1]],
    [pad_weights[1], both_weights[1]],
    ["padding, length 5", "causal and padding"],
)

# %% tags=["remove-cell"]
for b, length in enumerate(lengths):
    assert (pad_weights[b, :, length:] == 0).all() and (
        both_weights[b, :, length:] == 0
    ).all()

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
cross_out, cross_weights = masked_attention(
    dec_q, enc_k, enc_v, encoder_pad[:, 0]
)
print(f"queries {tuple(dec_q.shape)}, keys {tuple(enc_k.shape)}")
print(f"-> weights {tuple(cross_weights.shape)}")
show_mask_and_weights(
    [
        encoder_pad[0, 0].expand(decoder_len, 6),
        encoder_pad[1, 0].expand(decoder_len, 6),
    ],
    [cross_weights[0], cross_weights[1]],
    ["encoder length 6", "encoder length 3"],
)

# %% tags=["remove-cell"]
assert (cross_weights[1, :, 3:] == 0).all()

# %% [markdown]
# **Figure.** Four decoder queries attend to six encoder positions. Each column of the mask
# is one encoder position, shared by all queries; for the second sequence the last three
# columns are padding and get zero weight from every decoder query.
#
# A lower-triangular mask on a non-square shape, such as
# `torch.ones(4, 6, dtype=torch.bool).tril()`, is
# legal but means "query $i$ may see keys $0, \dots, i$": causal only if query $i$ and key $i$
# stand for the same moment in time, which two different sequences rarely do.
#
# Chapter 4 adds one more axis to the scores, one per attention head, and with it two more
# questions about masks: how a mask per sequence lines up with scores per head, and how to
# talk to `torch.nn.MultiheadAttention`, whose boolean masks mean the opposite of ours.
#
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
scores_row = q_row @ k_row.T / math.sqrt(4)
outputs = {
    "-inf fill (masked_attention)": masked_attention(
        q_row, k_row, v_row, empty_row
    )[0],
    "-1e9 fill": scores_row.masked_fill(~empty_row, -1e9).softmax(-1) @ v_row,
    "F.scaled_dot_product_attention": F.scaled_dot_product_attention(
        q_row, k_row, v_row, attn_mask=empty_row
    ),
    "helpers.attention": scaled_dot_product_attention(
        q_row, k_row, v_row, empty_row
    )[0],
}
for name, output in outputs.items():
    empty = output[1]  # the output of query 1
    if empty.isnan().any():
        verdict = "NaN"
    elif (empty == 0).all():
        verdict = "zero vector"
    elif torch.allclose(empty, v_row.mean(dim=0)):
        verdict = "mean of all values"
    else:
        verdict = "something else"
    print(f"{name:32} {verdict}")

# %% tags=["remove-cell"]
glue("ch2_torch_version", torch.__version__.split("+")[0])

# %% [markdown]
# NaN is the worst answer: it spreads through every later layer into the loss, and one
# optimizer step later every parameter is NaN. The uniform average of $-10^9$ is quieter and as
# wrong, since it reads exactly the positions the mask was meant to hide.
# `F.scaled_dot_product_attention` (here its plain-math path: no fused kernel takes 2-D inputs)
# returns zeros with the version this page was built with
# ({glue:text}`ch2_torch_version`, on the CPU), but that is version- and backend-dependent:
# it has not always done so and need not on every device. The book's
# `scaled_dot_product_attention` therefore fixes the answer itself: **a query with no allowed
# key gets all-zero weights and a zero output**, with finite gradients. A layer built on top
# keeps the zero weights but not necessarily the zero output: a layer that sends the zero
# vector through an output projection with a bias returns the bias for that row.

# %% tags=["remove-cell"]
assert outputs["-inf fill (masked_attention)"][1].isnan().all()
assert torch.allclose(outputs["-1e9 fill"][1], v_row.mean(dim=0))
assert (outputs["helpers.attention"][1] == 0).all()
# version-dependent: what the pinned PyTorch does on the CPU
assert (outputs["F.scaled_dot_product_attention"][1] == 0).all()
q_leaf = q_row.clone().requires_grad_()
output, weights_row = scaled_dot_product_attention(
    q_leaf, k_row, v_row, empty_row
)
output.sum().backward()
assert torch.isfinite(q_leaf.grad).all() and (weights_row[1] == 0).all()

# %% [markdown]
# Our `masked_attention`, a softmax over a row of $-\infty$, poisons the gradients as well:

# %%
k_leaf, v_leaf = k_row.clone().requires_grad_(), v_row.clone().requires_grad_()
nan_output, _ = masked_attention(q_row, k_leaf, v_leaf, empty_row)
nan_output.sum().backward()
nan_fraction = v_leaf.grad.isnan().float().mean().item()
print(f"masked_attention: {100 * nan_fraction:.0f}% of value gradients are NaN")

# %% tags=["remove-cell"]
assert nan_fraction == 1.0  # one empty row poisons the gradient of every value
num_empty, num_rows = int((~empty_row.any(-1)).sum()), empty_row.shape[0]
glue("ch2_nan_fraction", round(100 * nan_fraction))
glue("ch2_empty_rows", num_empty)
glue("ch2_query_rows", num_rows)

# %% [markdown]
# In the naive version {glue:text}`ch2_empty_rows` empty row out of
# {glue:text}`ch2_query_rows` already makes {glue:text}`ch2_nan_fraction`% of the gradients
# of the values NaN, since every value receives gradient through that row's NaN weights; after
# the next optimizer step, the whole model would be.
#
# ## Summary
#
# - A mask decides, for each (query, key) pair, whether the query may attend to the key. It
#   enters before the softmax, as a $-\infty$ score; multiplying the weights after the softmax
#   leaves rows that do not sum to one and lets the hidden keys leak through the gradient.
# - The book's masks are boolean, `True` = may attend. The additive form adds $0$ or
#   $-\infty$ to the scores; PyTorch reads a float `attn_mask` as additive, so a 0/1 float mask
#   masks nothing.
# - $-10^9$ instead of $-\infty$ gives the same weights in float32 but fails in float16 and
#   averages the hidden positions of a fully masked row.
# - Causal masks are lower-triangular; padding masks come from sequence lengths and broadcast
#   over the queries; masks combine with a logical *and*; cross-attention masks hide the
#   encoder's padding.
# - A query with no allowed key gets NaN from a plain softmax ({glue:text}`ch2_nan_fraction`%
#   of the value gradients are NaN after one such row); the book's attention returns zero
#   weights and a zero output instead.
#
# ## Exercises
#
# 1. Write `sliding_window_mask(T, window)`: a causal mask in which query $t$ may attend only
#    to keys $t - \text{window} + 1, \dots, t$ (local attention, as in Longformer-style
#    models). Check it with `check_sliding_window_mask(sliding_window_mask)` from
#    `helpers.checks`.
# 2. A batch has lengths `[4, 0]`. What does `scaled_dot_product_attention` from `helpers`
#    return for the second sequence under `padding_mask([4, 0])[:, 0]`, and why is that better
#    for training than what this chapter's `masked_attention` returns?
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
# outputs are zero vectors, with finite gradients. `masked_attention` returns NaN there, which
# would turn the loss and then every parameter into NaN. (Either way the outputs of an empty
# sequence carry no information, and the loss should skip them.) A cell not shown on the site
# checks both answers.
# ```

# %% tags=["remove-cell"]
empty_q, empty_k = (torch.randn(2, 4, 8, generator=generator) for _ in range(2))
empty_pad = padding_mask([4, 0])[:, 0]
package_out, _ = scaled_dot_product_attention(
    empty_q, empty_k, empty_k, empty_pad
)
assert (package_out[1] == 0).all() and torch.isfinite(package_out).all()
assert (
    masked_attention(empty_q, empty_k, empty_k, empty_pad)[0][1].isnan().all()
)
