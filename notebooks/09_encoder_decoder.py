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
# # Decoders, cross-attention and the encoder-decoder
#
# The encoder of chapters 6 and 7 labels every position of its input. Many tasks instead ask
# for a *new* sequence: a translation, the sorted digits, the rest of a path. The 2017
# Transformer {cite}`vaswani2017attention` does this with two stacks. The encoder reads the
# source once; the decoder writes the output one token at a time, and at every step it looks
# at what it has written so far (masked self-attention) and at the encoder's output
# (cross-attention). This chapter builds the decoder block on the pieces of chapters 2-6,
# checks it against PyTorch's own, trains two encoder-decoders (one on points of the plane, one on tokens), opens them up, measures
# what decoding and training choices do to them (exposure bias, beam search, label
# smoothing), and counts the parameters of the paper's base model.

# %% tags=["hide-cell"]
# Setup: on Colab, install the book's helpers; everywhere, import, seed and pick a device.
import sys

# The book's package at the book's version (a release tag, kept in step by a test).
HELPERS = "attention-book-helpers @ git+https://github.com/attention-book/attention-book@v0.6.0"
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
device = helpers.get_device()

# %%
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn

# %%
from helpers import glue, show_source
from helpers.analysis import count_parameters
from helpers.checks import check_decoder_input
from helpers.interop import load_decoder_block
from helpers.masks import causal_mask, padding_mask
from helpers.parallel import run_in_processes
from helpers.plotting import heatmap
from helpers.tasks.corners import (
    CornerConfig,
    follows_the_rule,
    free_running_mse,
    make_corner_sequences,
    reflection_rule,
    teacher_forcing_split,
    train_corners,
)
from helpers.tasks.sorting import (
    BOS,
    PAD,
    VOCAB_SIZE,
    SortingConfig,
    calibration,
    exposure_bias,
    generated_accuracy,
    make_sorting_dataset,
    seed_results,
    sequence_accuracy,
    train_and_measure,
    train_sorting,
)
from helpers.transformer import DecoderBlock, EncoderDecoderTransformer

helpers.use_one_thread(device)

# %% [markdown]
# ## The decoder block
#
# A decoder block is an encoder block (chapter 6) with one more sublayer in the middle. Its
# input is the target stream $y$, of length $T_t$, and the encoder's output, the *memory*
# $m$, of length $T_s$:
#
# 1. **masked self-attention** over $y$: position $t$ may attend to positions $0..t$ only (the
#    causal mask of chapter 2), so what it computes never depends on a later token;
# 2. **cross-attention**: queries from the target stream, keys and values from the memory,
#
#    $$\operatorname{CrossAttention}(y, m) = \operatorname{softmax}\!\left(\frac{(y W^Q)(m W^K)^\top}{\sqrt{d}}\right) m W^V,$$
#
#    a $(T_t, T_s)$ matrix of weights per head: every output position can read every source
#    position (except padding), and no mask between them is needed for causality, since the
#    source is known in full before the first output token;
# 3. the position-wise **feed-forward network**.
#
# Each sublayer has its residual connection and its normalization, before the sublayer
# (pre-LN) or after the sum (post-LN), exactly as in the encoder block. The canonical version
# in `helpers` keeps the encoder block's constructor and adds the memory to `forward`:

# %%
show_source(DecoderBlock)

# %% [markdown]
# Cross-attention is `MultiHeadAttention` called with different query and key tensors
# (chapter 4): nothing new is needed inside it. PyTorch has the same block,
# `torch.nn.TransformerDecoderLayer`, whose `multihead_attn` is our `cross_attn`. With its
# weights copied into ours (`helpers.interop.load_decoder_block`), the two compute the same
# function for both norm placements, here with a causal mask on the target and a padding mask
# on the source:


# %%
def agrees_with_torch(norm_first: bool) -> bool:
    torch.manual_seed(0)
    layer = nn.TransformerDecoderLayer(
        16, 4, 32, norm_first=norm_first, batch_first=True
    )
    block = load_decoder_block(
        DecoderBlock(16, 4, 32, norm_first=norm_first), layer
    )
    layer.eval(), block.eval()
    target, memory = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    # (B, 1, 1, Ts), True = a real source token; the sources have 7, 4 and 6 tokens
    source_mask = padding_mask([7, 4, 6], 7)
    ours = block(target, memory, causal_mask(5), source_mask)
    # PyTorch's masks mean True = *blocked*: pass the complements
    theirs = layer(target, memory, tgt_mask=~causal_mask(5),
                   memory_key_padding_mask=~source_mask[:, 0, 0])  # fmt: skip
    return torch.allclose(ours, theirs, atol=1e-5)


for norm_first in (True, False):
    print(
        f"norm_first={norm_first}: agree within 1e-5:",
        agrees_with_torch(norm_first),
    )
    assert agrees_with_torch(norm_first)

# %% [markdown]
# ```{admonition} Pitfall: PyTorch's decoder reads a boolean mask the other way round
# :class: warning
# In `torch.nn.Transformer` and its layers a boolean `tgt_mask` means True = *blocked*; in
# this book (and in `F.scaled_dot_product_attention`) True means *may attend*. The mask helper
# of {ref}`the blog post "Transformers Deconstructed" <source-003>` follows PyTorch's convention, so its masks are right for PyTorch's modules and
# wrong for ours. Pass the book's causal mask to PyTorch unchanged and the first position
# sees every later one and none of the earlier ones, with no error. The fix is the `~` above;
# the test `test_decoder.py::test_torch_reads_the_book_mask_the_other_way_round` runs the
# mistake and checks the future leaks, and `test_block_matches_torch_decoder_layer` pins the
# equivalence with the complemented masks.
# ```
#
# ```{figure} ../book/_static/diagrams/encoder_decoder.svg
# :alt: Two columns. Left, the encoder: source tokens x1 to x4, embedding plus position, L encoder blocks, and their output, the memory of shape (B, Ts, D). Right, the decoder: the target shifted right, a start token followed by y1 y2 y3, embedding plus position, then a dashed box repeated L times that holds causal self-attention, cross-attention and a feed-forward network, then a Linear layer to logits that predict y1 y2 y3 and the end token. An orange and a green arrow carry keys and values from the memory into the cross-attention; a blue arrow carries the queries into it from the decoder's own stream.
# :name: fig-encoder-decoder
#
# The encoder-decoder (residuals and norms left out: every sublayer has them, as in chapter 6).
# Look at where the two stacks meet: only in cross-attention, whose queries (blue) come from the
# target stream and whose keys and values (orange, green) come from the encoder's memory. Look
# also at the two ends of the decoder: its input is the target shifted right by one, a start
# token first, and at each position it predicts the next token; the causal mask of the
# self-attention (grey outline) keeps position $t$ from seeing the token it must predict.
# ```
#
# ## Teacher forcing: how a decoder is trained in one pass
#
# A decoder learns to predict token $t$ of the target from the source and the target tokens
# before $t$. In training we know the whole target, so we feed it to the decoder *shifted
# right by one*: a start token, then the target without its last token. Position $t$ reads
# the true token $t - 1$ and is asked for token $t$. This is **teacher forcing**: the decoder
# always sees the right prefix, whatever it would have predicted itself. With the causal mask,
# position $t$ cannot peek at its answer (which sits at input position $t + 1$), so one
# forward pass computes the $T_t$ predictions at once, in parallel, and one loss sums them.
# Here is a target from this chapter's token task (sorting digits; ids 3-12 are the digits
# 0-9, 1 starts, 2 ends, 0 pads) with the decoder's input above it:

