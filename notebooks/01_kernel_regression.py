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
# # Attention as kernel regression
#
# The attention of a Transformer {cite}`vaswani2017attention` has an ancestor in statistics.
# In 1964 Nadaraya and Watson {cite}`nadaraya1964,watson1964` predicted a value at a new
# point by averaging the values they had already seen, each weighted by how close its point
# was to the new one. Replace "point" by *key*, "new point" by *query* and "how close" by a
# *score*, and you have the attention mechanism at the heart of every Transformer.
#
# After this chapter you will be able to:
#
# - compute attention as a softmax of scores over keys followed by a weighted average of
#   values, from scratch, and read it as a *soft* dictionary lookup;
# - explain what the kernel width does (chasing the noise when narrow, flattening the curve
#   when wide) and learn it by gradient descent, with a mask that hides each point from itself;
# - rewrite a distance score as a dot-product score, the form attention takes in Transformers.
#
# ```{figure} ../book/_static/diagrams/map_01.svg
# :alt: The book's map of the Transformer: every attention box, in the encoder and in the decoder, is highlighted.
# :width: 60%
# :name: fig-map-01
#
# Where this chapter sits in the Transformer: what one attention box computes.
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

import altair as alt
import matplotlib.pyplot as plt
import pandas as pd
import torch
from matplotlib.colors import LogNorm

from helpers import glue, show_source
from helpers.checks import check_kernel_regression
from helpers.kernel import (
    fit_width,
    gaussian_kernel,
    nadaraya_watson,
    nearest_neighbour,
)
from helpers.tasks.regression import make_regression_data, true_function

# %% [markdown]
# ## A regression problem with no model
#
# We sample 80 noisy points from the curve $f(x) = 2\sin(x) + x$ on $[0, 10)$. The task: predict
# $f$ at any new $x$, using nothing but the 80 pairs $(x_j, y_j)$. No parameters, no training
# (yet). The data come from a seeded generator, so every run of this page sees the same points.

# %%
generator = torch.Generator().manual_seed(0)
x_train, y_train = make_regression_data(
    num_points=80, noise=1.0, generator=generator
)
x_query = torch.linspace(0, 10, 200)  # where we want predictions
y_true = true_function(x_query)
print(f"x_train {tuple(x_train.shape)}, y_train {tuple(y_train.shape)}")
print(f"x_query {tuple(x_query.shape)}")

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.2, 3))
ax.plot(x_query, y_true, "k--", label="truth $f(x)$")
ax.plot(x_train, y_train, "o", ms=3.5, alpha=0.6, label="training data")
ax.set(xlabel="$x$", ylabel="$y$")
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** The 80 training points scatter around the dashed truth with noise of standard
# deviation 1; an estimator should follow the dashed curve, not the individual points.
#
# ## The Nadaraya-Watson estimator
#
# For a query $q$, predict a weighted average of the training targets (the *values* $v_j = y_j$),
# with weights given by a kernel $K$ of the distance between $q$ and each training input (the
# *keys* $k_j = x_j$):
#
# $$
# \begin{aligned}
# \hat f(q) &= \sum_{j=1}^{n} a_j(q)\, v_j, \qquad
# a_j(q) = \frac{K(q - k_j)}{\sum_{l=1}^{n} K(q - k_l)}, \\
# K(d) &= \exp\!\left(-\frac{d^2}{2\sigma^2}\right).
# \end{aligned}
# $$
#
# The weights are non-negative and sum to one over the keys, so $\hat f(q)$ is a *convex
# combination* of the values. Because the Gaussian kernel is an exponential, the weights are
# exactly a softmax of the *scores* $s_j = -(q - k_j)^2 / (2\sigma^2)$:
#
# $$
# a_j(q) = \frac{\exp(s_j)}{\sum_l \exp(s_l)} = \operatorname{softmax}(s)_j .
# $$
#
# That is the whole of attention: scores between a query and keys, a softmax over the keys, a
# weighted sum of values. Here it is from scratch, for all queries at once: a matrix of
# pairwise differences of shape (queries, keys), one softmax per row.


# %%
def kernel_regression_from_scratch(queries, keys, values, width):
    differences = queries[:, None] - keys[None, :]  # (Tq, Tk)
    scores = -(differences**2) / (2 * width**2)
    # one softmax per row: each query's weights sum to one over the keys
    weights = torch.softmax(scores, dim=1)
    return weights @ values, weights


