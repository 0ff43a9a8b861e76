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
# # The Transformer encoder block
#
# Multi-head attention lets every position look at every other one. On its own it is not yet a
# network you can stack twenty times and train: the Transformer {cite}`vaswani2017attention`
# wraps it in a *block* with three more ingredients, a residual connection, a normalization
# and a position-wise feed-forward network.
#
# After this chapter you will be able to:
#
# - build an encoder block from scratch, in its post-LN and pre-LN forms, and match it weight
#   for weight with PyTorch's `torch.nn.TransformerEncoderLayer`;
# - explain, from gradients measured at initialization and from a deep stack trained with and
#   without warm-up, how the placement of the normalization decides how easily it trains
#   {cite}`xiong2020layernorm`;
# - choose between LayerNorm, BatchNorm and RMSNorm, place dropout where it belongs, and say
#   what the residual connections protect in a deep stack.
#
# ```{figure} ../book/_static/diagrams/map_06.svg
# :alt: The book's map of the Transformer: one encoder block (self-attention, feed-forward network, residual connections and normalizations) is highlighted.
# :width: 60%
# :name: fig-map-06
#
# Where this chapter sits in the Transformer: the encoder block, with its attention,
# feed-forward network, residual connections and normalizations.
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
from collections import OrderedDict

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

import helpers
from helpers import glue, show_source
from helpers.analysis import count_parameters, parameter_table, stable_rank
from helpers.attention import MultiHeadAttention
from helpers.checks import check_block_parameter_count, check_rms_norm
from helpers.interop import load_encoder_block
from helpers.masks import causal_mask
from helpers.parallel import run_in_processes
from helpers.tasks.reverse import BOOK_CONFIG, SCHEDULE_EXPERIMENT
from helpers.tasks.warmup import shipped_runs as shipped_warmup_runs
from helpers.tasks.warmup import train_stack
from helpers.transformer import (
    EncoderBlock,
    RMSNorm,
    TransformerConfig,
    TransformerEncoder,
    TransformerStack,
)

device = helpers.get_device()  # a GPU if there is one, else the CPU

# The models of this chapter are so small that splitting each matrix product
# over several CPU threads costs more in synchronization than it saves.
helpers.use_one_thread(device)

# %% [markdown]
# ## The block, piece by piece
#
# An encoder block maps a sequence $X$ of shape $(T, D)$ to a sequence of the same shape, so
# blocks can be stacked. It has two *sublayers*:
#
# 1. **Multi-head self-attention** (chapter 4) mixes information *across positions*: the new
#    vector at position $t$ is a weighted average of (projections of) all positions.
# 2. **The feed-forward network** (FFN) transforms each position *on its own*, with the same
#    two-layer MLP at every position:
#
#    $$
#    \operatorname{FFN}(x) = \max(0,\ x W_1 + b_1)\, W_2 + b_2, \qquad
#    W_1 \in \mathbb{R}^{D \times F},\ W_2 \in \mathbb{R}^{F \times D}.
#    $$
#
# Each sublayer is wrapped in a **residual connection**, $x + \operatorname{sublayer}(x)$, which
# gives gradients a path around the sublayer and lets a block start as a near-identity
# map, and a **normalization**, which keeps the scale of the vectors in check. **Dropout** sits
# on each sublayer's output, before it joins the residual stream (and, inside, on the attention
# weights and the FFN's hidden layer). There are two ways to place the normalization:
#
# $$
# \begin{aligned}
# &\text{post-LN (2017):} && X' = \operatorname{LN}\big(X + \operatorname{Drop}(\operatorname{MHA}(X))\big),\\
# &&& Y = \operatorname{LN}\big(X' + \operatorname{Drop}(\operatorname{FFN}(X'))\big),\\
# &\text{pre-LN:} && X' = X + \operatorname{Drop}\big(\operatorname{MHA}(\operatorname{LN}(X))\big),\\
# &&& Y = X' + \operatorname{Drop}\big(\operatorname{FFN}(\operatorname{LN}(X'))\big).
# \end{aligned}
# $$
#
# ```{figure} ../book/_static/diagrams/encoder_block.svg
# :alt: Two flow charts side by side, input x at the top, output at the bottom. Left, post-LN (2017): attention, dropout, add the residual, LayerNorm, then feed-forward, dropout, add the residual, LayerNorm. Right, pre-LN: LayerNorm, attention, dropout, add the residual, then LayerNorm, feed-forward, dropout, add the residual. In both, purple residual paths branch off before each sublayer and join at a plus sign after its dropout.
# :name: fig-encoder-block
#
# The two blocks of the equations above (purple: the residual paths; dashed: dropout). Look at
# the straight line from `x` to `out`: in the post-LN block it runs through a LayerNorm after
# each addition; in the pre-LN block it carries nothing but the two additions, and each
# sublayer reads a normalized copy of the stream. Dropout sits on each sublayer's output,
# before the addition, never on the stream itself.
# ```
#
# In the pre-LN block nothing ever normalizes the residual stream itself: each block *adds* to
# it. Here are both from scratch, in one small class.


# %%
class ScratchEncoderBlock(nn.Module):
    def __init__(
        self, d_model, num_heads, ffn_width, dropout=0.0, norm_first=True
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout, bias=True
        )
        self.ffn = nn.Sequential(
            OrderedDict(
                linear1=nn.Linear(d_model, ffn_width),
                activation=nn.ReLU(),
                dropout=nn.Dropout(dropout),
                linear2=nn.Linear(ffn_width, d_model),
            )
        )
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def attend(self, x, mask):
        return self.self_attn(x, x, x, mask=mask)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout1(self.attend(self.norm1(x), mask))
            return x + self.dropout2(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.attend(x, mask)))
        return self.norm2(x + self.dropout2(self.ffn(x)))