# %%
example = make_sorting_dataset(
    1, 5, torch.Generator().manual_seed(0), min_len=4
)
source, decoder_input, target = example.tensors
print("source        ", source[0].tolist())
print("decoder input ", decoder_input[0].tolist())
print("target        ", target[0].tolist())
assert (
    torch.equal(decoder_input[0, 1:], target[0, :-1])
    and decoder_input[0, 0] == BOS
)

# %% [markdown]
# At generation time there is no target to shift. The decoder starts from the start token,
# predicts one token, appends it to its input and runs again: $T_t$ passes, each one re-reading
# the whole prefix (a cache of the keys and values avoids recomputing it). The model class
# of this chapter does it greedily by default, taking the most likely token each time; with
# `end_id` a sequence stops at its end token (the positions after it hold `pad_id`), and with
# `beam_size` above 1 it runs beam search, measured at the end of the chapter:

# %%
show_source(EncoderDecoderTransformer.generate)

# %% [markdown]
# Both ways compute the same thing on the same prefix. On an untrained model (the claim does
# not depend on training), the logits teacher forcing gives for all positions at once equal
# those of the step-by-step loop, position by position, when the teacher's input is the
# sequence the loop wrote:

# %%
torch.manual_seed(0)
model = EncoderDecoderTransformer(
    VOCAB_SIZE, VOCAB_SIZE, 32, 2, 2, 2, pad_id=PAD
)
model.eval()
sources, _, _ = make_sorting_dataset(64, 8, torch.Generator().manual_seed(6))[:]
written = model.generate(sources, BOS, num_steps=9)  # (B, 1 + 9)
teacher_forced = model(sources, written[:, :-1])  # one pass, every position
memory, source_mask = model.encode(sources)
same = True
for t in range(1, written.shape[1]):
    step = model.decode(written[:, :t], memory, source_mask)[
        :, -1
    ]  # pass number t
    same &= torch.allclose(teacher_forced[:, t - 1], step, atol=1e-5)
print("teacher-forced logits equal step-by-step logits (within 1e-5):", same)
assert same

# %% [markdown]
# The test `test_decoder.py::test_teacher_forced_logits_equal_step_by_step_logits` checks the
# same for both norm placements, and `test_no_target_position_receives_gradient_from_a_later_one`
# checks the causal mask through gradients: the output at position $t$ has exactly zero
# gradient with respect to every later input position.
#
# The two ways differ in one thing: what the decoder *reads*. Teacher forcing shows it the
# true prefix; generation shows it its own, possibly wrong, prefix, which it never saw in
# training. The difference between the two errors is called **exposure bias**
# {cite}`bengio2015scheduled,ranzato2016sequence`. We measure it on both tasks below.
#
# ## The square-corner task
#
# {ref}`A course notebook on positional encoding <source-001>` trains an encoder-decoder on
# points of the plane. Each
# sequence walks around the square $[-1, 1]^2$: it starts at a random corner and visits the
# other three clockwise or counter-clockwise, each point with Gaussian noise of standard
# deviation 0.1. The model sees the first two points and predicts the last two. Two points
# fix the direction, so the task is learnable to the noise: the best possible mean squared
# error per coordinate is the noise's variance, $0.1^2 = 0.01$. We draw the training set of
# the course notebook's size (and seeds) and a test set from a different seed:


# %%
def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


train_points, train_clockwise = make_corner_sequences(128, seeded(13))
test_points, test_clockwise = make_corner_sequences(1000, seeded(19))
glue("ch9_corner_num_train", len(train_points))
glue("ch9_corner_num_test", len(test_points))
print(
    train_points.shape,
    test_points.shape,
    "clockwise:",
    int(train_clockwise.sum()),
)

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(6.0, 3.0), sharey=True)
for ax, clockwise in zip(axes, (True, False), strict=True):
    for points in train_points[train_clockwise == clockwise][:3]:
        ax.plot(points[:, 0], points[:, 1], "-", color="0.7", lw=0.8)
        ax.scatter(points[:2, 0], points[:2, 1], color="C0", s=14)
        ax.scatter(points[2:, 0], points[2:, 1], color="C1", s=14)
        tip, tail = points[1].tolist(), points[0].tolist()
        ax.annotate(
            "", tip, tail, arrowprops={"arrowstyle": "->", "color": "C0"}
        )
    ax.set(
        title="clockwise" if clockwise else "counter-clockwise", aspect="equal"
    )
    ax.set(xlim=(-1.5, 1.5), ylim=(-1.5, 1.5))
plt.show()

# %% [markdown]
# **Figure.** Three training sequences of each direction. Blue: the two points the model
# sees (the arrow goes from the first to the second); orange: the two it must predict.
#
# The model (`helpers.tasks.corners.CornerTransformer`) lifts each point to $D = 16$
# features with a linear layer, adds the sinusoidal encoding, runs one pre-LN encoder block
# and one decoder block with two heads, and maps the decoder's output back to the plane with
# another linear layer. Its decoder input is the last source point, then the first target
# point: the target shifted right, as above. We train it with teacher forcing on the mean
# squared error, with Adam, as the course notebook does:

# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
corner_model, corner_history = train_corners(
    CornerConfig(), train_points, test_points
)
corner_seconds = time.perf_counter() - start
corner_tf, corner_free = free_running_mse(corner_model, test_points)
glue("ch9_corner_seconds", round(corner_seconds, 1))
glue("ch9_corner_test_mse", round(corner_tf, 4))
glue("ch9_corner_free_mse", round(corner_free, 4))
assert corner_tf < 0.025 and corner_free < 0.025  # 0.01 is the floor
print(
    f"test MSE {corner_tf:.4f} (teacher forced), {corner_free:.4f} (free running)"
)

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
ax.plot(
    corner_history["epoch"],
    corner_history["train_loss"],
    label="training batches",
)
ax.plot(
    corner_history["epoch"],
    corner_history["val_loss"],
    label="held-out test set",
)
ax.axhline(0.01, color="k", ls=":", label="noise variance 0.01")
ax.set(xlabel="epoch", ylabel="mean squared error", yscale="log")
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Mean squared error per coordinate during training (teacher forced), on the
# training batches and on the {glue:text}`ch9_corner_num_test` held-out sequences, against
# the noise floor of 0.01 (dotted). The model gets close to the floor within a few dozen
# epochs; the test error stays a little above the training error.
#
# After {glue:text}`ch9_corner_seconds` seconds of training, the test error is
# {glue:text}`ch9_corner_test_mse` with teacher forcing and {glue:text}`ch9_corner_free_mse`
# when the model generates both points itself. Here are its free-running predictions for
# test sequences of both directions:

# %% tags=["hide-input", "nbval-ignore-output"]
source, decoder_input, target = teacher_forcing_split(test_points).tensors
predicted = corner_model.generate(source, 2)
fig, axes = plt.subplots(2, 2, figsize=(5.0, 5.0), sharex=True, sharey=True)
for column, clockwise in enumerate((True, False)):
    for row, n in enumerate(
        torch.nonzero(test_clockwise == clockwise)[:2, 0].tolist()
    ):
        ax = axes[row, column]
        ax.plot(
            test_points[n, :, 0],
            test_points[n, :, 1],
            "-",
            color="0.75",
            lw=0.8,
        )
        ax.scatter(
            source[n, :, 0], source[n, :, 1], color="C0", s=16, label="given"
        )
        ax.scatter(
            target[n, :, 0], target[n, :, 1], color="C1", s=16, label="true"
        )
        ax.scatter(predicted[n, :, 0], predicted[n, :, 1], color="C3", marker="x", s=30,
                   label="predicted")  # fmt: skip
        for k, point in enumerate(test_points[n].tolist()):
            ax.annotate(
                str(k + 1), point, xytext=(5, 4), textcoords="offset points"
            )
        ax.set(aspect="equal", xlim=(-1.5, 1.5), ylim=(-1.5, 1.5))
        ax.set_title("clockwise" if clockwise else "counter-clockwise")
axes[0, 0].legend(loc="center", fontsize=8)
plt.show()

# %% [markdown]
# **Figure.** Two test sequences of each direction, their points numbered in order: the two
# given points (blue), the two true ones (orange) and the model's free-running predictions
# (red crosses), which land on the right corners in the right order.
#
# ```{admonition} Pitfall: a "test set" made of the training points
# :class: warning
# {ref}`The course notebook <source-001>` draws a test set with its own seed, then builds
# its test tensors from the
# *training* points (`full_test = torch.as_tensor(points)` where `test_points` was meant), so
# every "test" number it reports is a training number. Measured on the training points, our
# model's error is {glue:text}`ch9_corner_train_mse`, against {glue:text}`ch9_corner_test_mse`
# on sequences it never saw: the mistake makes the model look
# {glue:text}`ch9_corner_inflation` times better than it is. Here the two splits come from
# different seeds and share no sequence (`test_tasks_corners.py::test_splits_are_seeded_and_held_out`).
#
# A second mistake hides behind the first: its attention plots title each "test" sequence
# "Clockwise" or "Counter-Clockwise" from `directions`, the *training* split's labels. They
# fit only because the plotted points are training points. Fix the split and keep the
# labels, and they describe the test sequences by chance: the training split's first
# {glue:text}`ch9_corner_num_train` labels agree with the directions of the first
# {glue:text}`ch9_corner_num_train` test sequences for {glue:text}`ch9_label_agreement` of
# them. Label a sequence with the direction drawn with it
# (`test_source_errata.py::test_attention_plot_labels_need_the_test_directions`).
# ```

# %% tags=["nbval-ignore-output"]
corner_train_mse, _ = free_running_mse(corner_model, train_points)
glue("ch9_corner_train_mse", round(corner_train_mse, 4))
glue("ch9_corner_inflation", round(corner_tf / corner_train_mse, 2))
assert corner_tf / corner_train_mse > 1.2
print(
    f"MSE on training points {corner_train_mse:.4f}, held-out ones {corner_tf:.4f}"
)

# %%
# The source's labels on the fixed split: the training directions, read against test points.
paired = len(train_clockwise)
agreement = (train_clockwise == test_clockwise[:paired]).float().mean().item()
glue("ch9_label_agreement", f"{agreement:.0%}")
assert (
    0.3 < agreement < 0.7
)  # chance, not the 100% of labels drawn with the points
print(f"training labels right on test sequences: {agreement:.0%} of {paired}")

# %% [markdown]
# ### The rule to beat
#
# The task needs no learning at all. Point 3 is the corner opposite point 1 and point 4 the
# corner opposite point 2, so a fixed rule with no parameters predicts both: flip the signs
# of the given point's coordinates and snap them to $\pm 1$, $\hat p_{t+2} =
# -\operatorname{sign}(p_t)$. The noise on the given points (0.1) is far too small to flip a
# sign, so the rule misses only the noise of the points it predicts: its test error is the
# floor, {glue:text}`ch9_rule_mse`. (Without the snap, $-p_t$ carries the given point's noise
# too and doubles the error, to {glue:text}`ch9_negate_mse`.) This is the baseline a learned
# model must beat, and the trained model does not: it is {glue:text}`ch9_model_minus_rule`
# above the rule (over five seeds, `scripts/margins.py encoder-decoder`, between
# {glue:text}`ch9_rule_gap_min` and {glue:text}`ch9_rule_gap_max`). On its
# {glue:text}`ch9_corner_num_train` training sequences,
# what it learns is an approximation of a rule that could be written down.


# %%
def spread(values, digits: int = 3) -> str:
    """'min / median / max' of a column of per-seed results."""
    low, middle, high = values.min(), values.median(), values.max()
    return f"{low:.{digits}f} / {middle:.{digits}f} / {high:.{digits}f}"


# %% tags=["nbval-ignore-output"]
given, _, truth = teacher_forcing_split(test_points).tensors
rule_mse = nn.functional.mse_loss(reflection_rule(given), truth).item()
negate_mse = nn.functional.mse_loss(-given, truth).item()
glue("ch9_rule_mse", round(rule_mse, 4))
glue("ch9_negate_mse", round(negate_mse, 4))
glue("ch9_model_minus_rule", round(corner_tf - rule_mse, 4))
seeds = (
    seed_results()
)  # five seeds, shipped: scripts/margins.py encoder-decoder
rule_gap = seeds["model - rule mse"]
glue("ch9_rule_gap_min", round(rule_gap.min(), 4))
glue("ch9_rule_gap_max", round(rule_gap.max(), 4))
assert (
    abs(rule_mse - 0.01) < 0.001 and negate_mse > 0.015
)  # the floor; twice the floor
# the trained model is worse than the rule on every seed, and this run is one of them
assert (rule_gap > 0.002).all() and corner_tf - rule_mse > 0.002
assert rule_gap.min() - 0.001 < corner_tf - rule_mse < rule_gap.max() + 0.001
print(
    f"MSE: rule {rule_mse:.4f}, unsnapped {negate_mse:.4f}, model {corner_tf:.4f}"
)