predictions, weights = kernel_regression_from_scratch(
    x_query, x_train, y_train, width=0.5
)
print(f"weights {tuple(weights.shape)}, predictions {tuple(predictions.shape)}")

# %% [markdown]
# The book's canonical version is the same computation with input checks and an optional mask
# (which we will need below); from here on we use it.

# %% tags=["hide-output"]
show_source(nadaraya_watson)

# %% tags=["remove-cell"]
package_predictions, package_weights = nadaraya_watson(
    x_query, x_train, y_train, width=0.5
)
torch.testing.assert_close(package_predictions, predictions)
torch.testing.assert_close(package_weights, weights)
assert (weights >= 0).all()
torch.testing.assert_close(weights.sum(dim=1), torch.ones(len(x_query)))

# %% [markdown]
# It gives the same weights and predictions as ours. The softmax form matters in practice
# too: dividing raw kernel values by their sum gives $0/0$ when a narrow kernel sits far from
# every key, while the softmax subtracts the largest score first and stays finite.

# %%
far_query = torch.tensor([30.0])  # far outside the data
raw = gaussian_kernel(far_query[:, None] - x_train[None, :], width=0.1)
naive = (raw / raw.sum())[0, 0].item()
print(f"raw kernel sum: {raw.sum().item()} -> naive normalization: {naive}")
prediction, _ = nadaraya_watson(far_query, x_train, y_train, width=0.1)
nearest = (far_query - x_train).abs().argmin()
print(f"softmax form predicts {prediction.item():.3f}")
print(f"the value of the nearest key is {y_train[nearest].item():.3f}")

# %% tags=["remove-cell"]
assert raw.sum() == 0 and torch.isfinite(prediction).all()
torch.testing.assert_close(prediction, y_train[nearest : nearest + 1])

# %% [markdown]
# ## Soft lookup versus hard lookup
#
# A dictionary lookup returns the value of the one key that matches. *Nearest-neighbour*
# regression is its closest numeric cousin: return the value of the closest key, a one-hot
# weight vector. Attention is the soft version: every key contributes, in proportion to its
# similarity.
#
# ```{figure} ../book/_static/diagrams/soft_lookup.svg
# :alt: Two panels with the same query, q = 2, and the same four key and value pairs. Top, soft lookup: the query is linked to every key, each key gets a weight from a softmax (0.65 on key 1.6 and 0.34 on key 2.7, the two nearest, almost none on the others), and the output, the sum of the values times their weights, is 0.72. Bottom, hard lookup: only the nearest key, 1.6, gets weight 1, every other key 0, and the output is that key's value, 0.90.
# :name: fig-soft-lookup
#
# One query looked up two ways (Gaussian kernel of width 0.5). The query is drawn in blue,
# the keys in orange, the values in green; each weight cell is shaded by its weight, from dark
# purple for 0 to yellow for 1. Look at the weight column: the soft lookup spreads one unit of
# weight over the keys by closeness, so its output lies between the values of the two nearest
# keys; the hard lookup puts all of it on the nearest key and returns that key's value
# unchanged. Dashed lines lead to keys that get (almost) no weight.
# ```
#
# Which of the two predicts better, and how soft should the soft one be? Both answers depend
# on the kernel width.
#
# ## The kernel width is the whole story
#
# The only hyperparameter is the width $\sigma$. It decides how many keys a query effectively
# attends to. The figure sweeps it over four values.

# %% tags=["hide-input"]
widths = [0.1, 0.3, 1.0, 3.0]
offsets = torch.linspace(-4, 4, 200)
# One logarithmic colour scale for every row:
# a peak of 0.5 and one of 0.03 look different.
weight_scale = LogNorm(vmin=1e-4, vmax=1)
fig, axes = plt.subplots(
    4,
    3,
    figsize=(6.2, 8.6),
    sharex="col",
    layout="constrained",
    gridspec_kw={"width_ratios": [1, 1.5, 1.3]},
)
for row, width in enumerate(widths):
    fit, attention = nadaraya_watson(x_query, x_train, y_train, width=width)
    ax_kernel, ax_fit, ax_weights = axes[row]
    ax_kernel.plot(offsets, gaussian_kernel(offsets, width), color="k")
    ax_kernel.set_ylim(0, 1.05)
    ax_kernel.set_ylabel(rf"$\sigma = {width}$", fontsize=11)
    ax_fit.plot(x_train, y_train, "o", ms=2.5, alpha=0.4, label="data")
    ax_fit.plot(x_query, y_true, "k--", lw=1, label="truth")
    ax_fit.plot(x_query, fit, lw=2, label="estimate")
    ax_fit.set(ylim=(-5, 16))
    image = ax_weights.imshow(
        attention.clamp_min(1e-4),
        cmap="Reds",
        norm=weight_scale,
        aspect="auto",
        extent=(0, 80, 10, 0),
    )
    ax_weights.set_ylabel("query $x$")
    ax_weights.grid(False)
