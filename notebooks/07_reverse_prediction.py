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
# # Training an encoder to reverse sequences
#
# Chapter 6 built the encoder; here we train one. The task is deliberately simple, so that the
# whole run takes seconds on a laptop CPU and we can look inside the trained model: read a
# sequence of digits and output it reversed, `[3, 1, 4, 1, 5] -> [5, 1, 4, 1, 3]`.
#
# After this chapter you will be able to:
#
# - train a Transformer encoder with a plain PyTorch loop, a warm-up and cosine schedule, and
#   judge the run by its learning curves and a held-out test set;
# - read a trained model's attention maps and find the head that does the work;
# - break a model on purpose (no positions, dropout, a new length) and explain each failure.
#
# ```{figure} ../book/_static/diagrams/map_07.svg
# :alt: The book's map of the Transformer: the whole encoder stack, from the input embedding through the encoder blocks to the output layer, is highlighted.
# :width: 60%
# :name: fig-map-07
#
# Where this chapter sits in the Transformer: the whole encoder stack and its output layer,
# trained.
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
import itertools
import math
import pathlib
import tempfile
import time

import altair as alt
import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import helpers

device = helpers.get_device()  # a GPU if there is one, else the CPU

# %%
from helpers import glue, show_source
from helpers.analysis import count_parameters, parameter_table
from helpers.checks import check_sequence_accuracy
from helpers.plotting import heatmap
from helpers.tasks.reverse import (
    BOOK_CONFIG,
    SCHEDULE_EXPERIMENT,
    SOURCE_000_CONFIG,
    ReversePredictor,
    ablation_results,
    attention_dropout_accuracy,
    bag_oracle_accuracy,
    build_reverse_training,
    final_train_accuracy,
    length_accuracies,
    make_reverse_dataset,
    mirror_routing,
    schedule_results,
    steps_to_accuracy,
    token_accuracy,
    train_and_test,
    train_reverse,
    whole_sequence_accuracy,
)
from helpers.training import (
    cosine_warmup_factor,
    evaluate,
    fit,
    load_checkpoint,
    save_checkpoint,
    token_cross_entropy,
)

# This model is so small that splitting each matrix product over several CPU
# threads costs more in synchronization than it saves.
helpers.use_one_thread(device)

# %% [markdown]
# ## The task
#
# Each example is a sequence of $T = 16$ tokens drawn uniformly from $C = 10$ classes (the
# digits); its target is the same sequence reversed, so position $t$ must output the input
# token at position $T - 1 - t$. `make_reverse_dataset` generates the pairs from an explicit
# random generator, one per split, so the training, validation and test sets are reproducible
# and independent.

# %%
config = BOOK_CONFIG
seq_len, num_classes = config.seq_len, config.num_classes
train_set = make_reverse_dataset(
    config.num_train, seq_len, num_classes, torch.Generator().manual_seed(0)
)
val_set = make_reverse_dataset(
    1_000, seq_len, num_classes, torch.Generator().manual_seed(1)
)
test_set = make_reverse_dataset(
    10_000, seq_len, num_classes, torch.Generator().manual_seed(2)
)
x, y = train_set[0]
print("input: ", x.tolist())
print("target:", y.tolist())

# %% [markdown]
# With $10^{16}$ possible sequences, a model cannot memorize its way through: none of the
# test sequences occurs in the training set.


# %% tags=["remove-input"]
def as_numbers(tokens):  # a base-10 number per sequence: 16 digits fit in int64
    powers = num_classes ** torch.arange(seq_len - 1, -1, -1)
    return set((tokens * powers).sum(-1).tolist())


overlap = as_numbers(test_set.tensors[0]) & as_numbers(train_set.tensors[0])
assert not overlap
glue("ch7_num_test", f"{len(test_set):,}")
print(f"{len(train_set):,} training, {len(val_set):,} validation,")
print(f"{len(test_set):,} test sequences, none of them in the training set")

# %% [markdown]
# Why is this a good first task for a Transformer? A recurrent network reads the input left to
# right and must emit the *last* input token first: before it can output anything it has to
# squeeze all sixteen tokens into its hidden state and carry them to the end. In an encoder,
# position $t$ reaches position $T - 1 - t$ in a single attention step, whatever the distance.
# The only thing the model has to learn is *where* to look, and that is pure position: it needs
# the positional encoding of chapter 5.
#
# ## The learning-rate schedule
#
# We train with Adam and a learning rate that is not constant: it rises linearly from almost
# zero over the first `warmup_steps` steps (a *warm-up*, which lets Adam's running averages of
# the gradient settle before the steps get large), then decays to zero along half a cosine
# over the rest of training. The multiplier at step $s$ (counting from 0), with $W$ warm-up
# steps and $S$ steps in all:
#
# $$
# \gamma(s) = \begin{cases} (s + 1)/W & s < W,\\[2pt]
# \tfrac12\left(1 + \cos\left(\pi \frac{s - W}{S - W}\right)\right) & W \le s \le S.
# \end{cases}
# $$

# %%
show_source(cosine_warmup_factor)

# %% tags=["hide-input"]
total_steps = config.total_steps()
steps = range(total_steps)
fig, ax = plt.subplots(figsize=(6.2, 2.6))
ax.plot(
    steps,
    [cosine_warmup_factor(s, config.warmup_steps, total_steps) for s in steps],
    "k",
)
ax.axvline(
    config.warmup_steps,
    color="C1",
    ls=":",
    label=f"end of warm-up ({config.warmup_steps} steps)",
)
ax.set(xlabel="optimizer step", ylabel=r"multiplier $\gamma$")
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** The learning-rate multiplier of this chapter's run: a short linear ramp (left of
# the dotted line), then a smooth cosine decay to zero at the last step. The actual learning
# rate is the configured peak times this curve.


# %% tags=["remove-cell"]
def source_factor(step, warmup, max_iter):  # the source text's formula
    cosine = 0.5 * (1 + math.cos(math.pi * step / max_iter))
    return cosine * min(1.0, step / warmup)


print("source factor at step 0:", source_factor(0, 100, 1500))
print("book factor at step 0:  ", cosine_warmup_factor(0, 100, 1500))
try:
    source_factor(0, 0, 1500)
except ZeroDivisionError as error:
    print("source factor with warmup=0:", type(error).__name__)
assert source_factor(0, 100, 1500) == 0.0 < cosine_warmup_factor(0, 100, 1500)
assert cosine_warmup_factor(0, 0, 1500) == 1.0