# %% [markdown]
# ### Exposure bias on the corners
#
# Free running costs this model nothing: its free-running error
# ({glue:text}`ch9_corner_free_mse`) is within {glue:text}`ch9_corner_gap_bound` of the
# teacher-forced one ({glue:text}`ch9_corner_test_mse`); in this run the difference is
# {glue:text}`ch9_corner_gap`, so free running is, if anything, slightly better.
# The reason is in the task: the last point is fixed by the first two (it is the reflection
# of the second through the centre), so the decoder does not need the third point it reads,
# true or predicted. The true third point even carries noise the prediction lacks. Exposure
# bias needs a task where the next output does depend on the previous ones; sorting, below,
# is one.

# %% tags=["nbval-ignore-output"]
glue("ch9_corner_gap", round(corner_free - corner_tf, 4))
glue("ch9_corner_gap_bound", 0.005)
assert abs(corner_free - corner_tf) < 0.005
print(f"free running minus teacher forced: {corner_free - corner_tf:+.4f}")

# %% [markdown]
# ### What the three kinds of attention do
#
# The model has three attention layers, each with two heads: the encoder's self-attention
# over the two given points, the decoder's masked self-attention over its two inputs, and the
# cross-attention from the decoder's two positions to the two given points. Here they are,
# averaged over the test sequences:

# %% tags=["nbval-ignore-output"]
maps = corner_model.get_attention_maps(source, decoder_input)
# the first (only) block of each kind, averaged over the test set: (H, 2, 2)
mean_maps = {kind: weights[0].mean(dim=0) for kind, weights in maps.items()}
# the claim: in cross-attention, query t (predicting point t + 3) has a head that looks
# mostly at source point t, the corner diagonally opposite the one it predicts
focus = mean_maps["cross"].diagonal(dim1=-2, dim2=-1).max(dim=0).values  # (2,)
glue("ch9_cross_focus", round(focus.min().item(), 2))
assert focus.min() > 0.55  # uniform attention would give 0.5
assert torch.all(maps["decoder"][0][..., 0, 1] == 0)  # the causal mask, exactly
print(
    "best head's weight on source point t, per query t:", focus.numpy().round(2)
)

# %% tags=["hide-input", "nbval-ignore-output"]
fig, axes = plt.subplots(3, 2, figsize=(5.0, 6.6))
titles = {
    "encoder": "encoder self",
    "decoder": "decoder self",
    "cross": "cross",
}
labels = {"encoder": (["p1", "p2"], ["p1", "p2"]), "decoder": (["p2", "p3"], ["p2", "p3"]),
          "cross": (["p1", "p2"], ["→p3", "→p4"])}  # fmt: skip
for row, kind in enumerate(titles):
    for head in range(2):
        ax = axes[row, head]
        heatmap(mean_maps[kind][head], ax=ax, vmin=0, vmax=1, colorbar=head == 1,
                xlabel="key", ylabel="query", title=f"{titles[kind]}, head {head}")  # fmt: skip
        ax.set_xticks([0, 1], labels[kind][0])
        ax.set_yticks([0, 1], labels[kind][1])
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure.** Mean attention weights over the {glue:text}`ch9_corner_num_test` test
# sequences, one row per kind of attention, one column per head (p1 to p4 are the points; the
# decoder reads p2 and p3, and its queries predict p3 and p4). Decoder self-attention is
# lower-triangular by construction: the first query can only read itself. The cross-attention
# row shows the one pattern that recurs over training seeds: for each query, one head puts
# more than uniform weight (here at least {glue:text}`ch9_cross_focus`, where uniform would
# be 0.5) on the given point *two steps back*, the corner diagonally opposite the one being
# predicted: the point the rule above reads, the answer being that point reflected through
# the centre. How sharp that head is
# varies from run to run (`scripts/margins.py encoder-decoder` trains five), and in some runs
# the other head shares the work; the encoder's and the decoder's self-attention differ from
# seed to seed, so we claim nothing about them.
#
# Attention weights say where a model looks, not what it computes with what it sees. On the
# square, the rule and "continue in the direction the two given points show" predict the same
# points, so the test sequences cannot tell them apart. Sequences whose second point is a
# random corner can: in half of them it is the first point's own corner or the opposite one,
# and the two points show no direction, while the rule still names the corner opposite the
# first point. On the test sequences changed so, the model's third point lands nearest that
# corner in {glue:text}`ch9_follows_rule` of them (chance: 1/4; a model lost whenever the
# direction is missing would reach about 5/8; over five seeds,
# {glue:text}`ch9_follows_rule_spread`, min / median / max). It reads point 1 for point 3, as
# the rule does.

# %% tags=["nbval-ignore-output"]
follows = follows_the_rule(corner_model, test_points, seeded(5))
glue("ch9_follows_rule", round(follows, 3))
shipped = seeds["follows the rule"]
glue("ch9_follows_rule_spread", spread(shipped, digits=2))
assert (shipped > 0.7).all() and follows > 0.7  # an untrained model: about 0.25
print(
    f"third point opposite the first, second point a random corner: {follows:.3f}"
)

# %% [markdown]
# ```{admonition} Pitfall: layers without residual connections or normalization
# :class: warning
# {ref}`The course notebook's <source-001>` encoder and decoder layers compute `ffn(attention(x))`: no residual connection
# and no normalization around either sublayer. Every layer must then carry all the
# information itself, and the point's own coordinates pass only through the attention's
# value projection. Trained the same way, such a model (`CornerTransformer(residual=False)`)
# ends at a test error of {glue:text}`ch9_plain_mse`, {glue:text}`ch9_plain_ratio` times the
# book's model, far from the noise floor. The layers are pinned by
# `test_tasks_corners.py::test_source_001_layers_have_no_residual_and_no_normalization`.
# ```

# %% tags=["nbval-ignore-output"]
plain_model, _ = train_corners(
    CornerConfig(residual=False), train_points, test_points
)
plain_mse, _ = free_running_mse(plain_model, test_points)
glue("ch9_plain_mse", round(plain_mse, 3))
glue("ch9_plain_ratio", round(plain_mse / corner_tf))
assert plain_mse > 3 * corner_tf
print(
    f"test MSE without residuals and norms: {plain_mse:.3f}; with: {corner_tf:.4f}"
)