axes[0, 0].set_title("kernel $K(q - k)$")
axes[0, 1].set_title("estimate")
axes[0, 2].set_title("attention weights")
axes[0, 1].legend(loc="upper left", fontsize=9)
axes[-1, 0].set_xlabel("$q - k$")
axes[-1, 1].set_xlabel("$x$")
axes[-1, 2].set_xlabel("key (training points, by $x_j$)")
fig.colorbar(
    image,
    ax=axes[:, 2],
    location="bottom",
    shrink=0.9,
    label="weight (log scale)",
)
plt.show()

# %% [markdown]
# **Figure.** Rows are kernel widths. Left: the kernel. Middle: the estimate against the truth.
# Right: the attention weights, one row per query, one column per training point, on one
# logarithmic colour scale shared by every row (colour bar). A narrow kernel ($\sigma=0.1$)
# puts a query's weight on the two or three nearest points (its largest weight is typically
# {glue:text}`ch1_narrow_peak`), so the estimate jumps with the noise. A wide one
# ($\sigma=3$) spreads weight over most of the data, at most {glue:text}`ch1_wide_max` per key
# (a query's largest weight is typically {glue:text}`ch1_wide_peak`), so the estimate is smooth
# but flattened, missing the sine's peaks and valleys. From top to bottom the band of weights
# along the diagonal widens and fades.
#
# ```{admonition} Going deeper: the effective number of keys
# :class: dropdown
# How many keys does a query really use? A handy count is $1/\sum_j a_j^2$: if the weight is
# spread evenly over $m$ keys, each $a_j = 1/m$ and the count is exactly $m$; if one key takes
# it all, the count is 1; uneven weights land in between. For $\sigma = 0.1$ its median over
# the queries is {glue:text}`ch1_narrow_effective_keys`: two or three keys per query.
# ```

# %% tags=["remove-cell"]
# The caption's numbers: median over the queries of the effective number of keys and of the
# largest weight, and the largest weight of the wide kernel over all queries, rounded up.
_, narrow_weights = nadaraya_watson(x_query, x_train, y_train, width=0.1)
_, wide_weights = nadaraya_watson(x_query, x_train, y_train, width=3.0)
effective_keys = (1 / (narrow_weights**2).sum(dim=1)).median().item()
narrow_peak = narrow_weights.max(dim=1).values.median().item()
wide_peak = wide_weights.max(dim=1).values.median().item()
wide_max = math.ceil(wide_weights.max().item() * 1000) / 1000
assert effective_keys < 4
assert (wide_weights <= wide_max).all() and narrow_peak > 10 * wide_max
glue("ch1_wide_max", wide_max)
glue("ch1_narrow_effective_keys", round(effective_keys, 1))
glue("ch1_narrow_peak", round(narrow_peak, 2))
glue("ch1_wide_peak", round(wide_peak, 2))

# %% [markdown]
# ### Scrub the width yourself
#
# The chart below was computed in Python for the widths $\sigma = 0.1, 0.2, \dots, 2.0$ and
# embedded in the page, so it works on the static website with no kernel running. Drag the
# slider: the estimate (top panel) and the attention weights of three queries over the
# training points (bottom panel) are redrawn. The three queries are marked in the top panel
# by dotted vertical lines of their colour.

# %% tags=["hide-cell"]
# Float64 and four decimals: the embedded numbers are the same on every CPU.
tenths = range(1, 21)  # sigma = tenths / 10
probe_queries = torch.tensor([2.0, 5.0, 8.0], dtype=torch.float64)
xq = torch.linspace(0, 10, 101, dtype=torch.float64)
xt, yt = x_train.double(), y_train.double()
fit_rows, weight_rows = [], []
for tenth in tenths:
    fit, _ = nadaraya_watson(xq, xt, yt, tenth / 10)
    fit_rows += [
        {"tenths": tenth, "x": q, "estimate": v}
        for q, v in zip(xq.tolist(), fit.tolist(), strict=True)
    ]
    _, probe_weights = nadaraya_watson(probe_queries, xt, yt, tenth / 10)
    for query, row in zip(
        probe_queries.tolist(), probe_weights.tolist(), strict=True
    ):
        weight_rows += [
            {"tenths": tenth, "query": query, "key": k, "weight": a}
            for k, a in zip(xt.tolist(), row, strict=True)
        ]