# %% [markdown]
# The FFN is *position-wise*: applying it to a whole sequence is the same as applying it to
# each position separately, so it cannot move information between positions. Only attention
# can.

# %%
scratch = ScratchEncoderBlock(d_model=64, num_heads=4, ffn_width=256).eval()
x = torch.randn(2, 10, 64)
print("block output", tuple(scratch(x).shape))
per_position = torch.stack([scratch.ffn(x[:, t]) for t in range(10)], dim=1)
same = torch.allclose(scratch.ffn(x), per_position, atol=1e-6)
print("FFN on the sequence = FFN position by position:", same)

# %% tags=["remove-cell"]
torch.testing.assert_close(scratch.ffn(x), per_position)

# %% [markdown]
# Why make the FFN wider than the model ($F = 4D$ in the original paper, 2048 for $D = 512$)?
# Attention's output at a position is a convex combination of value vectors: a *mixing* step
# with few parameters per token. The FFN is where each token gets a wide nonlinear transform of
# what it has gathered; with $F = 4D$ it holds two thirds of the block's weights (we count them
# below). A wide layer is also the cheapest kind of compute on parallel hardware: one large
# matrix product instead of several small sequential ones.
#
# The book's canonical block computes the same function, with input checks, an optional
# RMSNorm (below) and a way to return the attention weights (its code is folded: open the
# cell's output to read it):

# %% tags=["hide-output"]
show_source(EncoderBlock)

# %% tags=["remove-input"]
for norm_first in (True, False):
    package = EncoderBlock(64, 4, 256, norm_first=norm_first).eval()
    reference = ScratchEncoderBlock(64, 4, 256, norm_first=norm_first).eval()
    package.load_state_dict(reference.state_dict())
    torch.testing.assert_close(package(x), reference(x))
    torch.testing.assert_close(
        package(x, causal_mask(10)), reference(x, causal_mask(10))
    )
print(
    "scratch and book blocks agree, pre-LN and post-LN, with and without a mask"
)

# %% [markdown]
# ## The same block as PyTorch's
#
# `torch.nn.TransformerEncoderLayer` implements both variants (`norm_first=False` is the
# default, post-LN). With its weights copied into our block (`load_encoder_block`), the two
# must agree to floating-point precision. Its boolean `src_mask` is inverted, as
# `nn.MultiheadAttention`'s is ({doc}`chapter 4 <04_multi_head_attention>`), so it gets
# `~mask`.

# %%
torch.manual_seed(1)
differences = {}
for norm_first in (True, False):
    torch_layer = nn.TransformerEncoderLayer(
        64, 4, 256, dropout=0.1, batch_first=True, norm_first=norm_first
    ).eval()
    block = EncoderBlock(64, 4, 256, dropout=0.1, norm_first=norm_first).eval()
    load_encoder_block(block, torch_layer)
    mask = causal_mask(10)
    ours, theirs = block(x, mask), torch_layer(x, src_mask=~mask)
    difference = (ours - theirs).abs().max().item()
    differences[norm_first] = difference
    print(f"norm_first={norm_first}: agrees within 1e-5: {difference < 1e-5}")

# %% tags=["remove-cell"]
assert all(difference < 1e-5 for difference in differences.values())

# %% [markdown]
# ```{admonition} Pitfall: feeding PyTorch your mask unchanged
# :class: warning
# Pass the book's causal mask to `torch.nn.TransformerEncoderLayer` without inverting it and
# every query attends only to keys strictly in its *future* (the last query to none at all).
# No error is raised; the outputs are simply wrong. The cell below shows the symptom; the fix
# is `src_mask=~mask`.
# ```

# %%
# True meant "may attend" here, "blocked" there
wrong = torch_layer(x, src_mask=mask)
mask_error = (wrong - block(x, mask)).abs().max().item()
print(f"largest difference from the right output: {mask_error:.1f}")

# %% tags=["remove-cell"]
assert mask_error > 0.1

# %% [markdown]
# ## Where the parameters are
#
# For one block with biases and LayerNorm: attention has chapter 4's $4D^2$ weights and $4D$
# biases; the FFN has $2DF$ weights and $F + D$ biases; each
# LayerNorm has a gain and a bias of size $D$. The table counts them in a real block and
# compares with the formula.

# %%
d_model, num_heads, ffn_width = 64, 4, 256
block = EncoderBlock(d_model, num_heads, ffn_width)
table = parameter_table(block)
formula = {
    "self_attn": 4 * d_model**2 + 4 * d_model,
    "ffn": 2 * d_model * ffn_width + ffn_width + d_model,
    "norm1": 2 * d_model,
    "norm2": 2 * d_model,
}
formula["total"] = sum(formula.values())
table["formula"] = table["module"].map(formula)
table["share"] = (table["parameters"] / count_parameters(block)).round(3)
table

# %% tags=["remove-cell"]
assert (table["parameters"] == table["formula"]).all()
ffn_share = round(float(table.set_index("module").loc["ffn", "share"]), 2)
glue("ch6_ffn_share", ffn_share)
assert 0.6 < ffn_share < 0.7  # "two thirds", as the prose says