# %% [markdown]
# ## Sorting digits with the full encoder-decoder
#
# {ref}`The blog post "Transformers Deconstructed" <source-003>` assembles the model that
# works on tokens: an embedding, the
# positional encoding, the encoder and decoder stacks, and a linear projection from the
# decoder's output to the classes. The book's version adds what a real task needs: padding
# masks on both sides (a padded source token is never a key, in the encoder nor in
# cross-attention; padded target tokens come after the real ones, which the causal mask
# already hides from them), embeddings scaled by $\sqrt{D}$ as in the paper, and optionally one
# matrix shared by the two embeddings and the output projection (*tied* embeddings). Decoding
# (`generate`, shown above, and beam search) and the attention maps come from
# `Seq2SeqInference`, so the class itself holds the model:

# %%
show_source(EncoderDecoderTransformer)

# %% [markdown]
# The task: sort 1 to 8 digits. The source is padded to 8 tokens; the target is the sorted
# digits and an end token, so that the model also learns where to stop. Its cross-attention
# has something definite to find: to write the $t$-th smallest digit, read the source
# position that holds it. We train on {glue:text}`ch9_sort_num_train` random sequences (two
# blocks on each side, $D = 32$, two heads) and test on {glue:text}`ch9_sort_num_test` others:

# %% tags=["nbval-ignore-output"]
config = SortingConfig()
sort_train = make_sorting_dataset(config.num_train, config.max_len, seeded(1))
sort_test = make_sorting_dataset(2000, config.max_len, seeded(2))
glue("ch9_sort_num_train", f"{len(sort_train):,}")
glue("ch9_sort_num_test", f"{len(sort_test):,}")
start = time.perf_counter()
sort_model, sort_history = train_sorting(config, sort_train)
sort_seconds = time.perf_counter() - start
glue("ch9_sort_seconds", round(sort_seconds))
glue("ch9_sort_parameters", f"{count_parameters(sort_model):,}")
print(f"{sort_seconds:.0f} s, {int(sort_history['step'].iloc[-1])} steps")

# %% tags=["nbval-ignore-output"]
source, decoder_input, target = sort_test.tensors
with torch.no_grad():
    sort_tf = sequence_accuracy(
        sort_model(source, decoder_input), target
    ).item()
sort_generated = generated_accuracy(sort_model, sort_test)
glue("ch9_sort_tf_accuracy", round(sort_tf, 4))
glue("ch9_sort_generated_accuracy", round(sort_generated, 4))
assert sort_generated > 0.97
# equal by construction under greedy decoding (see below); beam search breaks it
assert sort_tf == sort_generated
print(
    f"sequences right: {sort_tf:.4f} teacher forced, {sort_generated:.4f} generated"
)

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
ax.plot(sort_history["step"], sort_history["train_loss"], label="cross-entropy")
errors = 1 - sort_history["train_sequence_accuracy"]
ax.plot(sort_history["step"], errors, label="sequences with an error")
ax.set(xlabel="step", yscale="log")
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Training loss and the fraction of training sequences with at least one wrong
# token (teacher forced, means over ten steps), on a log scale.
#
# The model ({glue:text}`ch9_sort_parameters` parameters, {glue:text}`ch9_sort_seconds`
# seconds of training) sorts {glue:text}`ch9_sort_generated_accuracy` of the test sequences
# without a single wrong token when it writes them itself, and
# {glue:text}`ch9_sort_tf_accuracy` under teacher forcing. The two are equal, and they
# would be for *any* model: the comparison cannot show exposure bias. A sequence counts as
# right only if every token is. If teacher forcing gets every token right, greedy
# generation writes the true prefix at every step and so writes the same tokens; if teacher
# forcing first goes wrong at position $k$, generation reached $k$ with the true prefix too
# and goes wrong there as well. Whatever happens after a first mistake, the sequence is
# already lost both ways. Exposure bias lives in those positions after a first mistake, and
# it takes a per-token measure to see it; the section on decoding below measures it.
#
# Now the cross-attention. We take test sequences of eight different digits (so that the
# source position of each digit is unique), and for every head of every decoder block we
# check where each query puts its largest weight:

# %% tags=["nbval-ignore-output"]
distinct = make_sorting_dataset(500, 8, seeded(3), min_len=8, distinct=True)
source, decoder_input, _ = distinct.tensors
order = source.argsort(
    dim=-1
)  # order[b, t]: where the t-th smallest digit sits
cross = sort_model.get_attention_maps(source, decoder_input)[
    "cross"
]  # (B, H, 9, 8)
# per block and head: how often a query's largest weight is on the digit it writes
hits = torch.stack(
    [
        (w[:, :, :8].argmax(-1) == order[:, None]).float().mean((0, 2))
        for w in cross
    ]
)
block, head = divmod(hits.argmax().item(), hits.shape[1])
glue("ch9_permutation_hits", round(hits.max().item(), 3))
glue("ch9_best_block", block)
glue("ch9_best_head", head)
assert hits.max() > 0.8  # chance: 1/8 of the positions
print(
    "arg-max on the digit being written (block x head):\n",
    hits.numpy().round(3),
)

# %% tags=["hide-input", "nbval-ignore-output"]
digits = (source[0] - 3).tolist()
fig, ax = plt.subplots(figsize=(4.2, 3.6))
heatmap(cross[block][0, head], ax=ax, xlabel="source digit", ylabel="decoder query writes",
        vmin=0, vmax=1)  # fmt: skip
ax.set_xticks(range(8), digits)
ax.set_yticks(range(9), [*sorted(digits), "end"])
ax.scatter(
    order[0], range(8), marker="o", facecolors="none", edgecolors="w", s=90
)
plt.show()