fits_table = pd.DataFrame(fit_rows).round(4)
weights_table = pd.DataFrame(weight_rows).round(4)
# The weights axis is fixed, so that a curve that flattens is seen to flatten.
weight_axis_max = math.ceil(10 * weights_table["weight"].max()) / 10
print(f"{len(fits_table)} fit rows, {len(weights_table)} weight rows")

# %% tags=["hide-input"]
sigma = alt.param(
    name="sigma",
    value=0.5,
    bind=alt.binding_range(min=0.1, max=2.0, step=0.1, name="kernel width σ "),
)
at_sigma = alt.datum.tenths == alt.expr.round(sigma * 10)
query_colour = alt.Color(
    "query:N",
    title="query x",
    scale=alt.Scale(
        range=["#d95f02", "#1b9e77", "#e7298a"]
    ),  # none is the estimate's blue
    legend=alt.Legend(orient="bottom", direction="horizontal"),
)
points = pd.DataFrame({"x": xt.tolist(), "y": yt.tolist()}).round(2)
truth = pd.DataFrame(
    {"x": xq.tolist(), "truth": true_function(xq).tolist()}
).round(4)
probes = pd.DataFrame({"query": probe_queries.tolist()})
data_layer = (
    alt.Chart(points)
    .mark_circle(size=18, opacity=0.4, color="gray")
    .encode(x=alt.X("x:Q", title="x"), y=alt.Y("y:Q", title="y"))
)
truth_layer = (
    alt.Chart(truth)
    .mark_line(strokeDash=[4, 3], color="black")
    .encode(x="x:Q", y="truth:Q")
)
probe_layer = (
    alt.Chart(probes)
    .mark_rule(strokeDash=[2, 2])
    .encode(x="query:Q", color=query_colour)
)
fit_layer = (
    alt.Chart(fits_table)
    .mark_line(strokeWidth=3, color="#1f77b4")
    .encode(x="x:Q", y="estimate:Q", tooltip=["x:Q", "estimate:Q"])
    .transform_filter(at_sigma)
)
weights_layer = (
    alt.Chart(weights_table)
    .mark_line(point=True)
    .encode(
        x=alt.X("key:Q", title="training point x_j (key)"),
        y=alt.Y(
            "weight:Q",
            title="attention weight",
            scale=alt.Scale(domain=[0, weight_axis_max]),
        ),
        color=query_colour,
        tooltip=["query:Q", "key:Q", "weight:Q"],
    )
    .transform_filter(at_sigma)
)
top = (data_layer + truth_layer + probe_layer + fit_layer).properties(
    width=300, height=200, title="estimate"
)
bottom = weights_layer.properties(
    width=300, height=200, title="weights of the three queries"
)
(
    alt.vconcat(
        top, bottom
    )  # stacked: each panel keeps its size on a phone's column
    .add_params(sigma)
    .resolve_scale(color="shared")
    .resolve_legend(color="shared")
)

# %% [markdown]
# **Figure.** Interactive: the slider sets the kernel width $\sigma$. The weights axis
# (bottom) is fixed, so as $\sigma$ grows the three weight curves visibly spread out and
# flatten, from a few spikes at $\sigma = 0.1$ to low, wide hills at $\sigma = 2$, while the
# estimate (top) goes from chasing individual points to a smooth, flattened curve. Hover a
# line for exact values.
#
# ### The best width
#
# "Jumps with the noise" is *variance*; "flattened" is *bias*. Drawing many training sets
# from the same curve and averaging the error of each fit against the truth measures both
# (Going deeper, below): the expected error is smallest, {glue:text}`ch1_best_error`, at
# $\sigma \approx$ {glue:text}`ch1_best_width`. At that width, back on our one training set,
# how do the two lookups compare?
#
# :::{admonition} Going deeper: bias and variance, measured
# :class: dropdown
# Draw 40 training sets from the same curve, fit each, and split the mean squared error
# against the truth into the squared bias of the average fit and the variance of the fits
# around it. (The average of 40 fits still carries a 40th of their variance; the code
# subtracts it so that the bias is not inflated where the variance is large.) The cell below
# holds the code and a table, the folded one after it the figure.
#
# Across the 30 widths, the variance (the fit's sensitivity to the noise it happened to see)
# falls as the kernel widens, down to its minimum at $\sigma \approx$
# {glue:text}`ch1_variance_min_width`, then creeps back up a little. The squared bias (the
# average fit's distance from the truth) stays at a small floor up to $\sigma \approx 0.15$
# and then rises with the width, steeply once the kernel is wider than the sine's bumps.
# Their sum, the expected error, is smallest in between (grey line in the figure): at
# $\sigma=$ {glue:text}`ch1_narrow_width` it is {glue:text}`ch1_narrow_error` (variance
# dominates), at $\sigma=$ {glue:text}`ch1_wide_width` it is {glue:text}`ch1_wide_error` (bias
# dominates).
# :::