# %% [markdown]
# The FFN holds {glue:text}`ch6_ffn_share:.0%` of the block's parameters, attention nearly all
# of the rest; the normalizations are a rounding error. Note that the number of heads does not
# appear in the formula: the heads split the width $D$, they do not add to it.
#
# ## Pre-LN or post-LN? Gradients at initialization
#
# The 2017 Transformer (post-LN) was trained with a learning-rate *warm-up*: start tiny, grow
# over the first few thousand steps. Xiong et al. {cite}`xiong2020layernorm` argued that
# post-LN needs it, and showed that pre-LN Transformers train without it. Their argument is
# about the gradients *at initialization*: in a post-LN stack the gradients of the parameters
# near the output are large and do not shrink as the stack gets deeper, so the first
# full-size steps are too big there; in a pre-LN stack the residual stream grows with depth,
# every normalization divides by that growing scale, and the gradients of the late blocks
# shrink roughly like $1/\sqrt{L}$ for $L$ blocks. That is a claim about the first steps, and
# it can be measured without training anything. (Whether a given model then fails without
# warm-up depends on its learning rate too: a small enough step needs no warm-up at all.)
#
# We measure it: build stacks of $L$ blocks (Xavier-initialized, as in the paper), push a
# batch of random sequences through, put a linear classifier with a cross-entropy loss on top,
# and record the gradient norm of each block's second FFN matrix $W_2$. Four seeds per
# setting.

# %% tags=["remove-cell"]
# Chapter 7's schedule experiment runs post-LN without warm-up at two learning
# rates, the book's and a larger one.
large_lr = SCHEDULE_EXPERIMENT["post-LN, lr 0.05, no warm-up"]["lr"]
no_warmup = SCHEDULE_EXPERIMENT["post-LN, no warm-up"]
assert no_warmup == {"norm_first": False, "warmup_steps": 0}
assert large_lr > BOOK_CONFIG.lr


# %%
def ffn_gradient_norms(norm_first, num_layers, seed, d_model=32):
    """Gradient norm of each block's FFN W2, one random batch, at init."""
    torch.manual_seed(seed)
    config = TransformerConfig(
        d_model=d_model,
        num_heads=4,
        num_layers=num_layers,
        ffn_width=4 * d_model,
        norm_first=norm_first,
    )
    encoder = TransformerEncoder(config)
    for weight in encoder.parameters():
        if weight.dim() == 2:
            nn.init.xavier_uniform_(weight)
    classifier = nn.Linear(d_model, 10)
    x, y = torch.randn(8, 16, d_model), torch.randint(0, 10, (8, 16))
    F.cross_entropy(
        classifier(encoder(x)).flatten(0, 1), y.flatten()
    ).backward()
    return [
        block.ffn.linear2.weight.grad.norm().item() for block in encoder.blocks
    ]


depths, seeds = [2, 4, 8, 16, 32], range(4)
grads = {
    (variant, depth): np.mean(
        [ffn_gradient_norms(variant == "pre-LN", depth, s) for s in seeds], 0
    )
    for variant in ("pre-LN", "post-LN")
    for depth in depths
}

# %% tags=["hide-input"]
fig, (left, right) = plt.subplots(1, 2, figsize=(6.2, 3.4))
for variant, color in (("post-LN", "C3"), ("pre-LN", "C0")):
    per_block = grads[(variant, 32)]
    left.plot(range(1, 33), per_block, ".-", color=color, label=variant)
    last = [grads[(variant, depth)][-1] for depth in depths]
    right.plot(depths, last, "o-", color=color, label=variant)
left.set(
    xlabel="block (1 = nearest the input)", ylabel="gradient norm of FFN $W_2$"
)
left.set_title("a stack of 32 blocks")
right.set(
    xscale="log",
    yscale="log",
    xlabel="number of blocks $L$",
    ylabel="last block's norm",
)
right.minorticks_off()
right.set_xticks(depths, [str(d) for d in depths])
right.set_yticks([0.1, 0.2, 0.3, 0.4])
right.yaxis.set_major_formatter(mpl.ticker.ScalarFormatter())
right.set_title("the last block, as the stack deepens")
left.legend()
plt.show()

# %% [markdown]
# **Figure.** Left: in a 32-block stack at initialization, post-LN (red) has its largest
# gradients in the blocks nearest the output, while pre-LN (blue) has its smallest there.
# Right: as the stack deepens, the last block's gradient tends to grow for post-LN (not
# monotonically) and falls for pre-LN (log-log axes), so the gap between them widens with
# depth.

# %% tags=["remove-cell"]
post_last = [grads[("post-LN", depth)][-1] for depth in depths]
pre_last = [grads[("pre-LN", depth)][-1] for depth in depths]
gap_2 = round(post_last[0] / pre_last[0], 1)
glue("ch6_gap_L2", gap_2)
gap_32 = round(post_last[-1] / pre_last[-1], 1)
glue("ch6_gap_L32", gap_32)
slope = np.polyfit(np.log(depths), np.log(pre_last), deg=1)[0]
pre_slope = round(float(slope), 2)
glue("ch6_pre_slope", pre_slope)
post_32, pre_32 = grads[("post-LN", 32)], grads[("pre-LN", 32)]
assert post_32[-1] > post_32[0] and pre_32[-1] < pre_32[0]  # the left panel
# post-LN: the last block's gradient does not shrink
assert post_last[-1] > post_last[0]
assert pre_last[-1] < 0.6 * pre_last[0]  # pre-LN: it does
assert gap_32 > 3 * gap_2  # so the gap widens with depth
assert -0.8 < pre_slope < -0.15