# %% [markdown]
# **Figure.** Cross-attention of head {glue:text}`ch9_best_head` of decoder block
# {glue:text}`ch9_best_block` (counting from 0) on one test sequence: each row is the query
# that writes the digit on its label, each column a source position. White circles mark the
# position of the digit being written: the predicted permutation, the source's `argsort`. Over
# 500 such sequences this head's largest weight falls on that position for
# {glue:text}`ch9_permutation_hits` of the queries, against 1/8 by chance. The decoder sorts by
# *looking up* the next digit in the source, by content, not by position.
#
# ```{admonition} Pitfall: a decoder that cannot be built, an encoder that cannot be padded
# :class: warning
# Three mistakes in the full model of
# {ref}`the blog post "Transformers Deconstructed" <source-003>`, each of which a reader meets as soon as the code
# runs on real data:
# - its `Transformer` builds `Decoder(num_heads, emb_dim, feedforward_dim, num_dec_layers,
#   dropout)` without the `class_len` argument that `Decoder.__init__` requires, so the model
#   cannot even be constructed (`TypeError: missing 1 required positional argument`). The
#   book's model takes the target vocabulary and gives it to the output projection
#   (`test_decoder.py::test_output_projection_has_the_target_vocabulary`);
# - its forward pass builds the positional table with `torch.zeros` on the CPU at every call
#   and adds it to embeddings that may live on a GPU: a device-mismatch error on the first
#   GPU batch, and wasted work on a CPU. The book's table is a buffer, made once, that moves
#   with the model (`test_positional_table_is_a_buffer_that_moves_with_the_model`);
# - its encoder takes no mask at all, so in a padded batch every real token attends to the
#   padding, and the output depends on how much padding the batch happens to need. The
#   book's model masks padded source keys in the encoder and in cross-attention, so padding
#   changes nothing (`test_source_padding_does_not_change_the_output`).
# ```

# %% [markdown]
# ## Decoding: exposure bias, beam search and label smoothing
#
# Three choices around a trained decoder: what it reads while it writes (exposure bias), how
# it picks the tokens it writes (greedy decoding or beam search) and what it is trained
# towards (hard targets or smoothed ones). The sorting model above is too good to show the
# first two: in the {glue:text}`ch9_sort_num_test` test sequences, greedy generation leaves
# {glue:text}`ch9_full_after` real target positions after a first mistake, its per-token
# accuracy is {glue:text}`ch9_full_token_gap` below teacher forcing's, and beam search with
# four hypotheses sorts {glue:text}`ch9_full_beam` of the sequences, as greedy decoding does.

# %% tags=["nbval-ignore-output"]
test_source, test_input, test_target = sort_test.tensors
full = exposure_bias(sort_model, sort_test)
full_beam = generated_accuracy(sort_model, sort_test, beam_size=4)
with torch.no_grad():
    full_ece, _ = calibration(sort_model(test_source, test_input), test_target)
glue("ch9_full_after", full["num_after"])
glue("ch9_full_token_gap", round(full["token_tf"] - full["token_generated"], 4))
glue("ch9_full_beam", round(full_beam, 4))
glue("ch9_full_ece", round(full_ece, 4))
# the short budget below: above 0.05, and beam search 0.02 or more below greedy
assert full["token_tf"] - full["token_generated"] < 0.005
assert abs(full_beam - sort_generated) < 0.005
print(
    f"positions after a first mistake: {full['num_after']}, beam-4: {full_beam:.4f}"
)

# %% [markdown]
# So we give the same model a short budget: one epoch ({glue:text}`ch9_short_steps` steps)
# instead of four, three seeds, each trained with hard targets and with label smoothing. The
# six runs are independent, so `run_in_processes` trains them side by side
# (`train_and_measure` trains a model and returns every measure below), and we test them on
# {glue:text}`ch9_study_num_test` new sequences:

# %% tags=["nbval-ignore-output"]
SEEDS = (0, 1, 2)
short = [SortingConfig(epochs=1, seed=seed, label_smoothing=epsilon)
         for seed in SEEDS for epsilon in (0.0, 0.1)]  # fmt: skip
study_test = make_sorting_dataset(1000, config.max_len, seeded(4))
glue(
    "ch9_short_steps", config.num_train // config.batch_size
)  # one epoch, drop_last
glue("ch9_study_num_test", f"{len(study_test):,}")
start = time.perf_counter()
results = run_in_processes(train_and_measure, [{"config": c} for c in short],
                           train_set=sort_train, test_set=study_test)  # fmt: skip
study = pd.DataFrame(results).assign(
    seed=[c.seed for c in short], smoothing=[c.label_smoothing for c in short]
)
print(f"6 runs in {time.perf_counter() - start:.0f} s")


# %% [markdown]
# ### Exposure bias, per token
#
# For every test sequence we find the first position where greedy generation writes a wrong
# token. At the positions after it, the model reads a prefix with a mistake in it, a prefix
# it never saw in training; teacher forcing, at the same positions, reads the true one. We
# compare the accuracy and the loss (cross-entropy of the true token) at those positions,
# and the accuracy over all positions (min / median / max over the three seeds, hard
# targets):

# %% tags=["nbval-ignore-output"]
hard = study[study.smoothing == 0.0]
measures = ["token_tf", "token_generated", "after_tf", "after_generated",
            "after_loss_tf", "after_loss_generated", "sequence_tf", "sequence_generated"]  # fmt: skip
print(hard[measures].agg(["min", "median", "max"]).T.round(3).to_string())
for measure in measures:
    glue(f"ch9_eb_{measure}", spread(hard[measure]))
assert (
    hard.sequence_tf == hard.sequence_generated
).all()  # greedy: always equal
assert (hard.token_tf - hard.token_generated > 0.05).all()
assert (
    hard.after_tf - hard.after_generated > 0.3
).all()  # an untrained model: about 0
assert (hard.after_loss_generated > 2 * hard.after_loss_tf).all()

# %% [markdown]
# On every seed the sequence accuracy is the same both ways
# ({glue:text}`ch9_eb_sequence_tf`), and the per-token numbers are not. Over all positions,
# teacher forcing gets {glue:text}`ch9_eb_token_tf` of the tokens right and generation
# {glue:text}`ch9_eb_token_generated`. After the first mistake the difference is large:
# teacher forcing still gets {glue:text}`ch9_eb_after_tf` right there, generation
# {glue:text}`ch9_eb_after_generated`, and the loss of the true token goes from
# {glue:text}`ch9_eb_after_loss_tf` to {glue:text}`ch9_eb_after_loss_generated` nats. A
# sorted prefix with a wrong or missing digit is out of the training distribution, and the
# model does not recover from it: that is exposure bias.
#
# When does it matter? When the model makes mistakes early enough that many tokens follow
# them, and when what is measured gives credit for those tokens: a per-token accuracy, a
# translation score such as BLEU, or a long text, where a slip at token 10 colours the next
# hundred. It does not matter where a sequence counts only if it is perfect (the first
# mistake loses it either way), nor for a model that rarely makes a first mistake, like the
# fully trained one above, nor when later outputs do not depend on earlier ones, as on the
# square. The remedies train the model on its own prefixes: scheduled sampling feeds it its
# own predictions during training with a probability that grows
# {cite}`bengio2015scheduled`, and sequence-level training optimizes the generated sequence
# itself {cite}`ranzato2016sequence`.
#
# ### Beam search
#
# Greedy decoding takes the most likely next token. Beam search keeps the `beam_size`
# prefixes of highest total log-probability at every step, extends each by every token and
# keeps the best `beam_size` of the extensions; a prefix that has written the end token is
# finished and keeps its score. It searches for the *most probable* sequence, which greedy
# decoding does not (a first token that is a little less likely can lead to much likelier
# ones). The unit tests check it against exhaustive search over every output of a tiny model
# (`test_decoder.py::test_a_wide_beam_finds_the_most_likely_sequence`) and pin that a narrow
# beam is not exact either (`test_a_narrow_beam_can_lose_the_greedy_sequence`):