# %% [markdown]
# ## The model
#
# Tokens are embedded into vectors of width $D$, the sinusoidal positional encoding is added,
# a pre-LN encoder (chapter 6) processes the sequence, and a linear layer maps every
# position's output vector to $C$ logits. Nothing in it is specific to reversal: it labels
# every token of a sequence.
#
# ```{figure} ../book/_static/diagrams/encoder_stack.svg
# :alt: A flow chart from top to bottom with the shape on every arrow. Tokens of shape (B, T) go through an embedding from C classes to width D, giving (B, T, D); the positional encoding is added; dropout; L pre-LN encoder blocks; a final LayerNorm; a Linear layer from D to C gives logits of shape (B, T, C).
# :name: fig-encoder-stack
#
# The reversal model, from token ids to logits ($C$ token classes, $L$ blocks of chapter 6).
# Look at the shapes on the arrows: the width $D$ appears with the embedding and stays until the
# last layer, and the length $T$ never changes, so the model labels every position in one
# pass.
# ```

# %% tags=["hide-output"]
show_source(ReversePredictor)

# %%
torch.manual_seed(config.seed)
model = ReversePredictor(num_classes, config.model)
parameter_table(model)

# %% tags=["remove-cell"]
table = parameter_table(model)
d, c, f = config.model.d_model, num_classes, config.model.ffn_width
block = (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d
expected = {
    "embedding": c * d,
    "encoder": config.model.num_layers * block + 2 * d,
    "classifier": d * c + c,
}
expected["total"] = sum(expected.values())
table["formula"] = table["module"].map(expected)
assert (table["parameters"] == table["formula"]).all()
glue("ch7_num_parameters", f"{count_parameters(model):,}")
assert count_parameters(model.encoder) > 0.9 * count_parameters(model)

# %% [markdown]
# A small model: {glue:text}`ch7_num_parameters` parameters, almost all of them in the two
# encoder blocks. The positional encoding has none (it is a fixed table, a buffer).

# %%
logits = model(x.unsqueeze(0))
print("logits", tuple(logits.shape), "for one sequence of", seq_len, "tokens")

# %% [markdown]
# ## Training
#
# ### The loop, bare
#
# Training is a loop over batches with four steps: compute the loss of the batch, clear the
# old gradients, backpropagate the new ones, and let the optimizer move every parameter.
# Here is that loop with nothing else, for the first 100 batches, with Adam at a constant
# learning rate of 0.01 (on the CPU), and then the accuracy on the validation set:

# %% tags=["nbval-ignore-output"]
torch.manual_seed(config.seed)
bare_model = ReversePredictor(num_classes, config.model)
optimizer = torch.optim.Adam(bare_model.parameters(), lr=0.01)
loader = DataLoader(train_set, batch_size=config.batch_size, shuffle=True)
losses = []
for inputs, targets in itertools.islice(loader, 100):  # the first 100 batches
    logits = bare_model(inputs)  # (B, T, C)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad()  # gradients add up unless cleared
    loss.backward()  # the gradient of the loss for every parameter
    optimizer.step()  # Adam's update of every parameter
    losses.append(loss.item())
val_inputs, val_targets = val_set.tensors
with torch.no_grad():
    bare_accuracy = token_accuracy(bare_model(val_inputs), val_targets).item()
print(f"first batch's loss {losses[0]:.2f}")
print(f"mean of the last ten {sum(losses[-10:]) / 10:.4f}")
print(f"validation token accuracy after 100 steps: {bare_accuracy:.3f}")

# %% tags=["remove-cell", "nbval-ignore-output"]
# The page's loop is the package's bare_loop (which scripts/margins.py runs over seeds),
# step for step: the same seed, batches and updates give the same floats.
from helpers.tasks.reverse import bare_loop

reference_losses, reference_accuracy = bare_loop(config, train_set, val_set)
assert reference_losses == losses and reference_accuracy == bare_accuracy
glue("ch7_bare_first_loss", round(losses[0], 2))
glue("ch7_bare_accuracy", round(bare_accuracy, 3))
assert losses[0] > 2.0 and bare_accuracy > 0.95

# %% [markdown]
# The loss starts at {glue:text}`ch7_bare_first_loss`, about chance ($\ln 10 \approx 2.3$: ten
# equally likely digits), and after 100 steps the model gets {glue:text}`ch7_bare_accuracy` of
# the validation tokens right. That is all training is.
#
# ### The book's loop
#
# `fit` is the same four steps with what a real run needs around them: the device, a
# learning-rate schedule stepped after every update, optional gradient clipping, metrics, a
# validation pass at the end of each epoch, a clear error when the loss stops being a number,
# and a pandas DataFrame of history. It trains on whatever `device` the import cell picked: the
# CPU here, a GPU on Colab. Its whole source, one click away:

# %% tags=["hide-output"]
show_source(fit)

# %% [markdown]
# `build_reverse_training` turns the chapter's configuration into the model, the optimizer
# (Adam), the schedule and a seeded, shuffling loader, and the run itself is one call.
#
# :::{admonition} Going deeper: this recipe against the source notebook's
# :class: dropdown
# The task and the data are those of {ref}`the PyTorch Lightning notebook <source-000>`. Its
# model classifies with a small head (Linear, LayerNorm, ReLU, Dropout, Linear, and a
# LayerNorm over the logits), has no final LayerNorm, and multiplies the warm-up by
# $\tfrac12(1 + \cos(\pi s / s_{\max}))$; `ReversePredictor` has one linear layer as its head
# and a final LayerNorm, and its schedule is warm-up then cosine to zero. The table puts that
# notebook's *hyper-parameters* (`SOURCE_000_CONFIG`, on the book's model) beside this
# chapter's: batches {glue:text}`ch7_batch_ratio` times bigger, a learning rate
# {glue:text}`ch7_lr_ratio` times higher, a shorter warm-up, one epoch instead of three, and
# no dropout. {ref}`The schedule experiment <ch7-schedule-experiment>` takes these changes
# apart one at a time.
#
# ```{glue} ch7_recipe_table
# ```
# :::

# %% tags=["remove-cell"]
glue("ch7_batch_ratio", config.batch_size // SOURCE_000_CONFIG.batch_size)
glue("ch7_lr_ratio", round(config.lr / SOURCE_000_CONFIG.lr))
recipe_columns = [
    "batch_size",
    "lr",
    "warmup_steps",
    "epochs",
    "dropout",
    "d_model",
    "num_heads",
    "num_layers",
]
recipe_table = pd.DataFrame(
    {
        "source notebook": {
            **vars(SOURCE_000_CONFIG),
            **vars(SOURCE_000_CONFIG.model),
        },
        "this chapter": {**vars(config), **vars(config.model)},
    }
).T[recipe_columns]
glue("ch7_recipe_table", recipe_table, display=False)

# %% tags=["nbval-ignore-output"]
model, optimizer, scheduler, train_loader = build_reverse_training(
    config, train_set
)
val_loader = DataLoader(val_set, batch_size=1000)
start = time.perf_counter()
history = fit(
    model,
    train_loader,
    loss_fn=token_cross_entropy,
    optimizer=optimizer,
    scheduler=scheduler,
    epochs=config.epochs,
    val_loader=val_loader,
    metrics={"accuracy": token_accuracy},
    clip_grad_norm=config.clip_grad_norm,
    device=device,
    progress=False,
    log_every=10,
)
train_seconds = time.perf_counter() - start
num_steps = int(history["step"].iloc[-1])
print(f"{num_steps} steps in {train_seconds:.1f} s")

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch7_train_seconds", round(train_seconds, 1))
glue("ch7_batch_size", config.batch_size)
glue("ch7_ms_per_step", round(1000 * train_seconds / num_steps, 1))

# %% [markdown]
# Training took {glue:text}`ch7_train_seconds` seconds when this page was built, on a shared
# 2-core CPU. The history has one row every ten steps:

# %% tags=["nbval-ignore-output"]
history.drop(columns="elapsed_s").tail(4)

# %% tags=["nbval-ignore-output"]
test_loader = DataLoader(test_set, batch_size=2000)
test = evaluate(
    model, test_loader, token_cross_entropy, {"accuracy": token_accuracy}
)
test_accuracy = round(test["accuracy"], 4)
test_inputs, test_targets = test_set.tensors
# the share of the sequences with every token right
sequence_accuracy = round(
    whole_sequence_accuracy(model, test_inputs, test_targets), 4
)
print(f"test loss {test['loss']:.4f}, token accuracy {test_accuracy:.4f}")

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch7_test_accuracy", test_accuracy)
glue("ch7_test_sequence_accuracy", sequence_accuracy)
assert test["accuracy"] >= 0.999  # the chapter's claim
losses = history.set_index("step")["train_loss"]
accuracies = history.set_index("step")["train_accuracy"]
steps_to_99 = steps_to_accuracy(history)
glue("ch7_accuracy_10", round(accuracies[10], 2))
glue("ch7_accuracy_30", round(accuracies[30], 2))
glue("ch7_steps_to_99", steps_to_99)
glue("ch7_loss_100", f"{losses[100]:.0e}")
# chance level over the first ten steps, then a sharp drop
assert losses[10] > 2.0 and accuracies[10] < 0.2
assert accuracies[30] > 0.2 and steps_to_99 <= 100 and losses[100] < 0.01

# %% tags=["hide-input"]
fig, (left, right) = plt.subplots(1, 2, figsize=(6.2, 3.0))
left.plot(history["step"], history["train_loss"], label="train")
left.axhline(test["loss"], color="k", ls="--", label="test, after training")
left.set(xlabel="step", ylabel="cross-entropy", yscale="log")
left.legend(loc="upper right")
right.plot(
    history["step"], history["train_accuracy"], color="C1", label="train"
)
right.axhline(
    test["accuracy"], color="k", ls="--", label="test, after training"
)
right.set(xlabel="step", ylabel="token accuracy", ylim=(0, 1.02))
right.legend(loc="center right")
plt.show()

# %% [markdown]
# **Figure.** Training loss (left, log scale) and accuracy (right), each point the mean of ten
# steps. Over the first ten steps the model is at chance (loss near $\ln 10 \approx 2.3$,
# accuracy {glue:text}`ch7_accuracy_10:.2f` against 0.1 for guessing: it has not yet found
# where to look). Then it finds the positions: accuracy {glue:text}`ch7_accuracy_30:.2f`
# over steps 21 to 30, above 99% by step {glue:text}`ch7_steps_to_99`, and a loss of
# {glue:text}`ch7_loss_100` by step 100. The dashed lines are the test results on
# {glue:text}`ch7_num_test` fresh sequences.
#
# On the test set the model reaches a token accuracy of {glue:text}`ch7_test_accuracy:.4f`, and
# {glue:text}`ch7_test_sequence_accuracy:.4f` of the sequences are reversed without a single
# mistake.
#
# A trained model is worth saving. `save_checkpoint` stores the weights (and optionally the
# optimizer state and any plain values); `load_checkpoint` restores them into a fresh model.

# %%
with tempfile.TemporaryDirectory() as folder:
    path = pathlib.Path(folder) / "reverse.pt"
    save_checkpoint(path, model, optimizer, step=int(history["step"].iloc[-1]))
    restored = ReversePredictor(num_classes, config.model)
    extra = load_checkpoint(path, restored)
restored.to(device).eval()
batch = test_inputs[:100].to(device)
with torch.no_grad():
    difference = (restored(batch) - model(batch)).abs().max().item()
print("restored from checkpoint at step", extra["step"])
print("same logits as the trained model (within 1e-4):", difference < 1e-4)

# %% tags=["remove-cell"]
# The same weights on the same device: on a CPU the logits agree to float32
# rounding (the default tolerances of assert_close). A GPU may pick other
# kernels for the two calls (TF32 matmuls, another summation order); 3 of
# 16,000 logits then differed by 1.4e-5 on an H100, so it gets 1e-4.
tolerance = {} if device.type == "cpu" else {"rtol": 1e-4, "atol": 1e-4}
with torch.no_grad():
    torch.testing.assert_close(restored(batch), model(batch), **tolerance)
assert extra["step"] == num_steps

# %% [markdown]
# ## Inside the trained model
#
# `get_attention_maps` returns, for every block, the attention weights of every head: which
# positions each query position reads from. If the model reverses by attention, some head
# should put its weight on the *anti-diagonal*, key $T - 1 - t$ for query $t$;
# `mirror_routing` measures each head's mean weight there and picks the best head.

# %% tags=["nbval-ignore-output"]
model.eval()
num_map_sequences = 500
# one (num_map_sequences, H, T, T) tensor per block
map_inputs = test_inputs[:num_map_sequences].to(device)
maps = [m.cpu() for m in model.get_attention_maps(map_inputs)]
anti_diagonal = torch.arange(seq_len - 1, -1, -1)
# per block and head: the mean weight of query t on key T - 1 - t
best_block, best_head, mass, count_mirror_reads = mirror_routing(
    model, map_inputs, seq_len
)
mass_table = pd.DataFrame(
    mass.numpy(),
    index=[f"block {b + 1}" for b in range(config.model.num_layers)],
    columns=[f"head {h + 1}" for h in range(config.model.num_heads)],
)
mass_table.round(2)

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch7_num_map_sequences", num_map_sequences)
glue("ch7_anti_diagonal_mass", round(mass.max().item(), 2))
assert mass.max() > 0.5

# %% tags=["hide-input"]
sequence = test_inputs[0]
labels = sequence.tolist()
fig, axes = plt.subplots(
    config.model.num_layers, config.model.num_heads, figsize=(6.2, 6.0)
)
for b, row in enumerate(axes):
    for h, ax in enumerate(row):
        heatmap(
            maps[b][0, h],
            ax=ax,
            colorbar=False,
            vmin=0,
            vmax=1,
            title=f"block {b + 1}, head {h + 1}",
            xlabel="key token",
            ylabel="query token",
        )
        ax.set_xticks(range(seq_len), labels, fontsize=7)
        ax.set_yticks(range(seq_len), labels, fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure.** The attention weights of the trained model on one test sequence (its tokens label
# the axes), per block and head. Look for the bright anti-diagonal, from the top right to the
# bottom left: query $t$ reading key $T - 1 - t$. The table above gives the average weight on
# the anti-diagonal over {glue:text}`ch7_num_map_sequences` test sequences; the best head puts
# {glue:text}`ch7_anti_diagonal_mass` of its weight there. The other heads need not be
# interpretable: the task is solved once one head routes each token to its mirror position.
#
# The same map as an interactive chart: hover over a cell to read the query and key positions,
# their tokens and the weight.

# %% tags=["nbval-ignore-output"]
weights = maps[best_block][0, best_head]
labels = test_inputs[0].tolist()  # the tokens of the figure's sequence
cells = pd.DataFrame(
    [
        {
            "query": q,
            "key": k,
            "query token": labels[q],
            "key token": labels[k],
            "weight": round(weights[q, k].item(), 3),
        }
        for q in range(seq_len)
        for k in range(seq_len)
    ]
)
alt.Chart(
    cells, title=f"block {best_block + 1}, head {best_head + 1}"
).mark_rect().encode(
    x=alt.X("key:O", title="key position"),
    y=alt.Y("query:O", title="query position"),
    color=alt.Color(
        "weight:Q",
        scale=alt.Scale(domain=[0, 1]),
        legend=alt.Legend(
            orient="bottom"
        ),  # below: the chart fits a phone's column
    ),
    tooltip=["query", "key", "query token", "key token", "weight"],
).properties(width=290, height=290)

# %% [markdown]
# **Figure.** The most anti-diagonal head, interactive: each cell is one attention weight;
# the tooltip shows which token reads which.
#
# `get_attention_maps` returns the weights of each block's own forward pass: a pre-LN block
# attends with the normalized input, and maps computed from the block's input instead
# (chapter 6's pitfall) put a different weight on the anti-diagonal of this trained model
# (below: true maps, then the wrong input).

# %% tags=["nbval-ignore-output"]
with torch.no_grad():
    embedded = model.embed(test_inputs[:500].to(device))
    first = model.encoder.blocks[0]
    _, wrong_maps = first.self_attn(
        embedded, embedded, embedded, return_attention=True
    )
wrong_maps = wrong_maps.cpu()
wrong_mass = wrong_maps[:, :, torch.arange(seq_len), anti_diagonal].mean(
    dim=(0, 2)
)
print("block 1, anti-diagonal weight per head")
print("true maps:  ", [f"{v:.2f}" for v in mass[0]])
print("wrong input:", [f"{v:.2f}" for v in wrong_mass])

# %% tags=["remove-cell"]
assert (wrong_mass - mass[0]).abs().max() > 0.05

# %% [markdown]
# ## Three ways to break it
#
# Each ablation changes one field of the configuration and trains with the same recipe and
# budget (`train_and_test`: `build_reverse_training`, `fit`, then the test set).

# %% [markdown]
# ### Without positional encoding
#
# Chapter 4 showed that self-attention is *permutation equivariant*: shuffle the input
# positions and the outputs are shuffled the same way. Without the positional encoding the
# whole model is (the embedding, the FFN and the classifier act on each position alone). So
# its prediction at position $t$ can depend only on the token at $t$ and on the *bag* of
# tokens in the sequence, never on where they are. The best such a model can do is to predict
# the most frequent of the other tokens; `bag_oracle_accuracy` computes the accuracy of that
# rule on the test set. It is an *expected* accuracy, the ceiling for any position-blind model
# on average; a particular model on a finite test set can land slightly above it by chance.

# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
_, _, blind_scores = train_and_test(
    config.replace(positions="none"), train_set, test_loader, device
)
blind_accuracy = blind_scores["accuracy"]
print(f"trained in {time.perf_counter() - start:.1f} s")

# %% tags=["nbval-ignore-output"]
oracle = bag_oracle_accuracy(test_inputs, num_classes)
print(f"without positions: {blind_accuracy:.3f}")
print(f"ceiling for any position-blind model: {oracle:.3f}")

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch7_blind_accuracy", round(blind_accuracy, 3))
glue("ch7_bag_oracle", round(oracle, 3))
assert blind_accuracy < 0.3 and blind_accuracy <= oracle + 0.005
assert abs(blind_accuracy - oracle) < 0.01

# %% [markdown]
# Without positions the model reaches {glue:text}`ch7_blind_accuracy`, and the ceiling is
# {glue:text}`ch7_bag_oracle`: it learned exactly the best position-blind rule, counting
# tokens, and nothing more is possible on average.
#
# ### With dropout
#
# {ref}`The PyTorch Lightning notebook <source-000>` trains with dropout 0.1 and blames its
# noisy, underfitting curves on dropping out the attention weight of the correct key: each
# output depends on exactly *one* input token, so when that weight is dropped there is no
# context to guess from. We test this at its rate, dropout 0.1 everywhere (on the attention
# weights, as in its model also on the embeddings and the residual branches), with the book's
# recipe otherwise unchanged.

# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
dropout_model, dropout_history, dropout_scores = train_and_test(
    config.replace(dropout=0.1), train_set, test_loader, device
)
print(f"trained in {time.perf_counter() - start:.1f} s")

# %% tags=["nbval-ignore-output"]
dropout_accuracy = dropout_scores["accuracy"]
dropout_train = final_train_accuracy(dropout_history)
dropout_model.eval()
dropout_sequences = whole_sequence_accuracy(
    dropout_model, test_inputs, test_targets
)
print(f"train accuracy, dropout on:  {dropout_train:.2f}")
print(f"test token accuracy:         {dropout_accuracy:.4f}")
print(f"sequences without a mistake: {dropout_sequences:.4f}")

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch7_dropout_train_accuracy", round(dropout_train, 2))
glue("ch7_dropout_test_accuracy", round(dropout_accuracy, 4))
glue("ch7_dropout_sequence_accuracy", round(dropout_sequences, 4))
# With dropout on, some outputs lose their path; with it off, no underfitting.
assert dropout_train < 0.97
assert dropout_accuracy > 0.998 and dropout_sequences > 0.97

# %% [markdown]
# The training accuracy, measured as a training curve measures it (with dropout active), ends
# near {glue:text}`ch7_dropout_train_accuracy`: some outputs lose the one path that carries
# their answer. But switch dropout off and the model reverses
# {glue:text}`ch7_dropout_test_accuracy:.4f` of the test tokens, and
# {glue:text}`ch7_dropout_sequence_accuracy:.4f` of the test sequences without a mistake.
#
# One run could be lucky. The table gives every ablation of this section (the positions
# above, dropout 0.1, and a heavier 0.3) next to the plain recipe, over
# {glue:text}`ch7_ablation_seeds` seeds.

# %%
ablations = ablation_results()
columns = ["train accuracy", "test accuracy", "test sequence accuracy"]
by_ablation = ablations.groupby("run", sort=False)[columns]
low, high = by_ablation.min(), by_ablation.max()
low.map("{:.4f}".format) + " to " + high.map("{:.4f}".format)

# %% [markdown]
# **Table.** Lowest to highest over the seeds, per ablation; measured by a longer run of the
# same code, shipped with the book. The training accuracy is measured with dropout on.

# %% tags=["remove-cell"]
# The claims of this section, on every seed of the file.
(ablation_command,) = ablations["command"].unique()
(ablation_machine,) = ablations["machine"].unique()
by_run = {
    name: rows.set_index("seed") for name, rows in ablations.groupby("run")
}
plain, light, heavy = (
    by_run["plain"],
    by_run["dropout 0.1"],
    by_run["dropout 0.3"],
)
blind = by_run["no positions"]
blind_gap = (blind["test accuracy"] - blind["bag oracle"]).abs().max()
assert len(plain) >= 3 and (plain["test accuracy"] >= 0.999).all()
assert blind_gap < 0.01  # without positions: the bag oracle, on every seed
# 0.1: no underfitting at test time; only the dropout-on measurement falls.
assert (light["test accuracy"] >= 0.999).all()
assert (light["train accuracy"] < 0.95).all()
# 0.3: test accuracy below the plain recipe's, most visibly in whole sequences.
assert (heavy["test accuracy"] < plain["test accuracy"]).all()
assert (
    heavy["test sequence accuracy"] < plain["test sequence accuracy"] - 0.02
).all()
assert (heavy["train accuracy"] < 0.7).all()
glue("ch7_ablation_seeds", len(plain))
glue("ch7_blind_gap", round(blind_gap, 3))
glue("ch7_light_test_min", round(light["test accuracy"].min(), 4))
glue("ch7_light_train_min", round(light["train accuracy"].min(), 2))
glue("ch7_light_train_max", round(light["train accuracy"].max(), 2))
glue("ch7_heavy_test_max", round(heavy["test accuracy"].max(), 4))
glue("ch7_heavy_sequence_min", round(heavy["test sequence accuracy"].min(), 2))
glue("ch7_heavy_sequence_max", round(heavy["test sequence accuracy"].max(), 2))
glue("ch7_heavy_train_max", round(heavy["train accuracy"].max(), 2))

# %% [markdown]
# On every seed, dropout 0.1 costs nothing at test time (test token accuracy at least
# {glue:text}`ch7_light_test_min:.4f`), while the training accuracy with dropout active ends
# between {glue:text}`ch7_light_train_min` and {glue:text}`ch7_light_train_max`. So the
# explanation is right about the *curves*, which are measured with dropout on, and wrong
# about the model: it does not underfit. Heavier dropout does reach the test set: at 0.3 the test accuracy is below the
# plain recipe's on every seed (at most {glue:text}`ch7_heavy_test_max:.4f`), and since one
# mistake in sixteen tokens spoils a reversal, only {glue:text}`ch7_heavy_sequence_min` to
# {glue:text}`ch7_heavy_sequence_max` of the test sequences come out without one; its
# training accuracy with dropout on stays at most {glue:text}`ch7_heavy_train_max`. And the
# model without positions lands within {glue:text}`ch7_blind_gap` of the bag oracle on every
# seed. Dropout is a regularizer for models that could overfit; a model with unlimited
# fresh-looking data and one exact rule to learn has nothing to gain from it.
#
# Does attention dropout really cut the one weight that matters? We can isolate that
# mechanism on the trained dropout-free model: switch it to training mode with attention
# dropout $p = 0.3$ and every other dropout off (`attention_dropout_accuracy`). If each output
# read its token through one attention weight, accuracy would fall to about $1 - p$.

# %% tags=["nbval-ignore-output"]
p_drop = 0.3
attn_dropout_accuracy = attention_dropout_accuracy(
    model, test_inputs, test_targets, p_drop
)
print(f"attention dropout {p_drop}: token accuracy {attn_dropout_accuracy:.3f}")

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch7_attn_dropout_accuracy", round(attn_dropout_accuracy, 3))
glue("ch7_one_minus_p", round(1 - p_drop, 2))
glue("ch7_one_minus_p2", round(1 - p_drop**2, 2))
# closer to 1 - p**2 (two redundant heads) than to 1 - p (a single path)
assert abs(attn_dropout_accuracy - (1 - p_drop**2)) < 0.05
assert attn_dropout_accuracy < 0.95
# The same check on every seed of the shipped ablation file (its plain runs).
dropped_seeds = plain[f"attention-dropout {p_drop} accuracy"]
assert ((dropped_seeds - (1 - p_drop**2)).abs() < 0.05).all() and (
    dropped_seeds < 0.95
).all()
glue(
    "ch7_attn_dropout_seeds",
    f"{dropped_seeds.min():.2f} to {dropped_seeds.max():.2f}",
)

# %% [markdown]
# Accuracy falls to {glue:text}`ch7_attn_dropout_accuracy` (from
# {glue:text}`ch7_attn_dropout_seeds` over the seeds of the table), not to
# {glue:text}`ch7_one_minus_p` but close to $1 - p^2 =$ {glue:text}`ch7_one_minus_p2`: both
# heads of block 1 route the mirror token (the attention maps above), so an output is lost
# mostly when *both* its weights are dropped. The mechanism is real, and this model already
# carries some redundancy against it.
#
# ### A sequence length never seen in training
#
# The trained model has only seen sequences of length 16. What does it do with 8 or 24 tokens?
# The sinusoidal encoding is defined for any position, so the model runs; but reversing a
# sequence of length $T'$ means reading position $T' - 1 - t$. An encoder without a mask
# could in principle infer $T'$ (from the average of the positional encodings, or by finding
# the last position), but training never varied $T'$, so nothing pushed it to: we expect it to
# have learned "position $t$ reads position $15 - t$", and we check that below.

# %% tags=["nbval-ignore-output"]
lengths = [8, 12, 16, 20, 24]
by_length = length_accuracies(model, lengths)  # 2,000 sequences of each
pd.Series(by_length, name="token accuracy").rename_axis("test length").round(
    3
).to_frame()

# %% [markdown]
# Where does the best head look at the longer lengths? For each query $t < 16$ we find the
# key it reads most, on average over 500 sequences, and count the queries whose key is still
# $15 - t$.

# %% tags=["nbval-ignore-output"]
mirror_reads = {}
for length in [20, 24]:
    inputs = make_reverse_dataset(
        500, length, num_classes, torch.Generator().manual_seed(3)
    ).tensors[0]
    # the best head's mean weights: the key each query t < 16 reads most
    mirror_reads[length] = count_mirror_reads(inputs)
    print(f"length {length}: {mirror_reads[length]} of 16 queries read 15 - t")

# %% tags=["remove-cell", "nbval-ignore-output"]
glue(
    "ch7_length_best_other",
    round(max(v for k, v in by_length.items() if k != seq_len), 2),
)
assert by_length[seq_len] >= 0.999
assert all(by_length[k] < 0.5 for k in lengths if k != seq_len)
# the best head's routing at longer lengths: does query t < 16 still read 15 - t?
glue("ch7_mirror_reads_20", mirror_reads[20])
glue("ch7_mirror_reads_24", mirror_reads[24])
assert all(count >= seq_len - 1 for count in mirror_reads.values()), (
    mirror_reads
)
# The same claim on every seed of the shipped ablation file (its plain runs).
other_length_seeds = plain["best other-length accuracy"]
assert (other_length_seeds < 0.5).all()
glue("ch7_length_other_seeds_max", round(other_length_seeds.max(), 2))
mirror_seeds = plain[["mirror reads at 20", "mirror reads at 24"]]
assert (mirror_seeds >= seq_len - 1).all().all()
glue("ch7_mirror_reads_seeds_min", int(mirror_seeds.min().min()))

# %% [markdown]
# Only length 16 works; at every other length the accuracy is at most
# {glue:text}`ch7_length_best_other` (at most {glue:text}`ch7_length_other_seeds_max` over the
# seeds of the ablation table). The best head still reads key $15 - t$ for
# {glue:text}`ch7_mirror_reads_20` of the 16 queries at length 20 and for
# {glue:text}`ch7_mirror_reads_24` at length 24 (at least
# {glue:text}`ch7_mirror_reads_seeds_min` on every seed), where the right key would be
# $T' - 1 - t$. The model did not learn "reverse"; it learned a fixed routing of absolute positions that happens to reverse sequences of one length. Generalizing
# across lengths needs training on many lengths, and is easier with the length made explicit
# in the input (an end-of-sequence marker the model can attend to); relative position
# schemes (ALiBi, RoPE, chapter 5) help only where the rule itself is relative, and "mirror
# around the middle" is not.
#
# (ch7-schedule-experiment)=
# ## What the schedule does: an experiment
#
# Does the warm-up matter, and does the cosine decay? We change one thing at a time and
# measure each run's speed as the number of steps until its training accuracy (the mean over
# ten steps) first reaches 99%. Every run is `BOOK_CONFIG` with the changes listed in
# `SCHEDULE_EXPERIMENT`, on the same data, with two seeds (initialization and batch order),
# cut after the first {glue:text}`ch7_experiment_steps` of the run's
# {glue:text}`ch7_total_steps` steps (the schedule is still the full run's):
#
# - the book's recipe, without its warm-up, and with a constant learning rate (no warm-up, no
#   decay);
# - a learning rate {glue:text}`ch7_lr_ratio` times smaller, 0.001 (the source notebook's), with the
#   book's schedule;
# - larger learning rates: 0.1 with and without the 10-step warm-up, and 0.05 without it;
# - the same model with post-LN blocks, at the book's rate and at 0.05, with and without
#   warm-up. Chapter 6 argued from gradients at initialization that post-LN needs a warm-up
#   and pre-LN does not; this tests the claim by training.

# %%
experiment_steps, experiment_seeds = 250, (0, 1)
schedule_runs = {
    name: config.replace(**changes)
    for name, changes in SCHEDULE_EXPERIMENT.items()
}
pd.DataFrame(
    [
        [run.lr, run.warmup_steps, run.cosine_decay, run.model.norm_first]
        for run in schedule_runs.values()
    ],
    index=list(schedule_runs),
    columns=["lr", "warmup_steps", "cosine_decay", "norm_first"],
)

# %% tags=["remove-cell"]
glue("ch7_experiment_steps", experiment_steps)
glue("ch7_total_steps", config.total_steps())

# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
curves, reached = [], []
for name, changes in SCHEDULE_EXPERIMENT.items():
    for seed in experiment_seeds:
        run = config.replace(seed=seed, **changes)
        _, run_history = train_reverse(
            run, train_set, device, max_steps=experiment_steps
        )
        curves.append(run_history.assign(run=name, seed=seed))
        reached.append(
            {"run": name, "seed": seed, "steps": steps_to_accuracy(run_history)}
        )
curves = pd.concat(curves)
print(f"{len(reached)} runs in {time.perf_counter() - start:.0f} s")


# %% tags=["hide-input", "nbval-ignore-output"]
def plot_runs(ax, names, title, legend_at):
    for color, name in enumerate(names):
        style = (
            "--" if SCHEDULE_EXPERIMENT[name].get("warmup_steps") == 0 else "-"
        )
        for seed in experiment_seeds:
            run = curves[(curves["run"] == name) & (curves["seed"] == seed)]
            label = name if seed == experiment_seeds[0] else None
            ax.plot(
                run["step"],
                run["train_accuracy"],
                style,
                color=f"C{color}",
                label=label,
            )
    ax.axhline(0.99, color="k", lw=0.8, ls=":")
    ax.set(ylabel="train accuracy", ylim=(0, 1.02), title=title)
    ax.legend(fontsize=9, loc=legend_at)


panels = {
    "pre-LN at lr 0.02: the schedule, and the source's lr": [
        "book: lr 0.02, warm-up, cosine",
        "no warm-up",
        "constant lr",
        "lr 0.001",
    ],
    "pre-LN at larger learning rates": [
        "lr 0.1",
        "lr 0.1, no warm-up",
        "lr 0.05, no warm-up",
    ],
    "post-LN": [
        "post-LN",
        "post-LN, no warm-up",
        "post-LN, lr 0.05",
        "post-LN, lr 0.05, no warm-up",
    ],
}
fig, axes = plt.subplots(3, 1, figsize=(6.2, 8.4), sharex=True)
legend_places = ["lower right", "center right", "center right"]
for ax, (title, names), place in zip(
    axes, panels.items(), legend_places, strict=True
):
    plot_runs(ax, names, title, place)
axes[-1].set_xlabel("step")
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure.** Training accuracy (mean over ten steps) of every run of the experiment, two
# seeds each (two lines of one colour); dashed lines are runs without warm-up, the dotted line
# is 99%. Top: at the book's learning rate, pre-LN reaches 99% at about the same step with
# warm-up and decay (which starts more slowly), without the warm-up and at a constant rate
# (table below); at the source's learning rate, 0.001, it
# climbs far more slowly. Middle: at 0.1, pre-LN
# trains with its 10-step warm-up and stays at chance without it. Bottom: post-LN trains at
# the book's rate with or without warm-up; at 0.05 it needs the warm-up. (In the top panel
# the runs without warm-up and at a constant rate coincide: the dashed orange lines lie under
# the dashed green ones, since over these first steps the cosine has hardly decayed.)

# %% [markdown]
# Two seeds draw curves; they do not settle a claim. The table gives every run of the
# experiment on {glue:text}`ch7_schedule_seeds` seeds.

# %%
schedules = schedule_results()
steps_table = schedules.pivot(
    index="run", columns="seed", values="steps to 99%"
)
steps_table = steps_table.loc[list(SCHEDULE_EXPERIMENT)]
final_accuracy = schedules.pivot(index="run", columns="seed", values="final")
final_accuracy = final_accuracy.loc[list(SCHEDULE_EXPERIMENT)]
table = steps_table.map(lambda steps: "-" if pd.isna(steps) else int(steps))
table.columns = [f"seed {seed}" for seed in table.columns]
final_range = final_accuracy.agg(["min", "max"], axis=1)
table["final accuracy"] = final_range.apply(
    lambda row: f"{row['min']:.2f} to {row['max']:.2f}", axis=1
)
table

# %% [markdown]
# **Table.** Steps to 99% training accuracy, per run and seed: the first row of the history (one
# every ten steps) whose mean accuracy over its ten steps reaches 99%; "-" means not within
# {glue:text}`ch7_experiment_steps` steps. The last column is the spread over the seeds of the
# accuracy over each run's last ten steps. Measured by a longer run of the same code, shipped
# with the book.

# %% tags=["remove-cell"]
(schedules_command,) = schedules["command"].unique()
(schedules_machine,) = schedules["machine"].unique()
glue("ch7_schedule_seeds", steps_table.shape[1])
reached_all = steps_table.notna().all(axis=1)
# NaN unless every seed got to 99%
slowest = steps_table.max(axis=1).where(reached_all)
schedules_at_book_lr = [
    "book: lr 0.02, warm-up, cosine",
    "no warm-up",
    "constant lr",
]
post_book_lr = ["post-LN", "post-LN, no warm-up"]
stuck = final_accuracy.max(axis=1)  # the best seed's final accuracy
num_seeds = steps_table.shape[1]
post05_reached = int(steps_table.loc["post-LN, lr 0.05"].notna().sum())
pre05_reached = int(steps_table.loc["lr 0.05, no warm-up"].notna().sum())
glue("ch7_book_lr_slowest", int(slowest[schedules_at_book_lr].max()))
glue("ch7_source_lr_fastest", int(steps_table.loc["lr 0.001"].min()))
glue("ch7_lr01_slowest", int(slowest["lr 0.1"]))
glue("ch7_lr01_stuck", round(stuck["lr 0.1, no warm-up"], 2))
glue("ch7_post05_stuck", round(stuck["post-LN, lr 0.05, no warm-up"], 2))
glue("ch7_post05_reached", post05_reached)
glue("ch7_post05_worst", round(final_accuracy.loc["post-LN, lr 0.05"].min(), 2))
glue("ch7_pre05_reached", pre05_reached)
glue(
    "ch7_pre05_worst", round(final_accuracy.loc["lr 0.05, no warm-up"].min(), 2)
)
glue("ch7_post_book_slowest", int(slowest[post_book_lr].max()))
# At the book's rate the schedule does not change the speed; the source's rate is slower.
assert (
    reached_all[schedules_at_book_lr].all()
    and slowest[schedules_at_book_lr].max() <= 100
)
assert reached_all["lr 0.001"] and steps_table.loc["lr 0.001"].min() >= 150
# At 0.1, warm-up decides whether pre-LN trains at all.
assert reached_all["lr 0.1"] and slowest["lr 0.1"] <= 150
assert stuck["lr 0.1, no warm-up"] < 0.3
# Post-LN trains at the book's rate without warm-up; at 0.05 without warm-up it stays at
# chance on every seed, where pre-LN leaves chance on every seed.
assert reached_all[post_book_lr].all() and slowest[post_book_lr].max() <= 120
assert stuck["post-LN, lr 0.05, no warm-up"] < 0.3
assert final_accuracy.loc["lr 0.05, no warm-up"].min() > 0.9
# With warm-up, 0.05 is post-LN's edge: some seeds train, some stay at chance.
assert 0 < post05_reached < num_seeds
assert final_accuracy.loc["post-LN, lr 0.05"].min() < 0.3
# This notebook's live runs (the figure) agree with the file.
live_steps = pd.DataFrame(reached).pivot(
    index="run", columns="seed", values="steps"
)
live_final = (
    curves[curves["step"] == experiment_steps]
    .groupby("run")["train_accuracy"]
    .max()
)
assert live_steps.loc[schedules_at_book_lr].max().max() <= 100
assert live_final["lr 0.1, no warm-up"] < 0.3
assert live_final["post-LN, lr 0.05, no warm-up"] < 0.3
assert not live_steps.loc["lr 0.001"].min() < 150  # (NaN, not reached, passes)

# %% [markdown]
# What the runs say, on every seed:
#
# - **At the book's learning rate the schedule does not matter for speed.** With warm-up and
#   cosine decay, without the warm-up, or at a constant rate, pre-LN reaches 99% by step
#   {glue:text}`ch7_book_lr_slowest` on all {glue:text}`ch7_schedule_seeds` seeds. At 0.001
#   the fastest seed needs {glue:text}`ch7_source_lr_fastest` steps.
# - **Warm-up matters when the learning rate is large.** At 0.1, pre-LN with its 10-step
#   warm-up reaches 99% by step {glue:text}`ch7_lr01_slowest`; without it the model never
#   leaves chance: after {glue:text}`ch7_experiment_steps` steps its accuracy is at most
#   {glue:text}`ch7_lr01_stuck`.
# - **Chapter 6's claim, tested.** Post-LN trains without warm-up at the book's rate (99% by
#   step {glue:text}`ch7_post_book_slowest`), so "post-LN needs warm-up" is not true at every
#   learning rate. At 0.05 without warm-up, post-LN stays at chance on every seed (accuracy
#   at most {glue:text}`ch7_post05_stuck`), while pre-LN leaves chance on every seed (final
#   accuracy at least {glue:text}`ch7_pre05_worst`; {glue:text}`ch7_pre05_reached` of the
#   {glue:text}`ch7_schedule_seeds` seeds reach 99% within the {glue:text}`ch7_experiment_steps` steps). Even with its
#   warm-up, 0.05 is post-LN's edge: {glue:text}`ch7_post05_reached` of the {glue:text}`ch7_schedule_seeds` seeds reach
#   99%, and
#   the worst ends at {glue:text}`ch7_post05_worst`. Pre-LN tolerates larger first steps than
#   post-LN, as the gradients at initialization of chapter 6 suggested; but it does not make
#   warm-up useless, since at 0.1 pre-LN needs it too.
#
# The time to 99.9% test accuracy of this recipe and of the source notebook's, measured side
# by side on one machine, is on the book's performance page
# ({ref}`performance-reversal`). On this page one step of batch
# {glue:text}`ch7_batch_size` took {glue:text}`ch7_ms_per_step` milliseconds on average,
# including the validation pass at the end of each epoch (here one).
#
# ## Summary
#
# - Reversal needs one attention hop per token and nothing but positions: a clean test of
#   whether a model can route information by position.
# - Training is a four-step loop (loss, clear, backward, step); `fit` adds the schedule,
#   clipping, metrics and history around it.
# - A pre-LN encoder of {glue:text}`ch7_num_parameters` parameters, with a short warm-up and a
#   cosine schedule, passes 99% training accuracy by step {glue:text}`ch7_steps_to_99` and
#   reaches {glue:text}`ch7_test_accuracy:.4f` test token accuracy.
# - At that learning rate the schedule hardly matters; at larger ones warm-up decides whether
#   the model trains at all, and post-LN needs it at rates where pre-LN does not.
# - Its attention maps show the mechanism: the best head puts
#   {glue:text}`ch7_anti_diagonal_mass` of its weight on the anti-diagonal.
# - Without positional encoding the model can only count tokens
#   ({glue:text}`ch7_blind_accuracy` against a ceiling of {glue:text}`ch7_bag_oracle`); dropout
#   0.1 lowers only the accuracy measured with dropout on; and the model does not generalize
#   to lengths it never saw.
#
# ## Exercises
#
# 1. **All or nothing.** Write `sequence_accuracy(logits, targets)`, the fraction of sequences
#    whose *every* token is right, and check it with
#    `helpers.checks.check_sequence_accuracy(sequence_accuracy)`.
#
# :::{admonition} Solution
# :class: dropdown
# Compare the arg-max with the targets, require all positions of a sequence to be right, then
# average over sequences.
#
# ```python
# def sequence_accuracy(logits, targets):
#     return (logits.argmax(-1) == targets).all(dim=-1).float().mean()
# ```
# :::


# %% tags=["remove-cell"]
def sequence_accuracy(logits, targets):
    return (logits.argmax(-1) == targets).all(dim=-1).float().mean()


print(check_sequence_accuracy(sequence_accuracy))

# %% [markdown]
# 2. **How many blocks?** Train with `config.replace(num_layers=1)`. Does one block suffice?
#    Look at its attention maps. What is the smallest model you can make reach 99.9%?
#
# ````{admonition} Solution
# :class: dropdown
# One attention hop is all reversal needs (position $t$ reads position $T - 1 - t$, whose
# value vector carries the token), so a single block can solve it in principle; expect its
# one layer of maps to show the anti-diagonal in a head. Shrinking further, the width must
# still hold both a token identity and enough positional signal for the query-key product to single out one
# position among 16.
# ````
#
# 3. **Why exactly the oracle?** The model without positional encoding matched the
#    bag-of-tokens ceiling almost to the third decimal. Explain why it can reach the ceiling
#    at all: what must attention compute for it?
#
# ````{admonition} Solution
# :class: dropdown
# Uniform attention over all positions gives every position the average embedding of the
# sequence, which determines the token counts (the bag); the FFN and the classifier can then
# subtract the position's own token and pick the most frequent remaining one. Uniform weights
# are easy to learn (equal scores), so the model finds this rule quickly.
# ````
