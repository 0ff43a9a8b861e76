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
# # Scaled dot-product attention
#
# Chapter 1 scored a query against keys with a kernel of their distance. Transformers score
# with a dot product instead, divide by the square root of the width, and apply the result to
# whole matrices of queries at once {cite}`vaswani2017attention`:
#
# $$
# \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d}}
# \right) V .
# $$
#
# After this chapter you will be able to:
#
# - write scaled dot-product attention for any batch and head axes, and check it against
#   PyTorch's `F.scaled_dot_product_attention`;
# - explain, with a measurement, why the scores are divided by $\sqrt{d}$;
# - say what attention costs in memory as the sequence grows, and what dropout on the weights
#   does in training and in evaluation.
#
# ```{figure} ../book/_static/diagrams/map_03.svg
# :alt: The book's map of the Transformer: every attention box, in the encoder and in the decoder, is highlighted, for the scaled dot-product attention inside it.
# :width: 60%
# :name: fig-map-03
#
# Where this chapter sits in the Transformer: the scaled dot-product attention inside every
# attention box.
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
import seaborn as sns
import torch
import torch.nn.functional as F
from torch import nn

import helpers
from helpers import expect_error, glue, show_source
from helpers.analysis import peak_cpu_bytes
from helpers.attention import scaled_dot_product_attention
from helpers.checks import check_attention
from helpers.plotting import heatmap
from helpers.tasks.lookups import recall_batch, recall_codes

device = helpers.get_device()  # a GPU if there is one, else the CPU

# The models trained here are so small that splitting each matrix product
# over several CPU threads costs more in synchronization than it saves.
helpers.use_one_thread(device)

# %% [markdown]
# ## The formula and its shapes
#
# There are $T_q$ queries and $T_k$ keys, each a vector of width $d$, and one value of width
# $d_v$ per key. Stack them as rows:
#
# | matrix | shape | role |
# | --- | --- | --- |
# | $Q$ | $T_q \times d$ | what each position is looking for |
# | $K$ | $T_k \times d$ | what each position offers to be found by |
# | $V$ | $T_k \times d_v$ | what each position hands over when found |
# | $S = QK^\top / \sqrt{d}$ | $T_q \times T_k$ | score of every query against every key |
# | $A = \operatorname{softmax}(S)$, row by row | $T_q \times T_k$ | attention weights |
# | $AV$ | $T_q \times d_v$ | one output per query |
#
# The softmax runs along each row, that is over the keys: every query distributes one unit of
# attention among the keys. Queries and keys must share the width $d$ (they meet in a dot
# product); the values may have any width, and $T_q$ need not equal $T_k$. Extra leading
# dimensions (batch, heads) simply ride along.
#
# ```{figure} ../book/_static/diagrams/scaled_dot_product_attention.svg
# :alt: A flow chart from top to bottom. Q of shape (Tq, d) and K of shape (Tk, d) enter a box "scores Q K transposed", which gives a (Tq, Tk) matrix. It is scaled by dividing by the square root of d, then a mask of shape (Tq, Tk) comes in from the side and sets the scores of forbidden pairs to minus infinity, then a softmax over the keys gives the weights A of shape (Tq, Tk), then a dashed dropout box (training only), then V of shape (Tk, dv) comes in from the right for the weighted sum A V, and the output has shape (Tq, dv).
# :name: fig-sdpa
#
# Scaled dot-product attention as a computation, with the shape on every arrow (blue: queries,
# orange: keys, green: values, grey: the mask). Look at where the shapes change: the two widths
# $d$ meet and vanish in $QK^\top$, everything between it and the weighted sum is a
# $T_q \times T_k$ matrix (the scaling, the mask of chapter 2 and the softmax act on it
# element by element or row by row), and $AV$ brings back one row of width $d_v$ per query.
# The dashed box, dropout on the weights, runs only in training (the last section).
# ```
#
# From scratch, that is three lines:


# %%
def attention_from_scratch(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    weights = scores.softmax(dim=-1)  # over the keys
    return weights @ v, weights  # (..., Tq, dv), (..., Tq, Tk)


generator = torch.Generator().manual_seed(0)
q = torch.randn(3, 4, generator=generator)  # Tq = 3 queries of width d = 4
k = torch.randn(5, 4, generator=generator)  # Tk = 5 keys
v = torch.randn(5, 2, generator=generator)  # one value of width dv = 2 per key
output, weights = attention_from_scratch(q, k, v)
print(f"output {tuple(output.shape)}, weights {tuple(weights.shape)}")

# %% [markdown]
# The same computation written with `einsum` names every index, which some readers find
# clearer: `q` is indexed by (query $i$, feature $f$), `k` by (key $j$, feature $f$), and the
# score sums over the shared feature.


# %%
def attention_einsum(q, k, v):
    scores = torch.einsum("...if,...jf->...ij", q, k) / math.sqrt(q.shape[-1])
    weights = scores.softmax(dim=-1)
    return torch.einsum("...ij,...jd->...id", weights, v), weights


einsum_output, einsum_weights = attention_einsum(q, k, v)
print("einsum version agrees:", torch.allclose(einsum_output, output))

# %% tags=["remove-cell"]
torch.testing.assert_close(attention_einsum(q, k, v), (output, weights))

# %% [markdown]
# ```{admonition} Pitfall: an einsum without an ellipsis works for one sequence only
# :class: warning
# Subscripts such as `einsum("ik,jk->ij", q, k)` name exactly two axes. That is fine for one
# unbatched sequence, but a batch of sequences or of heads is then an error (below). The
# ellipsis `...` lets leading axes ride along. In the same way, a check that the mask has
# exactly the scores' shape rejects a `(Tq, Tk)` mask that would broadcast over the batch.
# ```

# %%
batched_q = torch.randn(2, 3, 4, generator=generator)  # a batch of 2 sequences
try:
    torch.einsum("ik,jk->ij", batched_q, batched_q)  # no ellipsis
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", width=78))
with_ellipsis = torch.einsum("...ik,...jk->...ij", batched_q, batched_q)
print("with ...:", tuple(with_ellipsis.shape))

# %% tags=["remove-cell"]
with expect_error(RuntimeError):
    torch.einsum("ik,jk->ij", batched_q, batched_q)

# %% [markdown]
# The book's version adds input checks, a boolean mask (chapter 2), attention dropout (the end
# of this chapter) and a defined result for queries that may see no key at all. Its source:

# %% tags=["hide-output"]
show_source(scaled_dot_product_attention)

# %% [markdown]
# It agrees with ours and with PyTorch's `F.scaled_dot_product_attention`, here on a
# batch of 2 sequences with 3 heads, the shapes multi-head attention will use in chapter 4:

# %%
q4 = torch.randn(2, 3, 6, 8, generator=generator)  # (B, H, Tq, d)
k4 = torch.randn(2, 3, 7, 8, generator=generator)  # (B, H, Tk, d)
v4 = torch.randn(2, 3, 7, 5, generator=generator)  # (B, H, Tk, dv)
ours, ours_weights = attention_from_scratch(q4, k4, v4)
package, package_weights = scaled_dot_product_attention(q4, k4, v4)
pytorch = F.scaled_dot_product_attention(q4, k4, v4)
print(f"output {tuple(package.shape)}, weights {tuple(package_weights.shape)}")

# %% tags=["remove-cell"]
agree = torch.allclose(package, ours, atol=1e-6) and torch.allclose(
    pytorch, ours, atol=1e-6
)
torch.testing.assert_close(package, ours)
torch.testing.assert_close(package_weights, ours_weights)
torch.testing.assert_close(pytorch, ours)
assert agree

# %% [markdown]
# From here on the chapter uses `scaled_dot_product_attention` from `helpers`.
#
# ## Outputs are convex combinations of the values
#
# Every row of weights is non-negative and sums to one, so every output row is a weighted
# average of the value rows: a point inside their convex hull. In particular each coordinate
# of an output lies between the smallest and the largest value in that coordinate.

# %%
by_hand = sum(weights[2, j] * v[j] for j in range(5))  # query 2, written out
print("weights of query 2:", [round(w, 3) for w in weights[2].tolist()])
print("written out, equals output row 2:", torch.allclose(by_hand, output[2]))

# %% tags=["remove-cell"]
assert (weights >= 0).all()
torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3))
torch.testing.assert_close(by_hand, output[2])
assert (output >= v.min(dim=0).values - 1e-6).all()
assert (output <= v.max(dim=0).values + 1e-6).all()

# %% tags=["hide-input"]
fig, (ax_weights, ax_points) = plt.subplots(1, 2, figsize=(6.2, 3.2))
heatmap(weights, ax=ax_weights, title="attention weights A", vmin=0, vmax=1)
ax_points.scatter(v[:, 0], v[:, 1], s=60, marker="s", label="values $v_j$")
ax_points.scatter(
    output[:, 0],
    output[:, 1],
    s=60,
    marker="*",
    label="outputs $(AV)_i$",
)
for i, (x, y) in enumerate(output.tolist()):  # each star labelled by its query
    offset = (-4, -14) if i % 2 == 0 else (3, 5)
    ax_points.annotate(
        str(i), (x, y), textcoords="offset points", xytext=offset
    )
ax_points.set(
    xlabel="value coordinate 1",
    ylabel="value coordinate 2",
    title="outputs vs values",
)
ax_points.legend(loc="lower left")  # the upper left holds a value
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure.** Left: each row of the weight matrix is one query's distribution over the five
# keys. Right: the outputs (stars, numbered by query) all land inside the region spanned by
# the five values (squares); a query whose weights concentrate on one key lands near that key's
# value.

# %% tags=["remove-cell"]
# A source audit (Sources and errata): the attention function as a source wrote it,
# and its swapped call attention(k, q, v).
from helpers.attention import SingleHeadAttention


def attention_as_written(q, k, v):
    scores = torch.bmm(query, key.transpose(1, 2))  # noqa: F821 (the post's names)
    return (scores / q.shape[-1] ** 0.5).softmax(dim=-1) @ v


with expect_error(NameError):
    attention_as_written(q4[:, 0], k4[:, 0], v4[:, 0])
with expect_error(SyntaxError):
    compile("if mask is Not None:\n    pass", "<blog post>", "exec")


# %% tags=["remove-cell"]
def swapped_head(head, query, key, value, mask=None):
    return scaled_dot_product_attention(
        head.key(key), head.query(query), head.value(value), mask
    )


torch.manual_seed(0)
head = SingleHeadAttention(d_model=8, d_head=4)
relabeled = SingleHeadAttention(d_model=8, d_head=4)
relabeled.load_state_dict(
    {
        **head.state_dict(),
        "query.weight": head.key.weight,
        "key.weight": head.query.weight,
    }
)
x = torch.randn(2, 6, 8)
causal = torch.ones(6, 6, dtype=torch.bool).tril()
torch.testing.assert_close(
    swapped_head(head, x, x, x, causal), relabeled(x, x, x, causal)
)
print("self-attention: swapped head == correct head with W_Q and W_K exchanged")

# %% tags=["remove-cell"]
decoder_tokens = torch.randn(2, 3, 8)  # Tq = 3
encoder_tokens = torch.randn(2, 5, 8)  # Tk = 5
with expect_error(ValueError):
    swapped_head(head, decoder_tokens, encoder_tokens, encoder_tokens)

# %% tags=["remove-cell"]
decoder_tokens = torch.randn(1, 5, 8)
nudged = decoder_tokens.clone()
nudged[0, 0] += 1.0
moved = {}
for name, attend in {
    "correct": head,
    "swapped": lambda *a: swapped_head(head, *a),
}.items():
    before, _ = attend(decoder_tokens, encoder_tokens[:1], encoder_tokens[:1])
    after, _ = attend(nudged, encoder_tokens[:1], encoder_tokens[:1])
    moved[name] = ((after - before).abs().amax(dim=-1) > 1e-6)[0].tolist()
    print(f"{name:8s} rows that moved: {moved[name]}")