# %%
# squared bias and variance over 40 training sets (Going deeper, above)
width_grid = torch.logspace(-1.5, 0.7, 30)  # 0.03 ... 5
num_datasets = 40
data_generator = torch.Generator().manual_seed(1)
datasets = [
    make_regression_data(80, generator=data_generator)
    for _ in range(num_datasets)
]
rows = []
for width in width_grid.tolist():
    fits = torch.stack(
        [nadaraya_watson(x_query, x, y, width)[0] for x, y in datasets]
    )
    variance = fits.var(0, unbiased=False).mean().item()
    # the mean of the fits is itself noisy: remove the variance it still carries
    noise_in_mean = fits.var(0, unbiased=True).mean().item() / num_datasets
    bias_squared = ((fits.mean(0) - y_true) ** 2).mean().item() - noise_in_mean
    rows.append({"width": width, "bias²": bias_squared, "variance": variance})
errors = pd.DataFrame(rows)
errors["error"] = errors["bias²"] + errors["variance"]
best = errors.loc[errors["error"].idxmin()]
errors.iloc[::6].round(3)

# %% tags=["hide-cell"]
fig, ax = plt.subplots(figsize=(6.2, 3.2))
for column, style in [("bias²", "-"), ("variance", "-"), ("error", "k--")]:
    ax.plot(errors["width"], errors[column], style, label=column, lw=2)
ax.axvline(best["width"], color="grey", lw=1)
ax.set(
    xscale="log",
    yscale="log",
    xlabel=r"kernel width $\sigma$",
    ylabel="mean squared error",
)
ax.legend()
plt.show()

# %% tags=["remove-cell"]
narrow_to_wide = errors[errors["width"] < 1]
assert narrow_to_wide["variance"].is_monotonic_decreasing
assert errors["variance"].iloc[0] > 5 * errors["variance"].iloc[-1]
assert errors["bias²"].iloc[-1] > 100 * errors["bias²"].iloc[0]
# Below sigma = 0.15 the squared bias sits at a small floor (what 40 draws leave of the noise);
# from there on it rises with every step of the width.
assert errors.loc[errors["width"] < 0.15, "bias²"].max() < 0.02
assert errors.loc[errors["width"] >= 0.15, "bias²"].is_monotonic_increasing
variance_min_width = errors.loc[errors["variance"].idxmin(), "width"]
assert 1 < variance_min_width < 2.5
# creeps back up
assert errors["variance"].iloc[-1] > 1.2 * errors["variance"].min()
assert errors["error"].iloc[0] > best["error"] < errors["error"].iloc[-1]
# Numbers quoted in the text and the dropdown.
glue("ch1_variance_min_width", round(variance_min_width, 1))
glue("ch1_best_width", round(best["width"], 2))
glue("ch1_best_error", round(best["error"], 3))
glue("ch1_narrow_error", round(errors["error"].iloc[0], 2))
glue("ch1_wide_error", round(errors["error"].iloc[-1], 2))
glue("ch1_narrow_width", round(errors["width"].iloc[0], 2))
glue("ch1_wide_width", round(errors["width"].iloc[-1], 1))

# %%
best_width = float(best["width"])
hard_predictions, hard_weights = nearest_neighbour(x_query, x_train, y_train)
soft_predictions, soft_weights = nadaraya_watson(
    x_query, x_train, y_train, width=best_width
)
hard_error = ((hard_predictions - y_true) ** 2).mean().item()
soft_error = ((soft_predictions - y_true) ** 2).mean().item()
print(f"error against the truth: hard {hard_error:.3f}, soft {soft_error:.3f}")

# %% tags=["remove-cell"]
assert (hard_weights.sum(1) == 1).all() and (
    hard_weights.max(1).values == 1
).all()
assert soft_error < hard_error
glue("ch1_hard_error", round(hard_error, 3))
glue("ch1_soft_error", round(soft_error, 3))