# %%
show_source(EncoderDecoderTransformer._beam_search)

# %% [markdown]
# Here is what four hypotheses do on the six short-budget runs, against greedy decoding:

# %% tags=["nbval-ignore-output"]
beam_measures = ["greedy", "beam", "beam_normalized", "greedy_short", "beam_short",
                 "beam_log_prob_gain", "beam_not_worse"]  # fmt: skip
print(study[beam_measures].agg(["min", "median", "max"]).T.round(3).to_string())
for measure in beam_measures:
    glue(f"ch9_beam_{measure}", spread(study[measure]))
glue("ch9_beam_loss", spread(study.greedy - study.beam))
glue("ch9_beam_normalized_change", spread(study.beam_normalized - study.greedy))
assert (study.beam_log_prob_gain > 0).all() and (
    study.beam_not_worse > 0.99
).all()
assert (study.beam < study.greedy - 0.01).all()  # the full budget: equal
assert (study.beam_short > study.greedy_short).all()
assert (study.beam_normalized > study.beam).all()
assert ((study.beam_normalized - study.greedy).abs() < 0.06).all()

# %% [markdown]
# Beam search does what it is built for: its sequences are more probable than greedy's by
# {glue:text}`ch9_beam_beam_log_prob_gain` nats on average (min / median / max over the six
# runs), and at least as probable for {glue:text}`ch9_beam_beam_not_worse` of the sequences.
# Yet on every run it sorts *fewer* sequences right: {glue:text}`ch9_beam_beam` against
# {glue:text}`ch9_beam_greedy`, {glue:text}`ch9_beam_loss` fewer. The reason is in the
# lengths: every token adds a negative log-probability, so a sequence that ends early has
# fewer terms to pay, and beam search, which looks for the highest total, finds the early
# end token that greedy decoding passed over. Its sequences stop before the target does in
# {glue:text}`ch9_beam_beam_short` of the cases, greedy's in
# {glue:text}`ch9_beam_greedy_short`. Beam search exposes where the model's probabilities
# are wrong, a known effect in translation {cite}`koehn2017six`. Ranking the hypotheses by
# log-probability per token (`length_penalty=1`) removes the damage (sequence accuracy
# {glue:text}`ch9_beam_beam_normalized`) and no more: it lands within a few hundredths of
# greedy decoding ({glue:text}`ch9_beam_normalized_change`, normalized beam minus greedy).
# Where beam search beats greedy decoding on this task: at finding probable sequences, on
# every run; at sorting, nowhere we measured. With a model this small and a task with one
# right answer, the extra hypotheses have little to find. The fully trained model leaves no
# room at all: both decoders sort the same sequences.
#
# ### Label smoothing
#
# Vaswani et al. trained with *label smoothing* of $\epsilon = 0.1$
# {cite}`szegedy2016rethinking,vaswani2017attention`: the target puts $1 - \epsilon$ on the
# right token and spreads $\epsilon$ over the vocabulary, so the model is never pushed to
# certainty. It "hurts perplexity, as the model learns to be more unsure, but improves
# accuracy and BLEU score", they report. Müller et al. showed that it also *calibrates*
# networks that are overconfident {cite}`muller2019label`: their confidence (the arg-max
# probability) comes closer to their accuracy. We measure both, with the expected
# calibration error {cite}`guo2017calibration` (the tokens binned by confidence; the mean gap
# between a bin's confidence and its accuracy, weighted by its size), per seed, teacher
# forced:

# %% tags=["nbval-ignore-output"]
paired = study.pivot(index="seed", columns="smoothing",
                     values=["token_tf", "greedy", "confidence", "ece"])  # fmt: skip
print(paired.round(3).to_string())
ece_rise = paired.ece[0.1] - paired.ece[0.0]
accuracy_change = paired.token_tf[0.1] - paired.token_tf[0.0]
for epsilon, name in ((0.0, "hard"), (0.1, "smooth")):
    glue(f"ch9_ls_ece_{name}", spread(paired.ece[epsilon]))
    glue(f"ch9_ls_confidence_{name}", spread(paired.confidence[epsilon]))
    glue(f"ch9_ls_accuracy_{name}", spread(paired.token_tf[epsilon]))
glue("ch9_ls_accuracy_change", spread(accuracy_change))
glue("ch9_ls_cap", round(1 - 0.1 + 0.1 / VOCAB_SIZE, 3))
full_hard, full_smooth = seeds["full: ece"], seeds["full ls=0.1: ece"]
glue("ch9_ls_full_ece_hard", spread(full_hard))
glue("ch9_ls_full_ece_smooth", spread(full_smooth))
glue("ch9_ls_full_confidence", spread(seeds["full ls=0.1: confidence"]))
assert (full_smooth - full_hard > 0.05).all()  # the full budget, five seeds
assert (
    full_hard.min() - 0.005 < full_ece < full_hard.max() + 0.005
)  # this run: inside
assert (
    ece_rise > 0.02
).all()  # on every seed smoothing worsens calibration here
assert (
    paired.confidence[0.0] < paired.token_tf[0.0]
).all()  # underconfident already
assert (accuracy_change.abs() < 0.05).all()

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.0, 3.4))
labels = ("hard targets", "label smoothing 0.1")
for result, label in zip(results[:2], labels, strict=True):
    table = torch.tensor(
        result["reliability"]
    )  # (bins, 3): confidence, accuracy, n
    used = table[:, 2] > 0
    ax.plot(table[used, 0], table[used, 1], "o-", label=label)