# %% [markdown]
# At depth 2 the two variants' last-block gradients differ by a factor
# {glue:text}`ch6_gap_L2`; at depth 32 by {glue:text}`ch6_gap_L32`. The pre-LN curve falls with
# slope {glue:text}`ch6_pre_slope` on log-log axes, not the $-0.5$ of the $1/\sqrt{L}$
# argument; we come back to why just below. That is
# the mechanism behind warm-up: with the same learning rate, a post-LN stack's first steps
# are largest exactly where its gradients are largest, near the output, and a deep post-LN
# stack can diverge before Adam's statistics settle; warm-up caps those first steps. A pre-LN
# stack's updates are tamer from step one. The price of pre-LN: since nothing normalizes the
# residual stream, the stack needs one more LayerNorm at its end (`final_norm` in the book's
# `TransformerEncoder`), and its output scale grows with depth. We can see
# that growth directly, in the same stacks as the gradient experiment (width 32, Xavier
# initialization, four seeds), reading the root-mean-square of the stream after every block of
# a 32-block stack:


# %%
def stream_rms(seed, num_layers=32, d_model=32):
    """RMS of a pre-LN residual stream after each block (set-up as above)."""
    torch.manual_seed(seed)
    config = TransformerConfig(
        d_model=d_model,
        num_heads=4,
        num_layers=num_layers,
        ffn_width=4 * d_model,
        norm_first=True,
        final_norm=False,
    )
    stack = TransformerEncoder(config).eval()
    for weight in stack.parameters():
        if weight.dim() == 2:
            nn.init.xavier_uniform_(weight)
    hidden, rms = torch.randn(8, 16, d_model), []
    with torch.no_grad():
        for layer in stack.blocks:
            hidden = layer(hidden)
            rms.append(hidden.pow(2).mean().sqrt().item())
    return rms


rms = np.mean([stream_rms(s) for s in seeds], 0)
print(
    "stream RMS after blocks 1, 16, 32:",
    f"{rms[0]:.2f}, {rms[15]:.2f}, {rms[31]:.2f}",
)

# %% tags=["remove-cell"]
growth = round(rms[15] / rms[0], 2)
glue("ch6_stream_growth", growth)
stream_slope = np.polyfit(
    np.log(depths), np.log([rms[d - 1] for d in depths]), 1
)[0]
glue("ch6_stream_slope", round(float(stream_slope), 2))
assert growth > 2 and stream_slope > 0.2
# the pre-LN gradient falls roughly like 1 / (stream RMS)
assert abs(pre_slope + stream_slope) < 0.15

# %% [markdown]
# The root-mean-square of the pre-LN residual stream grows by a factor
# {glue:text}`ch6_stream_growth` from block 1's output to block 16's, and over depths 2 to 32
# like $L^{a}$ with $a =$ {glue:text}`ch6_stream_slope` (a log-log fit). Every normalization
# divides by that scale, so the last block's gradient should fall like $L^{-a}$: close to
# the measured slope {glue:text}`ch6_pre_slope`.
# The $1/\sqrt{L}$ of the argument corresponds to a stream growing like $\sqrt{L}$; in these
# stacks it grows more slowly.
#
# ### Does it decide training?
#
# Gradients at initialization are an argument; training is the test. A stack of 12 blocks of
# width 32 learns to reverse sequences of 12 tokens (each output needs exactly one input
# position, which only attention can fetch), with Adam at a constant learning rate of 0.005,
# after a linear warm-up over the first 100 steps or without one:

# %%
show_source(train_stack)

# %% [markdown]
# Each run takes several seconds; the two without warm-up train side by side here, one
# process each:

# %% tags=["nbval-ignore-output"]
jobs = [
    dict(norm_first=False, warmup_steps=0, seed=0),
    dict(norm_first=True, warmup_steps=0, seed=0),
]
post_ln, pre_ln = run_in_processes(train_stack, jobs, workers=2)
for name, run in (("post-LN", post_ln), ("pre-LN", pre_ln)):
    loss, accuracy = run["losses"][-1], run["accuracy"]
    print(f"{name}: final loss {loss:.2f}, test accuracy {accuracy:.2f}")

# %% tags=["hide-input", "nbval-ignore-output"]
grid = shipped_warmup_runs()
final = grid.pivot_table(
    index="seed", columns=["norm", "warmup"], values="accuracy"
)
fig, (left, right) = plt.subplots(
    1, 2, figsize=(6.2, 2.8), layout="constrained"
)
for name, run, colour in (("post-LN", post_ln, "C3"), ("pre-LN", pre_ln, "C0")):
    left.plot(run["losses"], color=colour, label=f"{name}, no warm-up")
left.axhline(np.log(10), color="k", ls=":", lw=1, label="chance")
left.set(xlabel="step", ylabel="training loss", title="this page's runs")
left.legend(fontsize=8)
settings = [("post-LN", 0), ("post-LN", 100), ("pre-LN", 0), ("pre-LN", 100)]
for i, column in enumerate(settings):
    right.scatter(
        [i] * len(final), final[column], color="C3" if i < 2 else "C0"
    )
right.set_xticks(
    range(4), ["post\nno w-u", "post\nwarm-up", "pre\nno w-u", "pre\nwarm-up"]
)
right.set(
    ylabel="test accuracy", title="shipped runs, one dot a seed", ylim=(0, 1.05)
)
plt.show()