# %% tags=["hide-input"]
fig, axes = plt.subplots(
    1, 2, figsize=(6.2, 3), sharey=True, layout="constrained"
)
for ax, name, estimate in [
    (axes[0], "hard: nearest neighbour", hard_predictions),
    (axes[1], "soft: Nadaraya-Watson", soft_predictions),
]:
    ax.plot(x_train, y_train, "o", ms=2.5, alpha=0.4, label="data")
    ax.plot(x_query, y_true, "k--", lw=1, label="truth")
    ax.plot(
        x_query,
        estimate,
        lw=2,
        drawstyle="steps-mid" if name.startswith("hard") else "default",
        label="estimate",
    )
    ax.set(title=name, xlabel="$x$")
axes[0].set_ylabel("$y$")
axes[0].legend(loc="upper left")
plt.show()

# %% [markdown]
# **Figure.** Left, the hard lookup copies the nearest noisy label: a staircase that reproduces
# every bit of noise (error {glue:text}`ch1_hard_error` against the truth). Right, the soft
# lookup at the best width averages neighbours and lands much closer (error
# {glue:text}`ch1_soft_error`). A softmax is also differentiable, an argmax is not: that is
# what lets attention be *learned*.
#
# ```{admonition} Pitfall: normalizing the kernel over the wrong axis
# :class: warning
# Written by hand, the estimator builds the kernel matrix `K` of shape (queries, keys) and
# divides it by a sum. `K / K.sum(0)` is an easy slip, and it runs without an error: `sum(0)`
# adds up *each column*, over the queries, so each key's weights sum to one across the
# queries, not each query's weights across the keys. The rows, which are what multiply the
# values, then sum to anything. The cell below runs that version: its row sums are far from
# one and the estimate is a distorted copy of the curve. The fix is
# `K / K.sum(1, keepdim=True)`, or better a softmax over `dim=-1`.
# ```

# %%
# (200, 80)
kernel_matrix = gaussian_kernel(x_query[:, None] - x_train[None, :], width=0.5)
# the bug: normalized over the queries (each column sums to one)
wrong_weights = kernel_matrix / kernel_matrix.sum(0)
# right: normalized over the keys (each row sums to one)
right_weights = kernel_matrix / kernel_matrix.sum(1, keepdim=True)
wrong_row_sums = wrong_weights.sum(1)
low, high = wrong_row_sums.min(), wrong_row_sums.max()
print(f"row sums with sum(0): min {low:.3f}, max {high:.3f}")

# %% tags=["remove-cell"]
torch.testing.assert_close(right_weights.sum(1), torch.ones(200))
torch.testing.assert_close(
    right_weights, nadaraya_watson(x_query, x_train, y_train, 0.5)[1]
)
assert wrong_row_sums.max() < 0.9
glue("ch1_wrong_row_sum_max", round(wrong_row_sums.max().item(), 2))

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.2, 3))
ax.plot(x_train, y_train, "o", ms=2.5, alpha=0.4, label="data")
ax.plot(x_query, y_true, "k--", lw=1, label="truth")
ax.plot(x_query, right_weights @ y_train, lw=2, label="rows normalized (right)")
ax.plot(
    x_query, wrong_weights @ y_train, lw=2, label="columns normalized (bug)"
)
ax.set(xlabel="$x$", ylabel="$y$")
ax.legend(loc="upper left")
plt.show()

# %% [markdown]
# **Figure.** With the columns normalized, no row of weights sums to more than
# {glue:text}`ch1_wrong_row_sum_max`, so the buggy estimate (green) is a scaled-down, distorted
# version of the right one (orange): not an average of the values at all.
#
# ## Learning the width: parametric attention pooling
#
# So far we picked $\sigma$ by looking at the truth, which a real problem does not give us. We
# can instead make $\sigma$ a parameter and minimize the squared error on the training points by
# gradient descent (the model stores $\log\sigma$, so the width stays positive). One subtlety
# decides whether this works: each training point is also a key. If a point may attend to
# itself, the loss is minimized by shrinking $\sigma$ to zero, so that every point predicts its
# own label perfectly. The fix is a mask that hides each point's own key (*leave-one-out*): the
# first mask of this book, and the subject of the next chapter.

# %%
show_source(fit_width)

# %%
loo_model, loo_losses, loo_widths = fit_width(
    x_train, y_train, initial_width=2.0, steps=400, leave_one_out=True
)
self_model, self_losses, self_widths = fit_width(
    x_train, y_train, initial_width=2.0, steps=400, leave_one_out=False
)
learned_width = loo_widths[-1]