ax.plot([0, 1], [0, 1], "k:", label="calibrated")
ax.set(
    xlabel="confidence (bin mean)", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1)
)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# **Figure.** Reliability diagram of seed 0, both runs: the tokens binned by the model's
# confidence, each bin's accuracy against its mean confidence. A calibrated model lies on the
# dotted diagonal; points above it are underconfident (right more often than the model
# says).
#
# Label smoothing makes this model *worse* calibrated, on every seed: the calibration error
# goes from {glue:text}`ch9_ls_ece_hard` to {glue:text}`ch9_ls_ece_smooth` (min / median /
# max). The reason is the one Müller et al.'s result turns on: smoothing helps a model that
# is overconfident, and this one is not. Trained for {glue:text}`ch9_short_steps` steps, its
# mean confidence ({glue:text}`ch9_ls_confidence_hard`) is already below its accuracy
# ({glue:text}`ch9_ls_accuracy_hard`); smoothing lowers it further, to
# {glue:text}`ch9_ls_confidence_smooth`. It could not be otherwise at the full budget either:
# a model that matches the smoothed target puts at most $1 - \epsilon + \epsilon / V$ =
# {glue:text}`ch9_ls_cap` on its arg-max, while the fully trained model is right on nearly
# every token. The margins script trains the full budget with smoothing on five seeds: the
# calibration error goes from {glue:text}`ch9_ls_full_ece_hard` (this chapter's run:
# {glue:text}`ch9_full_ece`) to {glue:text}`ch9_ls_full_ece_smooth`, the mean confidence
# sitting at {glue:text}`ch9_ls_full_confidence`, just under that cap. On
# accuracy the effect is small and of no consistent sign: the change in per-token accuracy is
# {glue:text}`ch9_ls_accuracy_change`. Label smoothing pays where a model is large enough to
# become overconfident and the task ambiguous enough for certainty to be wrong, as in
# translation; on a small model that sorts digits it buys nothing we could measure.
#
# ## The base model of Vaswani et al. (2017), counted
#
# The paper's Table 3 gives its base model 65 million parameters: $D = 512$, 8 heads, an FFN
# of width 2048, 6 encoder and 6 decoder blocks, and a vocabulary of about 37,000 byte-pair
# tokens shared by source and target, with the two embeddings and the output projection tied.
# Built on PyTorch's `meta` device, the model has shapes but no memory, so counting it costs
# nothing:

# %%
with torch.device("meta"):
    base = EncoderDecoderTransformer(
        37_000, 37_000, 512, 8, 6, 6, 2048, tie_embeddings=True
    )
base_count = count_parameters(base)
embedding = base.source_embedding.weight.numel()
per_encoder_block = count_parameters(base.encoder.blocks[0])
per_decoder_block = count_parameters(base.decoder.blocks[0])
print(f"total {base_count:,}; embedding {embedding:,}; encoder block {per_encoder_block:,}; "
      f"decoder block {per_decoder_block:,}")  # fmt: skip
glue("ch9_base_count", f"{base_count / 1e6:.1f}")
glue("ch9_base_embedding", f"{embedding / 1e6:.1f}")
glue("ch9_untied_count", f"{(base_count + 2 * embedding) / 1e6:.1f}")
missing = 65e6 - base_count
glue("ch9_base_missing", f"{missing / 1e6:.1f}")
final_norms = count_parameters(base.encoder.final_norm) + count_parameters(
    base.decoder.final_norm
)
glue("ch9_final_norms", f"{final_norms:,}")
glue("ch9_vocab_for_65m", f"{round((37_000 + missing / 512) / 100) * 100:,}")
assert base.output.weight.is_meta and base_count == 63_121_544

# %% [markdown]
# The count is {glue:text}`ch9_base_count` million, {glue:text}`ch9_base_missing` million short
# of the paper's 65. Everything the paper describes is in it: the shared
# {glue:text}`ch9_base_embedding` million of the embedding, six encoder blocks (attention's four
# $D \times D$ matrices, the FFN, two LayerNorms), six decoder blocks (one more attention and
# one more LayerNorm each), the two final LayerNorms of the pre-LN stacks and the output bias.
# Untied, the count would be {glue:text}`ch9_untied_count` million, far above 65, so tying is
# what the paper did. The paper does not say how it counted; the vocabulary is the likeliest
# source of the difference: "about 37,000 tokens" is a rounded size, and a vocabulary of
# {glue:text}`ch9_vocab_for_65m` tokens would give exactly 65 million. (The post-LN model the
# paper trained has no final LayerNorms, {glue:text}`ch9_final_norms` parameters fewer:
# that changes nothing at this precision.)
#
# ## Exercises
#
# 1. **The decoder's input.** Write `decoder_input(target, start_id)` that turns an int64
#    target batch `(B, T)` into what the decoder reads under teacher forcing, of the same
#    shape. Check it with `check_decoder_input(decoder_input)`.
#
# :::{admonition} Solution
# :class: dropdown
# ```python
# def decoder_input(target, start_id):
#     start = torch.full((target.shape[0], 1), start_id, dtype=target.dtype)
#     return torch.cat([start, target[:, :-1]], dim=1)  # position t reads token t - 1
#
# check_decoder_input(decoder_input)
# ```
# The last target token is never read: it is only ever predicted. Shift the other way and
# every position reads the answer it must predict (the checker tells you).
# :::
#
# 2. **Counting without building.** Write a formula for the parameters of one decoder block
#    (`DecoderBlock(d_model, num_heads, ffn_width)`, with biases and LayerNorm) and check it
#    against `count_parameters` for $D = 512$, $F = 2048$.
#
# :::{admonition} Solution
# :class: dropdown
# An encoder block has $4(D^2 + D)$ in attention, $2DF + F + D$ in the FFN and $4D$ in its two
# LayerNorms; the decoder block adds a second attention and a third LayerNorm:
# ```python
# def decoder_block_parameters(d, f):
#     return 2 * 4 * (d * d + d) + 2 * d * f + f + d + 3 * 2 * d
#
# count_parameters(DecoderBlock(512, 8, 2048)) == decoder_block_parameters(512, 2048)
# ```
# The number of heads does not enter: the heads split $D$, they do not add weights.
# :::


# %% tags=["remove-cell"]
def decoder_input_solution(target, start_id):
    start = torch.full((target.shape[0], 1), start_id, dtype=target.dtype)
    return torch.cat([start, target[:, :-1]], dim=1)


def decoder_block_parameters(d, f):
    return 2 * 4 * (d * d + d) + 2 * d * f + f + d + 3 * 2 * d


print(check_decoder_input(decoder_input_solution))
block_count = count_parameters(DecoderBlock(512, 8, 2048))
assert decoder_block_parameters(512, 2048) == block_count

# %% [markdown]
# 3. **Where exposure bias shows.** The square-corner model loses nothing when it runs free.
#    Change the task so that the fourth point depends on the third (for instance: the third
#    point is a random corner, the fourth the next one clockwise) and measure
#    `free_running_mse` again. What do you expect, and why?
#
# :::{admonition} Solution
# :class: dropdown
# Now the decoder must read the third point to place the fourth. Under teacher forcing it
# reads the true third point and places the fourth well. Running free, it reads its own
# prediction of a corner it cannot know from the source: trained on the squared error, that
# prediction is near the mean of the four corners, the centre, and the fourth point placed
# after it has nothing to go by. The free-running error on the fourth point is then far above
# the teacher-forced one: that gap is exposure bias.
# :::