# %% tags=["remove-cell", "nbval-ignore-output"]
# pre-LN learns on every seed, with or without warm-up
assert (final[("pre-LN", 0)] > 0.95).all() and (
    final[("pre-LN", 100)] > 0.95
).all()
# post-LN without warm-up never learns it (chance is 0.1, one seed ends at 0.36)...
assert final[("post-LN", 0)].max() < 0.5
# ...and learns with it on most seeds, every seed above every run without
assert final[("post-LN", 100)].median() > 0.95
assert final[("post-LN", 100)].min() > final[("post-LN", 0)].max() + 0.2
# the live runs land in the shipped spread
assert post_ln["accuracy"] < 0.5 and post_ln["losses"][-1] > 1.0
assert pre_ln["accuracy"] > 0.95
glue("ch6_warm_seeds", grid["seed"].nunique())
glue("ch6_post_cold", f"{final[('post-LN', 0)].max():.2f}")
learned = int((final[("post-LN", 100)] > 0.95).sum())
glue("ch6_post_warm_learned", learned)
glue("ch6_post_warm_min", f"{final[('post-LN', 100)].min():.2f}")
glue("ch6_pre_cold", f"{final[('pre-LN', 0)].min():.2f}")

# %% [markdown]
# **Figure.** Left: the training loss of this page's two runs without warm-up; the post-LN
# stack (red) never leaves chance, the pre-LN stack (blue) learns the task. Right: the test
# accuracy of {glue:text}`ch6_warm_seeds` seeds of each setting, trained by the same code
# over more seeds (`scripts/margins.py encoder`) and shipped with the book.
#
# Pre-LN learns the task on every seed, with or without warm-up (test accuracy at least
# {glue:text}`ch6_pre_cold`). Post-LN without warm-up never does (at most
# {glue:text}`ch6_post_cold`, where guessing gives 0.1); with the 100-step warm-up it learns
# it on {glue:text}`ch6_post_warm_learned` of the {glue:text}`ch6_warm_seeds` seeds, and the
# last one gets further than any run without (to {glue:text}`ch6_post_warm_min`). That is
# Xiong et al.'s finding at this learning rate, and a reminder that post-LN is the fragile
# one. It is not a law for every rate: a small enough step needs no warm-up in
# either form, and chapter 7 finds a rate, 0.1, at which its pre-LN model needs the warm-up
# too. Pre-LN widens the range of rates that train without warm-up; it does not abolish it.
#
# ## Which normalization? LayerNorm, not BatchNorm
#
# LayerNorm normalizes each position's vector over its $D$ features:
# $\operatorname{LN}(x) = \gamma \odot (x - \mu)/\sqrt{\sigma^2 + \epsilon} + \beta$ with $\mu$,
# $\sigma^2$ the mean and variance of the $D$ entries of $x$. BatchNorm instead normalizes each
# feature over the *batch* (and, for sequences, over all positions of all sequences). For text
# that is a poor fit: a position's output would depend on which other sequences share its
# batch, on how much padding they carry, and at test time on running statistics collected in
# training, while rare tokens' features are badly represented by batch averages. The first
# problem is easy to show: change sequence 1 of a batch and watch sequence 0's output.

# %%
torch.manual_seed(0)
batch = torch.randn(2, 6, 16)
changed = batch.clone()
changed[1] = 5 * torch.randn(6, 16) + 3  # only sequence 1 changes
batch_norm, layer_norm = nn.BatchNorm1d(16), nn.LayerNorm(16)


# BatchNorm1d wants (N, D): treat every position of every sequence as a sample
def bn(x):
    return batch_norm(x.flatten(0, 1)).view_as(x)


bn_shift = round((bn(changed)[0] - bn(batch)[0]).abs().max().item(), 2)
ln_shift = (layer_norm(changed)[0] - layer_norm(batch)[0]).abs().max().item()
print(f"sequence 0 moves by up to {bn_shift} under BatchNorm")
print(f"and by {ln_shift:.0f} under LayerNorm")

# %% tags=["remove-cell"]
glue("ch6_bn_shift", bn_shift)
torch.testing.assert_close(layer_norm(changed)[0], layer_norm(batch)[0])
assert bn_shift > 0.5

# %% [markdown]
# Under BatchNorm sequence 0's output moves by up to {glue:text}`ch6_bn_shift` although only
# sequence 1 changed; under LayerNorm it does not move at all.

# %% [markdown]
# ### RMSNorm
#
# RMSNorm {cite}`zhang2019rmsnorm` drops the centring and the bias:
# $\operatorname{RMSNorm}(x) = \gamma \odot x / \sqrt{\tfrac{1}{D}\sum_i x_i^2 + \epsilon}$.
# It is cheaper (no mean, one fewer parameter vector) and works as well in practice, which is
# why LLaMA-style models use it (chapter 10). Comparing the two formulas gives the equivalence
# condition: LayerNorm *is* RMSNorm applied to the centred vector, so the two agree exactly
# when each vector already has zero mean over its features, LayerNorm's bias is zero, and both
# use the same gain $\gamma$ and the same $\epsilon$. The package's version:

# %%
show_source(RMSNorm)