# %% tags=["remove-cell"]
# near the best width
assert 0.5 * best["width"] < learned_width < 2 * best["width"]
# without the mask, the width collapses
assert self_widths[-1] < 0.1 * learned_width
assert loo_losses[-1] < loo_losses[0]

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(6.2, 3.2), layout="constrained")
axes[0].plot(loo_losses, label="leave-one-out")
axes[0].plot(self_losses, label="may attend to itself")
axes[0].set(xlabel="gradient step", ylabel="training MSE", title="loss")
axes[1].plot(loo_widths, label="leave-one-out")
axes[1].plot(self_widths, label="may attend to itself")
axes[1].axhline(
    best["width"], color="grey", lw=1, label="best width (from the truth)"
)
axes[1].set(
    xlabel="gradient step",
    ylabel=r"$\sigma$",
    yscale="log",
    title="kernel width",
)
axes[1].legend()
plt.show()

# %% [markdown]
# **Figure.** With leave-one-out masking (blue) the width settles at
# {glue:text}`ch1_learned_width`, near the best width found with access to the truth,
# {glue:text}`ch1_best_width`, and its error against the truth is
# {glue:text}`ch1_learned_error`. When each point may attend to itself (orange) the training
# loss keeps falling because the width collapses (to {glue:text}`ch1_self_width` after 400
# steps): a perfect memorizer that has learned nothing.
#
# :::{admonition} Going deeper: was this training set lucky?
# :class: dropdown
# The folded cell below learns the width on {glue:text}`ch1_width_sets` more training sets
# drawn from the same curve: it settles between {glue:text}`ch1_width_min` and
# {glue:text}`ch1_width_max`, on both sides of the best width and never more than
# {glue:text}`ch1_width_factor` times away from it. Close, then, with the sample deciding on
# which side.
# :::

# %% tags=["remove-cell"]
# Numbers quoted in the caption.
fit_learned, _ = nadaraya_watson(x_query, x_train, y_train, learned_width)
learned_error = ((fit_learned - y_true) ** 2).mean().item()
glue("ch1_learned_width", round(learned_width, 2))
glue("ch1_learned_error", round(learned_error, 3))
glue("ch1_self_width", round(self_widths[-1], 3))

# %% tags=["hide-cell", "nbval-ignore-output"]
# The learned width on more training sets:
# the first five of the bias/variance experiment's.
other_widths = [
    fit_width(x, y, initial_width=2.0, steps=400, leave_one_out=True)[2][-1]
    for x, y in datasets[:5]
]
all_widths = torch.tensor([learned_width, *other_widths])
factors = torch.maximum(all_widths / best["width"], best["width"] / all_widths)
print("learned widths:", [round(width, 2) for width in all_widths.tolist()])

# %% tags=["remove-cell"]
assert min(other_widths) < best["width"] < max(other_widths)  # on both sides
# the chapter's "near the best width", on every training set
assert factors.max() < 2
glue("ch1_width_sets", len(other_widths))
glue("ch1_width_min", round(min(other_widths), 2))
glue("ch1_width_max", round(max(other_widths), 2))
glue("ch1_width_factor", math.ceil(factors.max().item() * 10) / 10)

# %% [markdown]
# ## From distances to dot products
#
# The vocabulary of the rest of the book is now in place. A **query** asks; **keys** are
# compared with it through a **score** (here a negative squared distance); a softmax turns the
# scores into **attention weights**; the output is the weighted average of the **values**.
# Transformers make two changes {cite}`vaswani2017attention`. First, queries, keys and values
# become vectors computed from the inputs by learned linear maps. Second, the score becomes a
# dot product, which is cheap to compute for all pairs at once as a matrix product. The two
# scores are closer than they look. Expanding the square,
#
# $$
# -\frac{(q - k_j)^2}{2\sigma^2} = \frac{q\,k_j}{\sigma^2} - \frac{k_j^2}{2\sigma^2} - \frac{q^2}{2\sigma^2},
# $$
#
# and the last term is the same for every key, so the softmax ignores it: Gaussian-kernel
# attention *is* dot-product attention with a scale $1/\sigma^2$ plus a per-key bias. The cell
# checks this numerically.