assert moved["correct"] == [True, False, False, False, False]
assert all(moved["swapped"])

# %% [markdown]
# ## Why divide by $\sqrt{d}$?
#
# Suppose the entries of a query and a key are independent with mean 0 and variance 1. Their
# dot product $q \cdot k = \sum_{f=1}^{d} q_f k_f$ is a sum of $d$ independent terms of
# variance 1, so its variance is $d$. Wide heads therefore produce large scores, and a softmax
# of large scores is nearly one-hot: one key takes almost all the weight, and the softmax's
# own gradient with respect to its scores,
# $\partial a_i / \partial s_j = a_i(\delta_{ij} - a_j)$, is nearly zero. Dividing by
# $\sqrt{d}$ brings the variance back to 1 whatever the width. The experiment below measures
# these effects for widths from {glue:text}`ch3_width_min` to {glue:text}`ch3_width_max`, with
# {glue:text}`ch3_num_keys` keys per query: the variance of the scores, the average largest
# weight, and the size of the softmax's gradient (the norm of its Jacobian), with and without
# the scaling. One more column, the gradient with respect to the query
# vector itself, is explained under "Going deeper" below.

# %%
widths = [4, 16, 64, 256, 1024]
num_queries, num_keys = 2000, 16


def softmax_jacobian_norm(weights):
    """Frobenius norm of the softmax's Jacobian diag(a) - a a^T, per row a."""
    squares = weights.pow(2).sum(-1)
    return (
        (squares - 2 * weights.pow(3).sum(-1) + squares**2).clamp_min(0).sqrt()
    )


def query_jacobian_norm(weights, keys, scale):
    """Norm of d(weights)/d(q) = scale (diag(a) - a a^T) K, per query."""
    mean_key = (weights[..., None] * keys).sum(dim=-2, keepdim=True)
    spread = (keys - mean_key).pow(2).sum(-1)  # ||k_j - k_bar||^2
    return scale * (weights.pow(2) * spread).sum(-1).sqrt()


# %% tags=["remove-cell"]
# The closed form of the query Jacobian's norm, checked against autograd for one query.
check_draws = torch.Generator().manual_seed(1)  # not the page's generator
q_check, k_check = (
    torch.randn(8, generator=check_draws),
    torch.randn(5, 8, generator=check_draws),
)
jacobian = torch.autograd.functional.jacobian(
    lambda query: (k_check @ query / math.sqrt(8)).softmax(-1), q_check
)
a_check = (k_check @ q_check / math.sqrt(8)).softmax(-1)
torch.testing.assert_close(
    jacobian.norm(), query_jacobian_norm(a_check, k_check, 8**-0.5)
)

# %%
rows = []
for width in widths:
    q_rand = torch.randn(num_queries, 1, width, generator=generator)
    k_rand = torch.randn(num_queries, num_keys, width, generator=generator)
    raw = (q_rand @ k_rand.transpose(-2, -1)).squeeze(1)  # (queries, keys)
    for scaling, scale in (("none", 1.0), ("1/sqrt(d)", 1 / math.sqrt(width))):
        attn = (raw * scale).softmax(dim=-1)
        rows.append(
            {
                "d": width,
                "scaling": scaling,
                "score variance": (raw * scale).var().item(),
                "largest weight": attn.amax(dim=-1).mean().item(),
                "Jacobian w.r.t. scores": softmax_jacobian_norm(attn)
                .mean()
                .item(),
                "Jacobian w.r.t. q": query_jacobian_norm(attn, k_rand, scale)
                .mean()
                .item(),
            }
        )
scaling_table = pd.DataFrame(rows)
scaling_table.round(3)

# %% tags=["hide-input"]
fig, axes = plt.subplots(
    2, 2, figsize=(6.2, 5.6), sharex=True, layout="constrained"
)
panels = {
    "score variance": "score variance",
    "largest weight": "average largest weight",
    "Jacobian w.r.t. scores": "softmax Jacobian norm\n(w.r.t. the scores)",
    "Jacobian w.r.t. q": "Jacobian norm\n(w.r.t. the query q)",
}
for ax, (column, title) in zip(axes.flat, panels.items(), strict=True):
    sns.lineplot(
        scaling_table,
        x="d",
        y=column,
        hue="scaling",
        marker="o",
        ax=ax,
        legend=False,
    )
    ax.set(xscale="log", title=title, ylabel="")
axes[0, 0].set_yscale("log")
axes[0, 1].axhline(1 / num_keys, color="grey", ls=":")
axes[0, 1].annotate(
    f"uniform, 1/{num_keys}",
    (4, 1 / num_keys),
    xytext=(0, 4),
    textcoords="offset points",
)
for ax in axes[1]:
    ax.set_xlabel("head width d")
fig.legend(
    handles=axes[0, 0].get_lines()[:2],
    labels=["no scaling", r"scaled by $1/\sqrt{d}$"],
    loc="outside upper center",
    ncols=2,
)
plt.show()

# %% [markdown]
# **Figure.** Top left: without scaling the score variance grows like $d$ (a straight line
# on log-log axes); with it, it stays at 1. Top right: the average largest weight climbs
# towards 1 without scaling, the softmax turning into a hard maximum, while scaled weights
# keep the same spread at every width. Bottom left: the softmax's own gradient, with respect
# to its scores, shrinks as it saturates. Bottom right: the gradient with respect to the query
# (Going deeper, below) is the same at every width with the scaling, and depends on the width
# without it.

# %% tags=["remove-cell"]
# The figure's claims, checked.
at = scaling_table.set_index(["d", "scaling"])
unscaled, scaled = (
    at.loc[(widths[-1], "none")],
    at.loc[(widths[-1], "1/sqrt(d)")],
)
for width in widths:
    assert abs(at.loc[(width, "none"), "score variance"] / width - 1) < 0.1
    assert abs(at.loc[(width, "1/sqrt(d)"), "score variance"] - 1) < 0.1