# %%
torch.manual_seed(0)
x = 2 * torch.randn(4, 10, 32) + 1  # off-centre inputs
rms_norm = RMSNorm(32, eps=1e-5)
layer_norm = nn.LayerNorm(32, eps=1e-5, bias=False)
centred = x - x.mean(-1, keepdim=True)
same = torch.allclose(rms_norm(centred), layer_norm(x), atol=1e-5)
print("LayerNorm = centre, then RMSNorm:", same)
off_centre = round((rms_norm(x) - layer_norm(x)).abs().max().item(), 2)
print(f"on off-centre inputs the two differ by up to {off_centre}")

# %% tags=["remove-cell"]
# LN = centre, then RMSNorm
torch.testing.assert_close(rms_norm(centred), layer_norm(x))
# and = PyTorch's
torch.testing.assert_close(rms_norm(x), nn.RMSNorm(32, eps=1e-5)(x))
glue("ch6_rms_vs_ln", off_centre)
assert off_centre > 0.1

# %% [markdown]
# On off-centre inputs the two differ by up to {glue:text}`ch6_rms_vs_ln`; on centred inputs
# (same gain, same $\epsilon$) they agree. `EncoderBlock(..., norm="rms")` builds a block with
# RMSNorm in both places.
#
# :::{admonition} Going deeper: one norm per sublayer, not one per block
# :class: dropdown
# It is tempting, when writing a post-LN block, to create *one* normalization module and call
# it after both sublayers. In a post-LN block the two norms act on two different sums,
# $X + \operatorname{MHA}(X)$ and $X' + \operatorname{FFN}(X')$; sharing the module means one
# per-feature affine map (one gain, and for LayerNorm one bias) is applied to both. That is
# parameter sharing: it saves $2D$ parameters per block (a LayerNorm's gain and bias), about
# {glue:text}`ch6_shared_saving:.1%` of our block. At initialization it changes nothing, since
# both norms start as the same identity-affine map (the folded cell below checks it); it only
# takes away freedom in training, where the two sums, which need not have the same
# per-feature scales, must share one gain. The 2017 paper and PyTorch keep two, and so does
# the book's block. (Some of the book's sources share one; see
# [Sources and errata](../book/sources.md).)
# :::

# %% tags=["hide-cell"]
torch.manual_seed(0)
separate = EncoderBlock(64, 4, 256, norm_first=False).eval()
shared = EncoderBlock(64, 4, 256, norm_first=False).eval()
shared.load_state_dict(separate.state_dict())
shared.norm2 = shared.norm1  # one module, called twice
x = torch.randn(2, 10, 64)
saving = count_parameters(separate) - count_parameters(shared)
print("identical at initialization:", torch.allclose(shared(x), separate(x)))
print("parameters saved:", saving)

# %% tags=["remove-cell"]
# identical at initialization
torch.testing.assert_close(shared(x), separate(x))
assert saving == 2 * 64
_ = glue("ch6_shared_saving", saving / count_parameters(separate))

# %% [markdown]
# ## Dropout goes on the branch, not on the stream
#
# ```{admonition} Pitfall: dropout after the residual sum
# :class: warning
# A post-LN block written as `y = dropout(norm(sublayer(x) + x))` drops entries of the
# *residual stream* itself, including the part that is the block's own input. In the paper,
# dropout is applied to the sublayer's output *before* it is added to the input, so the skip
# path is never dropped. The skip path is what carries a token's vector through a deep stack;
# the cell below measures how much of it survives. Both versions get a block whose sublayers
# output exactly zero, so all a block should do is pass its (normalized) input on, and we
# stack it up to six times in training mode, comparing each token's output with its
# normalized input (mean cosine similarity: 1 means intact).
# ```

# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
x = torch.randn(2, 10, 64)  # a batch of two sequences of width 64
block = EncoderBlock(64, 4, 256, dropout=0.3, norm_first=False).train()
with torch.no_grad():
    for parameter in [*block.self_attn.parameters(), *block.ffn.parameters()]:
        parameter.zero_()  # both sublayers now output zero
drop = nn.Dropout(0.3)  # the misplaced dropout: on the normalized sum


def misplaced_block(x):
    hidden = drop(block.norm1(x + block.self_attn(x, x, x)))
    return drop(block.norm2(hidden + block.ffn(hidden)))


target = block.norm1(x)  # what a block with zero sublayers should pass on
right, wrong, survival = x, x, []
for _ in range(6):
    right, wrong = block(right), misplaced_block(wrong)
    survival.append(
        [
            F.cosine_similarity(out, target, dim=-1).mean().item()
            for out in (right, wrong)
        ]
    )
survival = pd.DataFrame(
    survival, columns=["right", "misplaced"], index=range(1, 7)
)
survival.index.name = "blocks"
survival.round(2).T

# %% tags=["remove-cell"]
# the skip path is intact at every depth
assert (survival["right"] > 0.999).all()
assert survival["misplaced"][1] < 0.8 and survival["misplaced"][6] < 0.25
glue("ch6_survival_1", round(survival["misplaced"][1], 2))
glue("ch6_survival_6", round(survival["misplaced"][6], 2))

# %% [markdown]
# The right blocks hand their input on intact at every depth. The misplaced dropout keeps a
# cosine of {glue:text}`ch6_survival_1:.2f` with the input after one block and
# {glue:text}`ch6_survival_6:.2f` after six: each dropout on the stream discards part of what
# the skip path exists to carry, and the losses multiply with depth.