# %%
width = 0.5
dot_scores = x_query[:, None] * x_train[None, :] / width**2  # q k / sigma^2
key_bias = -(x_train[None, :] ** 2) / (2 * width**2)  # - k^2 / (2 sigma^2)
dot_weights = torch.softmax(dot_scores + key_bias, dim=-1)
_, gaussian_weights = nadaraya_watson(x_query, x_train, y_train, width)
same = torch.allclose(dot_weights, gaussian_weights, rtol=1e-4, atol=1e-5)
print(f"dot-product weights equal the Gaussian-kernel weights: {same}")

# %% tags=["remove-cell"]
torch.testing.assert_close(dot_weights, gaussian_weights)
assert same

# %% [markdown]
# ## Summary
#
# - Nadaraya-Watson regression predicts a weighted average of the values; with a Gaussian
#   kernel the weights are a softmax of scores between the query and the keys. That is
#   attention.
# - Attention is a *soft* lookup: every key gets some weight, by similarity; nearest-neighbour
#   regression is the hard lookup, and it copies the noise (error {glue:text}`ch1_hard_error`
#   against {glue:text}`ch1_soft_error` for the soft lookup at the best width).
# - The kernel width sets how many keys a query effectively uses: too narrow chases the noise,
#   too wide flattens the curve; the best width here is about {glue:text}`ch1_best_width`.
# - The width can be learned by gradient descent (here it settles at
#   {glue:text}`ch1_learned_width`), but only if a mask stops each training point from
#   attending to itself; otherwise it collapses towards zero.
# - A negative squared distance is a dot product plus a per-key bias: the step to the
#   dot-product attention of Transformers. The next chapter looks at masks in general;
#   chapter 3 then builds scaled dot-product attention.
#
# ## Exercises
#
# 1. **A different kernel.** Write `laplace_regression(queries, keys, values, width)` that uses
#    the Laplace kernel $K(d) = \exp(-|d| / \sigma)$ and returns one prediction per query. Check
#    it with `helpers.checks.check_kernel_regression(laplace_regression)`.
#
# :::{admonition} Solution
# :class: dropdown
# The scores are $-|q - k|/\sigma$; the rest is unchanged.
#
# ```python
# def laplace_regression(queries, keys, values, width):
#     scores = -(queries[:, None] - keys[None, :]).abs() / width
#     return torch.softmax(scores, dim=-1) @ values
# ```
# :::


# %% tags=["remove-cell"]
# The solution above, through the exercise's checker.
def laplace_regression(queries, keys, values, width):
    scores = -(queries[:, None] - keys[None, :]).abs() / width
    return torch.softmax(scores, dim=-1) @ values


verdict = check_kernel_regression(laplace_regression)
assert verdict.startswith("Correct"), verdict

# %% [markdown]
# 2. **The limits of the width.** Without running code, say what $\hat f$ becomes as
#    $\sigma \to \infty$ and as $\sigma \to 0$. Then check your answer numerically.
#
# :::{admonition} Solution
# :class: dropdown
# As $\sigma \to \infty$ every score tends to the same value, the weights become uniform and
# $\hat f(q)$ is the mean of all training targets, a constant. As $\sigma \to 0$ the largest
# score dominates the softmax and $\hat f(q)$ becomes the target of the nearest training point:
# soft lookup turns into hard lookup. To check both numerically:
#
# ```python
# very_wide, _ = nadaraya_watson(x_query, x_train, y_train, width=1e4)
# very_narrow, _ = nadaraya_watson(x_query, x_train, y_train, width=1e-4)
# print((very_wide - y_train.mean()).abs().max())  # about 0
# print((very_narrow - hard_predictions).abs().max())  # small
# ```
# :::

# %% tags=["remove-cell"]
very_wide, _ = nadaraya_watson(x_query, x_train, y_train, width=1e4)
very_narrow, _ = nadaraya_watson(x_query, x_train, y_train, width=1e-4)
torch.testing.assert_close(
    very_wide, y_train.mean().expand(200), atol=1e-3, rtol=0
)
torch.testing.assert_close(very_narrow, hard_predictions, atol=0.05, rtol=0)

# %% [markdown]
# 3. **Why leave-one-out?** In the width-learning experiment, what is the training loss of the
#    model that may attend to itself in the limit $\sigma \to 0$, and why is that loss useless for
#    choosing $\sigma$?
#
# ```{admonition} Solution
# :class: dropdown
# With $\sigma \to 0$ each training point puts all its weight on itself (its own key is at
# distance 0), so it predicts its own label and the training loss tends to 0, whatever the
# noise. The loss rewards memorizing, so it always prefers a narrower kernel. Hiding each
# point's own key turns the training loss into a leave-one-out estimate of the error on new
# points, which is minimized by a useful width.
# ```