assert unscaled["largest weight"] > 0.9 > 0.5 > scaled["largest weight"]
gradient_ratio = (
    scaled["Jacobian w.r.t. scores"] / unscaled["Jacobian w.r.t. scores"]
)
assert gradient_ratio > 3
q_grads = scaling_table.pivot(
    index="d", columns="scaling", values="Jacobian w.r.t. q"
)
# not smaller without scaling
assert (q_grads["none"] > q_grads["1/sqrt(d)"]).all()
# flat with it
assert q_grads["1/sqrt(d)"].max() / q_grads["1/sqrt(d)"].min() < 1.2
# without it, its size depends on the width (more than twice as large at d = 256 as at d = 4;
# beyond that, whether it still grows depends on the draw: from 256 to 1024 it changed by
# -0.17 to +0.28 over seven draws of this table)
unscaled_q = q_grads["none"]
assert unscaled_q.max() / unscaled_q.min() > 1.5
assert unscaled_q[256] > 2 * unscaled_q[4]

# %% tags=["remove-cell"]
# Numbers quoted in the prose of this section.
glue("ch3_width_min", widths[0])
glue("ch3_width_max", widths[-1])
glue("ch3_num_keys", num_keys)
glue("ch3_var_unscaled", round(float(unscaled["score variance"])))
glue("ch3_var_scaled", round(float(scaled["score variance"]), 2))
glue("ch3_maxw_unscaled", round(float(unscaled["largest weight"]), 2))
glue("ch3_maxw_scaled", round(float(scaled["largest weight"]), 2))
glue("ch3_gradient_ratio", round(float(gradient_ratio), 1))
glue("ch3_qgrad_unscaled", round(float(unscaled["Jacobian w.r.t. q"]), 2))
glue("ch3_qgrad_scaled", round(float(scaled["Jacobian w.r.t. q"]), 2))

# %% [markdown]
# At $d =$ {glue:text}`ch3_width_max` the unscaled scores have variance
# {glue:text}`ch3_var_unscaled` (scaled: {glue:text}`ch3_var_scaled:.2f`), the largest of
# {glue:text}`ch3_num_keys` weights averages {glue:text}`ch3_maxw_unscaled:.2f` (scaled:
# {glue:text}`ch3_maxw_scaled:.2f`), and the softmax's gradient with respect to the scores is
# {glue:text}`ch3_gradient_ratio:.1f` times larger with the scaling than without.
#
# With $\partial a_i / \partial s_j = a_i(\delta_{ij} - a_j)$, the weight of a key that lost
# the hard maximum moves in proportion to its own tiny weight: attention sits on one key, and
# learning that some other key matters stalls. The scale is not about the values being large;
# it is about keeping the softmax in the range where it still compares keys rather than just
# picking one.
#
# :::{admonition} Going deeper: the gradient with respect to the query
# :class: dropdown
# Learning acts on the query vector $q$ (and the keys), not on the scores directly, so the
# experiment's last column is the Jacobian of the weights with respect to $q$. Row $j$ of that
# Jacobian is $c\, a_j (k_j - \bar k)$, with $c$ the scale ($1$ or $1/\sqrt{d}$) and
# $\bar k = \sum_l a_l k_l$ the weighted mean key, so its Frobenius norm (the square root of
# the sum of its squared entries) is $c \sqrt{\sum_j a_j^2 \lVert k_j - \bar k \rVert^2}$;
# the folded code checks this closed form against autograd.
#
# At $d =$ {glue:text}`ch3_width_max` the unscaled Jacobian is
# {glue:text}`ch3_qgrad_unscaled:.2f` against {glue:text}`ch3_qgrad_scaled:.2f` scaled: the
# $\sqrt{d}$ that the scaling removes from the scores also removes it from their sensitivity
# to $q$, so in this range a wide unscaled head does not simply stop receiving gradient. What
# goes wrong is
# *what* the gradient can do, as above. The unscaled gradient's size also changes with $d$,
# so the same learning rate would not suit every width.
# :::
#
# ## A head that learns a lookup
#
# Do these effects matter once a head learns? A small task, *associative recall*: a memory
# of 8 tokens, each the sum of an address code and a symbol code (random vectors of width 64
# with entries of variance 1, the symbols drawn afresh for every example); the request is one
# address's code, and the answer is the symbol stored there. One head with its own query,
# key and value projections, of width $d$, and a readout to the 8 symbols:


# %%
class Recall(nn.Module):
    """One attention head that reads a symbol out of a memory."""

    def __init__(self, width: int, d: int, scaled: bool = True):
        super().__init__()
        self.w_q, self.w_k, self.w_v = (
            nn.Linear(width, d, bias=False) for _ in range(3)
        )
        self.readout = nn.Linear(d, 8)
        self.scale = 1 / math.sqrt(d) if scaled else 1.0

    def forward(self, request, memory):
        q, k, v = self.w_q(request), self.w_k(memory), self.w_v(memory)
        weights = (self.scale * q @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.readout(weights @ v)[:, 0], weights[:, 0]


# %% [markdown]
# It trains with the plainest loop (forward, loss, backward, step) at $d = 256$, with and
# without the scale, from three seeds, recording the accuracy on each training batch:

# %%
codes = recall_codes(64, generator=torch.Generator().manual_seed(0))


def train_recall(scaled: bool, seed: int, d: int = 256, steps: int = 150):
    torch.manual_seed(seed)
    model = Recall(64, d, scaled)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(seed)
    curve = []
    for _ in range(steps):
        request, keys_values, targets, _ = recall_batch(128, codes, data)
        logits, _ = model(request, keys_values)
        loss = F.cross_entropy(logits, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        curve.append((logits.argmax(-1) == targets).float().mean().item())
    return model, curve


# %% tags=["nbval-ignore-output"]
test_recall = recall_batch(2000, codes, torch.Generator().manual_seed(99))
recall_rows, curves, recall_weights = [], {}, {}
start = time.perf_counter()
for seed in range(3):
    for scaled in (True, False):
        model, curves[scaled, seed] = train_recall(scaled, seed)
        with torch.no_grad():
            logits, weights = model(test_recall[0], test_recall[1])
        recall_weights[scaled, seed] = weights
        on_right = weights.gather(1, test_recall[3][:, None]).mean()
        recall_rows.append(
            {
                "scaled": scaled,
                "seed": seed,
                "test accuracy": (logits.argmax(-1) == test_recall[2])
                .float()
                .mean()
                .item(),
                "weight on the right key": on_right.item(),
            }
        )
print(f"6 trainings in {time.perf_counter() - start:.1f} s")
recall_results = pd.DataFrame(recall_rows)
recall_results.round(2)

# %% tags=["hide-input", "nbval-ignore-output"]
fig, (ax_curve, ax_map) = plt.subplots(
    1, 2, figsize=(6.2, 2.9), layout="constrained"
)
for (scaled, seed), curve in curves.items():
    smooth = pd.Series(curve).rolling(10, min_periods=1).mean()
    ax_curve.plot(
        smooth,
        color="C0" if scaled else "C1",
        label=(r"scaled by $1/\sqrt{d}$" if scaled else "no scaling")
        if seed == 0
        else None,
    )
ax_curve.axhline(1 / 8, color="gray", linestyle=":")
ax_curve.set(xlabel="training step", ylabel="batch accuracy", ylim=(0, 1.05))
ax_curve.set_title("d = 256, three seeds each")
ax_curve.legend(loc="center right")
shown = 6  # the first test requests
rows_shown = torch.cat(
    [recall_weights[True, 0][:shown], recall_weights[False, 0][:shown]]
)
ax_map.imshow(rows_shown, cmap="viridis", vmin=0, vmax=1, aspect="auto")
right_keys = test_recall[3][:shown].tolist() * 2
ax_map.scatter(right_keys, range(2 * shown), marker="x", color="white", s=20)
ax_map.axhline(shown - 0.5, color="white", linewidth=2)
ax_map.set_yticks(
    [shown / 2 - 0.5, 1.5 * shown - 0.5], ["scaled", "no scaling"]
)
ax_map.set(xlabel="memory token", title="learned weights, seed 0")
ax_map.grid(False)
plt.show()

# %% [markdown]
# **Figure.** Left: accuracy on each training batch (a running mean over 10 steps), three
# seeds per setting; the dotted line is chance. Right: the trained heads' weights for six
# test requests (rows), the right key of each marked with a cross; top, the scaled head,
# bottom, the unscaled one. Both are sharp: where the unscaled head misses (a cross off the
# bright square), its weight sits on a wrong key.
#
# Scaled, the head learns the lookup within a few dozen steps on every seed: test accuracy at
# least {glue:text}`ch3_recall_scaled_min:.0%`, with on average
# {glue:text}`ch3_recall_on_right:.2f` of the weight on the right key. Unscaled, at the same
# width and learning rate, it is slower on every seed and after 150 steps reaches only
# {glue:text}`ch3_recall_unscaled_min:.0%` to {glue:text}`ch3_recall_unscaled_max:.0%`. Its
# softmax starts saturated (before training its largest weight averages
# {glue:text}`ch3_recall_fresh_largest:.2f`), and a key it ignores receives a gradient in
# proportion to its tiny weight, as the formula above says: the large Jacobian of the table
# does not help. The right panel shows the result, sharp weights on the wrong key. This is
# the stall the section predicted, seen in a head that learns; how long it lasts varies from
# seed to seed.

# %% tags=["remove-cell", "nbval-ignore-output"]
# The claims, on every seed. Measured (seeds 0-5 default, 0-2 scalar one-thread numerics):
# scaled: test accuracy 1.000, weight on the right key >= 0.998, a running accuracy of 0.9
# by step 14; unscaled: test accuracy 0.44-0.92 (mean of seeds 0-2 <= 0.78), 0.9 reached at
# step 68 at the earliest, mostly never. A fresh head's average largest weight (initial
# seeds 0-4): unscaled 0.81-0.89, scaled 0.22-0.23.
by = recall_results.set_index(["scaled", "seed"])
scaled_runs, unscaled_runs = by.loc[True], by.loc[False]
assert scaled_runs["test accuracy"].min() > 0.97
assert scaled_runs["weight on the right key"].min() > 0.9
assert unscaled_runs["test accuracy"].mean() < 0.9
for seed in range(3):  # slower on every seed: first step at a running 0.9
    reached = {}
    for scaled in (True, False):
        running = pd.Series(curves[scaled, seed]).rolling(10, min_periods=1)
        above = (running.mean() > 0.9).tolist()
        reached[scaled] = above.index(True) if True in above else 10**6
    assert reached[True] < 40 and reached[False] > 2 * reached[True], (
        seed,
        reached,
    )
# before training, the unscaled head is saturated (nearly one-hot), the scaled one not
torch.manual_seed(0)
fresh = {scaled: Recall(64, 256, scaled) for scaled in (True, False)}
with torch.no_grad():
    fresh_largest = {
        scaled: model(test_recall[0], test_recall[1])[1].amax(-1).mean().item()
        for scaled, model in fresh.items()
    }
assert fresh_largest[False] > 0.7 and fresh_largest[True] < 0.4, fresh_largest
# the caption: the unscaled head's misses (seed 0) are sharp, on a wrong key
missed = recall_weights[False, 0].argmax(-1) != test_recall[3]
assert missed.any() and recall_weights[False, 0][missed].amax(-1).mean() > 0.8
glue("ch3_recall_scaled_min", scaled_runs["test accuracy"].min())
glue("ch3_recall_on_right", scaled_runs["weight on the right key"].mean())
glue("ch3_recall_unscaled_min", unscaled_runs["test accuracy"].min())
glue("ch3_recall_unscaled_max", unscaled_runs["test accuracy"].max())
glue("ch3_recall_fresh_largest", fresh_largest[False])

# %% [markdown]
# ## What it costs as sequences grow
#
# The weight matrix has one entry per (query, key) pair: for self-attention over $T$ tokens,
# $T^2$ entries per head, and the two matrix products cost $O(T^2 d)$ operations. Our
# from-scratch version stores that matrix in full, $4 H T^2$ bytes in float32 for $H$ heads.
# PyTorch's fused kernel computes the same output in blocks of keys, keeping only a block of
# weights at a time, when the weights are not asked for. So the two should differ in memory,
# and the cell below measures it for one sequence with {glue:text}`ch3_mem_heads` heads of
# width {glue:text}`ch3_mem_width`, at lengths up to {glue:text}`ch3_longest`: the bytes of
# storage behind the weights tensor the from-scratch version returns, and the peak memory each
# version allocates during one call.
#
# ```{admonition} Going deeper: how the peak is measured
# :class: dropdown
# `peak_cpu_bytes` replays the allocations and frees that PyTorch's profiler records on the
# CPU: it counts the tensors and the kernels' scratch buffers that PyTorch allocates, not the
# process's resident memory. (On a GPU, `torch.cuda.max_memory_allocated` measures the same.)
# The size of the weights tensor is read from the tensor itself,
# `untyped_storage().nbytes()`.
# ```

# %%
num_heads, d_head = 4, 64
lengths = [128, 256, 512, 1024, 2048]
mib = 2**20
rows = []
threads = torch.get_num_threads()
# a fused kernel's scratch space grows with its threads: use one
torch.set_num_threads(1)
try:
    with torch.inference_mode():
        for T in lengths:
            q_b, k_b, v_b = (
                torch.randn(1, num_heads, T, d_head) for _ in range(3)
            )
            _, weights_b = attention_from_scratch(q_b, k_b, v_b)
            # what the weights tensor occupies
            weight_bytes = weights_b.untyped_storage().nbytes()
            scratch_peak = peak_cpu_bytes(attention_from_scratch, q_b, k_b, v_b)
            fused_peak = peak_cpu_bytes(
                F.scaled_dot_product_attention, q_b, k_b, v_b
            )
            rows.append(
                {
                    "T": T,
                    "weights tensor": weight_bytes / mib,
                    "peak, from scratch": scratch_peak / mib,
                    "peak, fused kernel": fused_peak / mib,
                }
            )
finally:
    torch.set_num_threads(threads)
memory = pd.DataFrame(rows).set_index("T")
print(
    "weights tensor (MiB), exactly 4 H T^2 bytes:",
    memory["weights tensor"].tolist(),
)

# %% tags=["nbval-ignore-output"]
memory.round(2)

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(6.2, 3.6), layout="constrained")
ax.plot(
    memory.index,
    memory["weights tensor"],
    "k:",
    label=r"weights tensor, $4HT^2$ bytes",
)
ax.plot(
    memory.index, memory["peak, from scratch"], "o-", label="peak, from scratch"
)
ax.plot(
    memory.index, memory["peak, fused kernel"], "s-", label="peak, fused kernel"
)
ax.set(
    xscale="log",
    yscale="log",
    xlabel="sequence length T",
    ylabel="MiB",
    title=f"one call, {num_heads} heads of width {d_head}, float32",
)
ax.set_xticks(lengths, [str(T) for T in lengths])
ax.minorticks_off()
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Memory of one call against the sequence length, on log-log axes. The weights
# tensor (dotted) is exactly $4HT^2$ bytes: a line of slope 2, four times more for every
# doubling of $T$. The from-scratch version's peak (circles) runs parallel to it, above: it
# holds the scores and the weights at once, about {glue:text}`ch3_scratch_over_weights:.1f`
# times the weights tensor. The fused kernel's peak (squares) has slope 1: it grows with the
# output, $4HTd$ bytes, not with the weight matrix, and at $T =$ {glue:text}`ch3_longest` it is
# {glue:text}`ch3_fused_peak_mib:.1f` MiB against {glue:text}`ch3_scratch_peak_mib:.0f` MiB for
# the from-scratch version. That quadratic term in memory is what fused kernels remove; the
# number of operations stays quadratic in $T$ for both.

# %% tags=["remove-cell", "nbval-ignore-output"]
# The caption's claims, checked with margins (the peaks depend on PyTorch's kernels).
for T in lengths:  # float32, nothing shared: exactly 4 H T^2 bytes
    assert memory.loc[T, "weights tensor"] * mib == 4 * num_heads * T * T
longest = memory.loc[lengths[-1]]
growth = memory.loc[lengths[-1]] / memory.loc[lengths[-2]]  # one doubling of T
assert (
    memory.loc[256:, "peak, from scratch"]
    >= 2 * memory.loc[256:, "weights tensor"]
).all()
assert 3.5 < growth["peak, from scratch"] < 4.5  # quadratic
assert growth["peak, fused kernel"] < 2.5  # about linear
assert longest["peak, fused kernel"] < 0.1 * longest["peak, from scratch"]
glue(
    "ch3_scratch_over_weights",
    round(longest["peak, from scratch"] / longest["weights tensor"], 1),
)
glue("ch3_fused_peak_mib", round(longest["peak, fused kernel"], 1))
glue("ch3_scratch_peak_mib", round(longest["peak, from scratch"]))

# %% tags=["remove-cell"]
glue("ch3_mem_heads", num_heads)
glue("ch3_mem_width", d_head)
glue("ch3_longest", lengths[-1])

# %% [markdown]
# ## Attention dropout
#
# Dropout on attention zeroes each weight $a_{ij}$ independently with probability $p$ during
# training: query $i$ then ignores value $j$ for this step. PyTorch, and `helpers`, do **not**
# renormalize the surviving weights so that they sum to one again; they divide them by
# $1 - p$. The expected weight is unchanged, $(1-p) \cdot a_{ij}/(1-p) = a_{ij}$, but any single
# row can sum to more or less than one.
#
#
# To look at the weights themselves we set the values to the identity matrix, so that the
# output *is* the weight matrix, and draw {glue:text}`ch3_draws` dropout patterns with
# $p =$ {glue:text}`ch3_drop_p` for {glue:text}`ch3_drop_tokens` queries and as many keys.

# %%
p_drop, draws, n_tokens, width_d = 0.6, 3000, 10, 16
q_d = torch.randn(n_tokens, width_d, generator=generator)
k_d = torch.randn(n_tokens, width_d, generator=generator)
identity = torch.eye(n_tokens)  # output = weights @ I = weights
clean, _ = scaled_dot_product_attention(q_d, k_d, identity)
# the same queries, once per draw
q_draws = q_d.expand(draws, n_tokens, width_d)
dropped, _ = scaled_dot_product_attention(
    q_draws, k_d, identity, dropout_p=p_drop, generator=generator
)
evaluated, _ = scaled_dot_product_attention(
    q_draws, k_d, identity, dropout_p=p_drop, training=False
)
# the total weight each query hands out, per draw: draws * n_tokens numbers
train_totals = dropped.sum(dim=-1).flatten()
eval_totals = evaluated.sum(dim=-1).flatten()
kept = dropped != 0

# %% tags=["remove-cell"]
torch.testing.assert_close(
    dropped[kept], clean.expand_as(dropped)[kept] / (1 - p_drop)
)
assert abs(train_totals.mean().item() - 1) < 0.02
torch.testing.assert_close(eval_totals, torch.ones(draws * n_tokens))
assert train_totals.min() == 0  # every weight of the row dropped
# no weight dropped: the maximum, 1 / (1 - p)
assert abs(train_totals.max().item() - 1 / (1 - p_drop)) < 1e-5
assert train_totals.std() > 0.3  # widely scattered
standard_error = clean * math.sqrt(p_drop / (1 - p_drop) / draws)
assert ((dropped.mean(dim=0) - clean).abs() <= 4 * standard_error + 1e-6).all()

# %% tags=["hide-input"]
fig, (ax_train, ax_eval) = plt.subplots(1, 2, figsize=(6.2, 2.8), sharex=True)
bin_width = 0.05  # bins centred on multiples of 0.05, so that 1.0 sits mid-bin
bins = torch.arange(
    -bin_width / 2, 1 / (1 - p_drop) + bin_width, bin_width
).numpy()
sns.histplot(train_totals.numpy(), bins=bins, ax=ax_train)
sns.histplot(eval_totals.numpy(), bins=bins, ax=ax_eval)
ax_train.set(
    title=f"training (p = {p_drop})", xlabel="total weight of one query"
)
ax_eval.set(title="evaluation", xlabel="total weight of one query")
for ax in (ax_train, ax_eval):
    ax.axvline(1, color="k", ls=":")
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure.** Each count is one query in one draw. In training (left) the total weight a query
# hands out scatters widely around 1 (standard deviation {glue:text}`ch3_spread_train:.2f`,
# from {glue:text}`ch3_min_total_train:.2f` to {glue:text}`ch3_max_total_train:.2f`) because
# survivors are rescaled, not renormalized; in evaluation (right) it is exactly 1 every time.
#
# Over the {glue:text}`ch3_draws` draws {glue:text}`ch3_drop_fraction:.3f` of the weights were
# dropped (the target is $p =$ {glue:text}`ch3_drop_p`), and the mean total weight was
# {glue:text}`ch3_mean_total_train:.3f` in training against
# {glue:text}`ch3_mean_total_eval:.3f` in evaluation: correct on average, noisy per step. The
# average of the dropped weight matrices also matches the clean one entry by entry, within
# four standard errors.
#
# The same holds for the outputs, because the output is linear in the weights: the average of
# many training-mode outputs approaches the evaluation-mode output. Here with random values
# and dropout {glue:text}`ch3_mha_dropout` on the weights:

# %%
head_dropout = 0.5
values_d = torch.randn(n_tokens, width_d, generator=generator)
train_outputs, _ = scaled_dot_product_attention(
    q_draws, k_d, values_d, dropout_p=head_dropout, generator=generator
)
eval_output, _ = scaled_dot_product_attention(
    q_d, k_d, values_d, dropout_p=head_dropout, training=False
)
# one training output against evaluation, and the mean of all of them
spread = train_outputs.std(dim=0).mean().item()
gap = (train_outputs.mean(dim=0) - eval_output).abs().max().item()
print(f"typical deviation of one training output: {spread:.2f}")
print(f"mean of {draws} training outputs, off by at most: {gap:.3f}")

# %% tags=["remove-cell"]
assert gap < 0.1 * spread
eval_again, _ = scaled_dot_product_attention(
    q_d, k_d, values_d, dropout_p=head_dropout, training=False
)
assert torch.equal(eval_output, eval_again)  # evaluation is deterministic
# The same for a head with its own projections (a source audit: Sources and errata).
from helpers.attention import SingleHeadAttention

torch.manual_seed(0)
drop_head = SingleHeadAttention(d_model=width_d, d_head=width_d)


def head_with_dropout(x, training):
    """The head's projections, then attention with dropout on its weights."""
    q, k, v = drop_head.query(x), drop_head.key(x), drop_head.value(x)
    output, _ = scaled_dot_product_attention(
        q, k, v, dropout_p=head_dropout, training=training
    )
    return output


tokens = torch.randn(1, n_tokens, width_d)
# the same sequence, many dropout patterns
batch = tokens.expand(draws, n_tokens, width_d)
with torch.no_grad():
    head_train_outputs = head_with_dropout(batch, training=True)
    head_eval_output = head_with_dropout(tokens, training=False)
    head_eval_again = head_with_dropout(tokens, training=False)
assert torch.equal(head_eval_output, head_eval_again)  # deterministic
head_gap = (
    (head_train_outputs.mean(dim=0) - head_eval_output[0]).abs().max().item()
)
head_spread = head_train_outputs.std(dim=0).mean().item()
assert head_gap < 0.1 * head_spread

# %% tags=["remove-cell"]
# Numbers quoted in the prose of this section.
glue("ch3_drop_p", p_drop)
glue("ch3_draws", draws)
glue("ch3_drop_tokens", n_tokens)
glue("ch3_max_total", round(1 / (1 - p_drop), 2))
glue("ch3_drop_fraction", round(1 - kept.float().mean().item(), 3))
glue("ch3_mean_total_train", round(train_totals.mean().item(), 3))
glue("ch3_mean_total_eval", round(eval_totals.mean().item(), 3))
glue("ch3_spread_train", round(train_totals.std().item(), 2))
glue("ch3_min_total_train", round(train_totals.min().item(), 2))
glue("ch3_max_total_train", round(train_totals.max().item(), 2))
glue("ch3_mha_dropout", head_dropout)
glue("ch3_mha_gap", round(gap, 3))
glue("ch3_mha_spread", round(spread, 2))

# %% [markdown]
# A single training-mode output differs from the evaluation output by about
# {glue:text}`ch3_mha_spread:.2f` per coordinate (the standard deviation across draws), while
# the mean of {glue:text}`ch3_draws` of them is within {glue:text}`ch3_mha_gap:.3f` of it, and
# evaluation mode returns the same output on every call. That is the contract of dropout:
# noise during training, unbiased on average, switched off in evaluation (for a module, by
# `model.eval()`).
#
# ## Summary
#
# - Scaled dot-product attention is $\operatorname{softmax}(QK^\top/\sqrt{d})\,V$: scores for
#   every (query, key) pair, a softmax over the keys, a weighted average of the values. Written
#   with `k.transpose(-2, -1)` or an `einsum` with `...`, it runs on any batch and head axes
#   and agrees with PyTorch's `F.scaled_dot_product_attention`.
# - Every output is a convex combination of the values.
# - Dot products of $d$ independent unit-variance entries have variance $d$; without the
#   $1/\sqrt{d}$ the softmax saturates (largest weight {glue:text}`ch3_maxw_unscaled:.2f` at
#   $d =$ {glue:text}`ch3_width_max`, against {glue:text}`ch3_maxw_scaled:.2f` scaled) and
#   stops comparing keys.
# - A head trained on associative recall puts its weight on the right key; at $d = 256$
#   without the scale it starts saturated and learns more slowly on every seed.
# - The weight matrix has $T_q \times T_k$ entries per head: a from-scratch version's memory
#   grows with $T^2$, while a fused kernel that does not return the weights grows with $T$
#   ({glue:text}`ch3_fused_peak_mib:.1f` MiB against {glue:text}`ch3_scratch_peak_mib:.0f` MiB
#   at $T =$ {glue:text}`ch3_longest`).
# - Attention dropout zeroes weights and rescales the survivors by $1/(1-p)$ without
#   renormalizing: each row's total is noisy in training, correct on average, and exactly 1 in
#   evaluation.
#
# ## Exercises
#
# 1. Write `my_attention(q, k, v)` for inputs with any number of leading batch dimensions,
#    using `torch.einsum` or `@`, and check it with `check_attention(my_attention)` from
#    `helpers.checks`. The checker names the usual mistakes (unscaled scores, a softmax
#    over the wrong axis, `k.T` on batched inputs).
# 2. Divide the scores by $d$ instead of $\sqrt{d}$. With the assumptions of the scaling
#    experiment, what is the variance of the scores then, and what happens to the weights as
#    $d$ grows? Check your answer by adding a row to the experiment. (The maximal-update
#    parametrization, µP {cite}`yang2022tensor`, divides by $d$ on purpose; the solution
#    says why that is no contradiction.)
# 3. In the dropout experiment, why can the total weight of one query exceed 1, and what is
#    its largest possible value for $p =$ {glue:text}`ch3_drop_p`?
#
# ```{admonition} Solution 1
# :class: dropdown
# Transpose only the last two axes, so that batch dimensions pass through:
#
#     def my_attention(q, k, v):
#         scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
#         return scores.softmax(dim=-1) @ v
#
# `check_attention(my_attention)` then answers with a line starting "Correct". A cell not
# shown on the site runs exactly this check.
# ```


# %% tags=["remove-cell"]
def my_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return scores.softmax(dim=-1) @ v


assert check_attention(my_attention).startswith("Correct")

# %% [markdown]
# ```{admonition} Solution 2
# :class: dropdown
# Dividing by $d$ divides the variance by $d^2$: it becomes $d / d^2 = 1/d$, which goes to
# zero. The scores all approach 0 and the weights approach the uniform $1/T_k$: the opposite
# failure of no scaling, where every key looks equally relevant. Under these assumptions only
# $\sqrt{d}$ keeps the variance at 1 for every width. µP {cite}`yang2022tensor` questions the
# assumption, not the arithmetic: once training has aligned queries with the keys they look
# for, their coordinates are correlated and $q \cdot k$ grows like $d$, not $\sqrt{d}$, so
# $1/d$ is what keeps *trained* scores of order one as the width grows. The two rules answer
# different questions: $\sqrt{d}$ the scores of independent random vectors at initialization,
# $1/d$ those of aligned ones after training.
# ```
#
# ```{admonition} Solution 3
# :class: dropdown
# The survivors are multiplied by $1/(1-p) =$ {glue:text}`ch3_max_total` and nothing
# renormalizes them, so a row where no weight is dropped sums to
# {glue:text}`ch3_max_total`. That is the maximum (the histogram's largest total,
# {glue:text}`ch3_max_total_train:.2f`, is that row); the minimum is 0, when every
# weight is dropped. The expectation stays 1.
# ```