# %% [markdown]
# ## The stack
#
# An encoder is $L$ blocks in a row (plus the final normalization of a pre-LN stack).
# `get_attention_maps(x)` returns the attention weights every block computes, one
# $(B, H, T, T)$ tensor per block. A decoder is a stack too, so the stacking lives in one
# class, `TransformerStack`, and the encoder only names its block. A stack is built from one
# `TransformerConfig`, a frozen dataclass holding every size and choice (`d_model`,
# `num_heads`, `num_layers`, `ffn_width`, `norm_first`, ...) and checking them once; every
# block of the stack is built from it with keyword arguments:

# %% tags=["hide-output"]
show_source(TransformerStack)

# %% tags=["hide-output"]
show_source(TransformerEncoder)

# %% [markdown]
# Here, an untrained stack with a causal mask:

# %%
torch.manual_seed(0)
config = TransformerConfig(d_model=64, num_heads=4, num_layers=3, ffn_width=256)
encoder = TransformerEncoder(config).eval()
x = torch.randn(32, 10, 64)
maps = encoder.get_attention_maps(x, mask=causal_mask(10))
print("output", tuple(encoder(x, mask=causal_mask(10)).shape))
print("attention maps", [tuple(m.shape) for m in maps])

# %% tags=["remove-cell"]
assert all(torch.all(m.triu(1) == 0) for m in maps)  # no weight on the future

# %% tags=["hide-input"]
fig, axes = plt.subplots(
    1, 3, figsize=(6.2, 2.6), sharey=True, layout="constrained"
)
for index, (ax, weights) in enumerate(zip(axes, maps, strict=True)):
    helpers.plotting.heatmap(
        weights[0].mean(0), ax=ax, colorbar=False, vmin=0, vmax=1
    )
    ax.set_title(f"block {index + 1}")
    ax.set_xlabel("key")
    ax.set_xticks(range(0, 10, 3))
for ax in axes[1:]:
    ax.set_ylabel("")
axes[0].set_ylabel("query")
fig.colorbar(axes[0].images[0], ax=axes, shrink=0.9, label="attention weight")
plt.show()

# %% [markdown]
# **Figure.** Causal attention at initialization (mean over the heads of each block, one
# sequence), all three maps on one colour scale from 0 to 1 (colour bar): each row (query)
# spreads its weight almost evenly over the keys it may see, so row $t$ is about $1/(t+1)$ on
# and left of the diagonal (bright in the first rows, darker further down) and exactly zero
# to its right. Nothing has been learned yet.
#
# ```{admonition} Pitfall: attention maps of the wrong input
# :class: warning
# A tempting way to collect attention maps is to call each block's `self_attn(x, x, x)` on the
# block's input `x`. In a pre-LN block that is not what the block attends with: it attends
# with `norm1(x)`, so such maps show attention on un-normalized vectors, which the model never
# computes. The fix is to let the block return the weights of its own forward pass
# (`return_attention=True`), as the book's blocks do. The cell below measures how far the
# wrong maps are from the right ones for inputs with a realistic offset and scale.
# ```

# %%
x_raw = 4 * torch.randn(1, 10, 64) + 2  # embeddings need not have unit scale
first = encoder.blocks[0]
with torch.no_grad():
    _, seed_style = first.self_attn(x_raw, x_raw, x_raw, return_attention=True)
right_maps = encoder.get_attention_maps(x_raw)
map_error = round((right_maps[0] - seed_style).abs().max().item(), 2)
print(f"largest error in a block-1 attention weight: {map_error}")

# %% tags=["remove-cell"]
glue("ch6_map_error", map_error)
assert map_error > 0.1

# %% [markdown]
# A block-1 attention weight computed the wrong way is off by up to
# {glue:text}`ch6_map_error` (weights lie between 0 and 1).

# %% [markdown]
# ## What the residual connections protect
#
# Chapter 4 found that at initialization, where the attention weights are nearly uniform,
# every query receives almost the same average of the values: the output of multi-head
# attention is close to rank one, as measured by chapter 4's *stable rank*. For 1024
# random tokens of width 128 (cell below) the output's stable rank is
# {glue:text}`ch6_rank_mha` against {glue:text}`ch6_rank_input` for its input. What happens
# when such layers are stacked? Six attention layers (fresh random weights, no FFN, no
# normalization), with and without residual connections, measured after each:


# %%
torch.manual_seed(0)
attention = MultiHeadAttention(128, 8)
tokens = torch.randn(1, 1024, 128)
with torch.no_grad():
    queries, keys, _ = attention.qkv_proj(tokens).split(128, dim=-1)
    attended = attention(tokens, tokens, tokens)
ranks = {
    "input X": stable_rank(tokens[0]),
    "queries XW_Q": stable_rank(queries[0]),
    "keys XW_K": stable_rank(keys[0]),
    "MHA(X)": stable_rank(attended[0]),
    "X + MHA(X)": stable_rank((tokens + attended)[0]),
}
pd.Series(ranks, name="stable rank").round(1).to_frame()

# %% tags=["remove-cell"]
_ = glue("ch6_rank_mha", round(ranks["MHA(X)"], 1))
_ = glue("ch6_rank_input", round(ranks["input X"], 1))
assert ranks["MHA(X)"] < 0.1 * ranks["input X"]
assert ranks["MHA(X)"] < 0.2 * min(ranks["queries XW_Q"], ranks["keys XW_K"])
# the projection loses nothing
assert torch.linalg.matrix_rank(queries[0]) == 128
assert ranks["X + MHA(X)"] > 0.9 * ranks["input X"]

# %%
torch.manual_seed(0)
layers = [MultiHeadAttention(128, 8) for _ in range(6)]
plain, residual, stack_ranks = tokens, tokens, []
with torch.no_grad():
    for layer in layers:
        plain = layer(plain, plain, plain)
        residual = residual + layer(residual, residual, residual)
        stack_ranks.append((stable_rank(plain[0]), stable_rank(residual[0])))
stack_ranks = pd.DataFrame(
    stack_ranks,
    columns=["without residuals", "with residuals"],
    index=range(1, 7),
).rename_axis("layers")
stack_ranks.round(1)

# %% tags=["remove-cell"]
_ = glue(
    "ch6_rank_plain_6", round(stack_ranks["without residuals"].iloc[-1], 1)
)
_ = glue(
    "ch6_rank_residual_6", round(stack_ranks["with residuals"].iloc[-1], 1)
)
# collapsed to about one direction
assert stack_ranks["without residuals"].iloc[-1] < 1.5
assert stack_ranks["with residuals"].min() > 0.5 * ranks["input X"]

# %% [markdown]
# Without residuals the stable rank falls to {glue:text}`ch6_rank_plain_6` after six layers:
# every token carries nearly the same vector. With residuals it stays at
# {glue:text}`ch6_rank_residual_6`. Dong et al. {cite}`dong2021attention` proved the general
# form of this: a stack of pure attention layers (no skip connections, no FFN) loses rank
# doubly exponentially with depth, and the skip connections are what prevents it. The residual
# stream is what keeps a deep Transformer's representations from degenerating.
#
# ## Summary
#
# - An encoder block = self-attention (across positions) + a position-wise FFN (within a
#   position), each inside a residual connection with a normalization; dropout on the branch.
# - Pre-LN puts the norm inside the branch; post-LN after the sum. At initialization post-LN's
#   gradients are largest near the output and do not shrink with depth, the argument for why
#   it needs warm-up; pre-LN's shrink. The last block's gradients of the two differ by a
#   factor {glue:text}`ch6_gap_L2` at depth 2 and {glue:text}`ch6_gap_L32` at depth 32.
# - Trained at the same rate, a 12-block post-LN stack does not learn without warm-up and
#   mostly does with it; pre-LN learns on every seed without. At a high enough rate pre-LN
#   needs warm-up too (chapter 7).
# - The price of pre-LN: its residual stream grows with depth, so the stack ends with one
#   more normalization.
# - LayerNorm, not BatchNorm, for sequences; RMSNorm is LayerNorm without centring and bias.
# - Dropout goes on each sublayer's output, never on the residual stream; the residual
#   connections also keep a stack of attention layers from collapsing to rank one (stable
#   rank {glue:text}`ch6_rank_residual_6` with them after six layers,
#   {glue:text}`ch6_rank_plain_6` without).
# - The book's `EncoderBlock` matches `torch.nn.TransformerEncoderLayer` weight for weight
#   (mind the inverted mask).
#
# ## Exercises
#
# 1. **RMSNorm by hand.** Write `rms_norm(x, weight, eps)` for a tensor `x` of shape
#    `(..., D)` and a gain `weight` of shape `(D,)`, and check it with
#    `helpers.checks.check_rms_norm(rms_norm)`.
#
# :::{admonition} Solution
# :class: dropdown
# Average the squares over the last dimension only, put `eps` inside the square root, and do
# not subtract the mean (that would be LayerNorm).
#
# ```python
# def rms_norm(x, weight, eps):
#     return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight
# ```
# :::


# %% tags=["remove-cell"]
def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


print(check_rms_norm(rms_norm))

# %% [markdown]
# 2. **Count the base model.** Write `block_parameters(d_model, ffn_width)` returning the
#    number of parameters of `EncoderBlock(d_model, num_heads, ffn_width)` (biases and two
#    LayerNorms included) and check it with
#    `helpers.checks.check_block_parameter_count(block_parameters)`. How many parameters
#    does one block of the 2017 base model ($D = 512$, $F = 2048$) have?
#
# :::{admonition} Solution
# :class: dropdown
# $4D^2 + 4D$ for attention, $2DF + F + D$ for the FFN and $4D$ for the two LayerNorms; for
# the base model that is {glue:text}`ch6_base_block` parameters per block.
#
# ```python
# def block_parameters(d_model, ffn_width):
#     d, f = d_model, ffn_width
#     return (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d
# ```
# :::


# %% tags=["remove-cell"]
def block_parameters(d_model, ffn_width):
    d, f = d_model, ffn_width
    return (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d


print(check_block_parameter_count(block_parameters))
_ = glue("ch6_base_block", f"{block_parameters(512, 2048):,}")

# %% [markdown]
# 3. **Warm-up, measured.** Re-run the gradient experiment with PyTorch's default
#    initialization instead of Xavier (delete the `xavier_uniform_` loop). Does the post-LN
#    gradient still grow toward the output? What does that suggest about how much the
#    warm-up question depends on initialization?
#
# ```{admonition} Solution
# :class: dropdown
# Expect a smaller gap. With the default initialization (uniform with a smaller variance) each
# sublayer's output is small against the residual stream and every block is close to the
# identity, so the post-LN gradient norms come out much flatter across blocks. How badly a
# post-LN stack needs warm-up depends on how much each sublayer adds at initialization; that
# suggests another lever besides warm-up: initialize the residual branches small (or at zero)
# and let training grow them.
# ```
