"""Draw the book's diagrams into book/_static/diagrams/<name>.svg.

    python scripts/make_diagrams.py            # write every diagram
    python scripts/make_diagrams.py soft_lookup  # write some

Each diagram is a function below that returns a ``helpers.diagrams.Diagram``; ``DIAGRAMS`` maps
each file name to its function and the chapter that shows it. The output is deterministic, and
``tests/test_diagrams.py`` fails when a committed SVG differs from what this script draws: after
changing a drawing (or upgrading matplotlib), run the script and commit the SVGs.
"""

from __future__ import annotations

import math
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from helpers.diagrams import INK, Diagram, tint  # noqa: E402
from helpers.plotting import ROLE_COLOURS  # noqa: E402

OUT = (
    pathlib.Path(__file__).resolve().parent.parent
    / "book"
    / "_static"
    / "diagrams"
)


# ------------------------------------------------------------------ chapter 1
def soft_lookup() -> Diagram:
    """One query, four keys: softmax weights over every key vs all weight on the nearest one."""
    query, keys, values, width = (
        2.0,
        [0.5, 1.6, 2.7, 3.8],
        [0.2, 0.9, 0.4, -0.3],
        0.5,
    )
    scores = [-((query - key) ** 2) / (2 * width**2) for key in keys]
    total = sum(math.exp(s) for s in scores)
    soft = [math.exp(s) / total for s in scores]
    nearest = min(range(len(keys)), key=lambda j: abs(query - keys[j]))
    hard = [1.0 if j == nearest else 0.0 for j in range(len(keys))]

    row, panel = 0.48, 3.75
    d = Diagram(4.5, 2 * panel)
    for p, (title, weights) in enumerate(
        [
            ("Soft lookup: a softmax over all keys", soft),
            ("Hard lookup: nearest key only", hard),
        ]
    ):
        top = p * panel
        d.text(0.05, top + 0.2, title, ha="left", weight="bold")
        for x, header in [
            (0.5, "query"),
            (1.75, "key"),
            (2.75, "weight"),
            (3.75, "value"),
        ]:
            d.text(x, top + 0.58, header)
        rows_top = top + 0.85
        centre = rows_top + 2 * row
        d.tensor(0.5, centre, 0.8, 0.42, f"q={query:g}", "query")
        for j, (key, value, weight) in enumerate(
            zip(keys, values, weights, strict=True)
        ):
            y = rows_top + (j + 0.5) * row
            chosen = weight > 0.05
            d.line([(0.9, centre), (1.35, y)], role="query", dashed=not chosen)
            d.tensor(1.75, y, 0.8, 0.38, f"k={key:g}", "key")
            d.cells(2.45, y - 0.19, [[weight]], cell=(0.6, 0.38))
            d.text(3.2, y, "×")
            d.tensor(3.75, y, 0.8, 0.38, f"v={value:g}", "value")
        output = sum(w * v for w, v in zip(weights, values, strict=True))
        bottom = rows_top + 4 * row
        d.line(
            [(4.15, rows_top + 0.5 * row), (4.3, rows_top + 0.5 * row)],
            role="value",
        )
        d.line(
            [(4.15, bottom - 0.5 * row), (4.3, bottom - 0.5 * row)],
            role="value",
        )
        d.line(
            [(4.3, rows_top + 0.5 * row), (4.3, bottom - 0.5 * row)],
            role="value",
        )
        d.arrow((4.3, bottom - 0.5 * row), (4.3, bottom + 0.41))
        d.tensor(
            2.85,
            bottom + 0.62,
            3.2,
            0.42,
            f"output = Σ weight × value = {output:.2f}",
        )
    return d


# ------------------------------------------------------------------ chapter 3
def scaled_dot_product_attention() -> Diagram:
    """Q, K, V to the output: the shapes, and where the scaling, the mask and dropout enter."""
    d = Diagram(4.5, 6.75)
    spine, op_w, op_h, top = 1.6, 1.9, 0.42, 0.35
    d.tensor(0.75, top, 0.9, 0.5, "Q", "query")
    d.tensor(2.35, top, 0.9, 0.5, "K", "key")
    d.tensor(4.0, top, 0.8, 0.5, "V", "value")
    steps = [
        (1.3, r"scores $Q K^{\top}$", None, False),
        (2.15, r"scale: $\div \sqrt{d}$", None, False),
        (3.0, "mask: False → −∞", "mask", False),
        (3.85, "softmax over keys", None, False),
        (4.7, "dropout (training)", None, True),
        (5.55, r"weighted sum $A V$", None, False),
    ]
    for y, label, role, dashed in steps:
        d.operation(spine, y, op_w, op_h, label, role, dashed=dashed)
    d.arrow(
        (0.75, top + 0.25),
        (1.15, 1.3 - op_h / 2),
        role="query",
        label="(Tq, d)",
        side="left",
    )
    d.arrow(
        (2.35, top + 0.25), (2.05, 1.3 - op_h / 2), role="key", label="(Tk, d)"
    )
    labels = [
        "(Tq, Tk)",
        "(Tq, Tk)",
        "(Tq, Tk)",
        "A (Tq, Tk)",
        "A (Tq, Tk)",
        "(Tq, dv)",
    ]
    ends = [y for y, *_ in steps] + [6.4]
    for label, start, end in zip(labels, ends, ends[1:], strict=False):
        half = (
            0.25 if end == ends[-1] else op_h / 2
        )  # the output box is taller than an operation
        d.arrow((spine, start + op_h / 2), (spine, end - half), label=label)
    d.tensor(spine, 6.4, 1.3, 0.5, "output")
    # The mask comes in from the side, the values from the top right.
    d.tensor(3.35, 3.0, 0.9, 0.62, "mask\n(Tq, Tk)", "mask")
    d.arrow((2.9, 3.0), (spine + op_w / 2, 3.0), role="mask")
    d.line([(4.0, top + 0.25), (4.0, 5.55)], role="value")
    d.arrow((4.0, 5.55), (spine + op_w / 2, 5.55), role="value")
    d.text(3.92, 1.0, "(Tk, dv)", mono=True, ha="right")
    return d


# ------------------------------------------------------------------ chapter 4
def _chain(d, spine, start, steps, op_w, op_h=0.42, step=0.85, output="output"):
    """Operations one below the other on a vertical spine, each arrow labelled with a shape.

    ``steps`` is a list of (operation label, shape on the arrow into the *next* box); the
    last box is the output tensor. Returns the y of the output.
    """
    y = start
    for label, shape in steps:
        d.operation(spine, y, op_w, op_h, label)
        d.arrow(
            (spine, y + op_h / 2), (spine, y + step - op_h / 2), label=shape
        )
        y += step
    d.tensor(spine, y, 1.3, op_h, output)
    return y


def mha_per_head() -> Diagram:
    """Per-head view: H small attentions on their own projections, concatenated, mixed by W^O."""
    d = Diagram(4.5, 5.2)
    d.tensor(2.1, 0.3, 1.0, 0.42, "x")
    d.text(2.68, 0.3, "(B, T, D)", mono=True, ha="left")
    columns = [(0.6, "head 1"), (1.75, "head 2"), (3.8, "head H")]
    for cx, name in columns:
        d.arrow((2.1, 0.51), (cx, 1.13))
        for dx, letter, role in [
            (-0.31, "q", "query"),
            (0, "k", "key"),
            (0.31, "v", "value"),
        ]:
            d.tensor(cx + dx, 1.3, 0.28, 0.34, letter, role)
        d.arrow((cx, 1.47), (cx, 1.84))
        d.operation(cx, 2.05, 0.95, 0.42, name)
        d.arrow((cx, 2.26), (cx, 2.89))
    d.text(2.78, 1.65, "⋯")
    d.text(2.78, 2.58, "each\n(B, T, d_head)", mono=True)
    steps = [
        ("concatenate the heads (last dim)", "(B, T, D)"),
        (r"output Linear $W^O$: D → D", "(B, T, D)"),
    ]
    _chain(d, 2.2, 3.1, steps, 3.4)
    return d


def mha_fused() -> Diagram:
    """Fused view: one projection for all heads, a reshape, one batched attention, reshape back."""
    d = Diagram(4.5, 7.5)
    spine, op_w = 1.55, 2.7
    d.tensor(spine, 0.3, 1.0, 0.42, "x")
    d.arrow((spine, 0.51), (spine, 0.94), label="(B, T, D)")
    d.operation(spine, 1.15, op_w, 0.42, "one Linear: D → 3D")
    for cx, letter, role in [
        (0.7, "q", "query"),
        (1.55, "k", "key"),
        (2.4, "v", "value"),
    ]:
        d.arrow((spine, 1.36), (cx, 1.8), role=role)
        d.tensor(cx, 2.0, 0.7, 0.4, letter, role)
        d.arrow((cx, 2.2), (cx, 2.64), role=role)
    d.text(2.85, 2.0, "3 × (B, T, D)", mono=True, ha="left")
    steps = [
        ("view(B, T, H, d_head)", "(B, T, H, d_head)"),
        ("transpose(1, 2)", "(B, H, T, d_head)"),
        ("attention, all heads at once", "(B, H, T, d_head)"),
        ("transpose(1, 2), reshape", "(B, T, D)"),
        (r"output Linear $W^O$: D → D", "(B, T, D)"),
    ]
    _chain(d, spine, 2.85, steps, op_w)
    return d


# ------------------------------------------------------------------ chapter 5
def positional_encoding() -> Diagram:
    """Embedding plus position at four positions; two pairs of dimensions as turning hands."""
    d_model, tokens = 8, [7, 2, 9, 4]
    speeds = [
        10000 ** (-2 * j / d_model) for j in range(d_model // 2)
    ]  # 1, 0.1, 0.01, 0.001
    position = [
        [f(t * w) for w in speeds for f in (math.sin, math.cos)]
        for t in range(4)
    ]
    # Made-up embedding entries in [-1, 1], one row per token, for the picture only.
    embedding = (
        np.random.default_rng(0).uniform(-1, 1, (len(tokens), d_model)).round(1)
    )

    def strip(x, y, vector, bound):
        shades = [[(v + bound) / (2 * bound) for v in vector]]
        d.cells(
            x - 0.36,
            y - 0.11,
            shades,
            cell=(0.09, 0.22),
            cmap="RdBu_r",
            labels=False,
        )

    d = Diagram(4.5, 5.45)
    d.text(
        0.05,
        0.2,
        "Input = token embedding + position",
        ha="left",
        weight="bold",
    )
    for label, y in [
        ("token", 0.9),
        ("embedding", 1.35),
        ("+ position", 1.75),
        ("= input", 2.15),
    ]:
        d.text(0.05, y, label, ha="left")
    for t, (cx, token) in enumerate(
        zip([1.55, 2.35, 3.15, 3.95], tokens, strict=True)
    ):
        d.text(cx, 0.55, f"t={t}")
        d.tensor(cx, 0.9, 0.45, 0.36, str(token))
        strip(cx, 1.35, embedding[t], 1.0)
        strip(cx, 1.75, position[t], 1.0)
        strip(cx, 2.15, embedding[t] + np.array(position[t]), 2.0)

    d.text(
        0.05, 2.75, "Each pair turns at its own speed", ha="left", weight="bold"
    )
    radius, cy = 0.68, 3.9
    for cx, pair, every in [(1.15, 0, 1), (3.35, 1, 10)]:
        # The slow pair is drawn every 10 positions: it needs 10 steps to turn as far.
        d.circle(cx, cy, radius, role="mask", lw=1.2)
        for t in range(0, 6 * every, every):
            angle = t * speeds[pair]
            d.circle(
                cx + radius * math.sin(angle),
                cy - radius * math.cos(angle),
                0.05,
                fill=INK,
            )
            lx = cx + (radius + 0.22) * math.sin(angle)
            d.text(lx, cy - (radius + 0.22) * math.cos(angle), str(t))
        angle = 2 * every * speeds[pair]
        d.arrow(
            (cx, cy),
            (cx + radius * math.sin(angle), cy - radius * math.cos(angle)),
        )
        d.text(cx, cy + radius + 0.45, f"dims {2 * pair}, {2 * pair + 1}")
        d.text(cx, cy + radius + 0.7, f"{speeds[pair]:g} rad per step")
    return d


# ------------------------------------------------------------------ chapters 6 and 7
def _block_column(d, cx, title, items):
    """One encoder block down a spine at ``cx``: ``items`` are (kind, label) with kind one of
    "op", "dropout", "branch" (the residual path leaves here) and "add" (and joins here)."""
    d.text(cx, 0.2, title, weight="bold")
    d.tensor(cx, 0.6, 0.6, 0.36, "x")
    y, previous_bottom, branch_y = 0.95, 0.78, None
    residual_x = cx + 0.98
    for kind, label in items:
        if kind == "branch":
            d.line([(cx, previous_bottom), (cx, y)])
            d.circle(
                cx, y, 0.045, role="residual", fill=ROLE_COLOURS["residual"]
            )
            branch_y, previous_bottom = y, y
            y += 0.27
            continue
        half = 0.14 if kind == "add" else 0.17
        d.arrow((cx, previous_bottom), (cx, y - half))
        if kind == "add":
            d.circle(cx, y, half, role="residual", fill="white")
            d.text(cx, y - 0.01, "+", colour=ROLE_COLOURS["residual"])
            d.line(
                [(cx, branch_y), (residual_x, branch_y), (residual_x, y)],
                role="residual",
            )
            d.arrow((residual_x, y), (cx + half, y), role="residual")
        else:
            d.operation(cx, y, 1.5, 0.34, label, dashed=kind == "dropout")
        previous_bottom = y + half
        y += 0.53
    d.arrow((cx, previous_bottom), (cx, y - 0.18))
    d.tensor(cx, y, 0.8, 0.36, "out")
    return y


def encoder_block() -> Diagram:
    """Post-LN and pre-LN encoder blocks side by side: where norms, dropout and residuals are."""
    d = Diagram(4.5, 6.0)
    post = [("branch", ""), ("op", "attention"), ("dropout", "dropout"), ("add", ""),
            ("op", "LayerNorm"), ("branch", ""), ("op", "feed-forward"),
            ("dropout", "dropout"), ("add", ""), ("op", "LayerNorm")]  # fmt: skip
    pre = [("branch", ""), ("op", "LayerNorm"), ("op", "attention"), ("dropout", "dropout"),
           ("add", ""), ("branch", ""), ("op", "LayerNorm"), ("op", "feed-forward"),
           ("dropout", "dropout"), ("add", "")]  # fmt: skip
    _block_column(d, 0.95, "post-LN (2017)", post)
    _block_column(d, 3.2, "pre-LN (default)", pre)
    return d


def encoder_stack() -> Diagram:
    """Chapter 7's model: embedding, positions, L pre-LN blocks, final norm, classifier."""
    d = Diagram(4.5, 6.3)
    spine, step = 1.6, 0.8
    d.tensor(spine, 0.3, 1.3, 0.42, "tokens")
    steps = [
        ("embedding: C → D", "(B, T, D)"),
        ("+ positional encoding", "(B, T, D)"),
        ("dropout", "(B, T, D)"),
        ("L × pre-LN encoder block", "(B, T, D)"),
        ("final LayerNorm", "(B, T, D)"),
        ("Linear: D → C", "(B, T, C)"),
    ]
    d.arrow((spine, 0.51), (spine, 0.89), label="(B, T)")
    _chain(d, spine, 1.1, steps, 2.6, step=step, output="logits")
    return d


# ------------------------------------------------------------------ chapter 8
def _visible_inputs(model, length=100, position=50) -> list[bool]:
    """Which input positions the output at ``position`` depends on, measured by a gradient."""
    torch.manual_seed(0)
    probe = torch.randn(1, 1, length, requires_grad=True)
    model(probe)[0, 0, position].backward()
    return (probe.grad[0, 0] != 0).tolist()


def _bar(d, y, visible, x0=0.3, length=3.9, height=0.26):
    """The input positions as a bar: runs that the output sees in the key colour, others grey."""
    step = length / len(visible)
    start = 0
    for end in range(1, len(visible) + 1):
        if end == len(visible) or visible[end] != visible[start]:
            role = "key" if visible[start] else "mask"
            d.tensor(
                x0 + (start + end) / 2 * step,
                y,
                (end - start) * step,
                height,
                "",
                role,
            )
            start = end
    return lambda position: x0 + (position + 0.5) * step


def what_each_position_sees() -> Diagram:
    """Chapter 8's three models: which inputs the output at position 50 of 100 depends on."""
    from helpers.tasks.shapes import (
        ShapesLSTM,
        make_shapes_attention_model,
        make_shapes_cnn,
    )

    models = [
        ("CNN", make_shapes_cnn()),
        ("CNN + attention", make_shapes_attention_model()),
        ("bidirectional LSTM", ShapesLSTM()),
    ]
    d = Diagram(4.5, 5.05)
    top = 0.0
    for name, model in models:
        visible = _visible_inputs(model)
        d.text(0.05, top + 0.2, f"{name}: {sum(visible)} of {len(visible)} inputs", ha="left",
               weight="bold")  # fmt: skip
        bar_y = top + 0.95
        x_of = _bar(d, bar_y, visible)
        d.text(x_of(0), top + 0.48, "0")
        d.text(x_of(99), top + 0.48, "99")
        d.text(x_of(50), top + 0.48, "output 50", colour=ROLE_COLOURS["query"])
        d.arrow((x_of(50), top + 0.6), (x_of(50), bar_y - 0.13), role="query")
        below = bar_y + 0.13
        if name == "CNN":
            d.text(x_of(50), below + 0.22, "5 convolutions of width 5: ±10")
            top += 1.55
        elif name == "CNN + attention":
            for source in (
                5,
                30,
                75,
                95,
            ):  # arcs below the bar, into the output position
                rad = 0.35 if source < 50 else -0.35
                d.arrow(
                    (x_of(source), below),
                    (x_of(50), below),
                    role="key",
                    rad=rad,
                )
            d.text(x_of(50), below + 0.55, "one step to any position")
            top += 1.85
        else:
            d.arrow(
                (x_of(0), below + 0.15),
                (x_of(50) - 0.05, below + 0.15),
                role="key",
            )
            d.arrow(
                (x_of(99), below + 0.15),
                (x_of(50) + 0.05, below + 0.15),
                role="key",
            )
            d.text(x_of(25), below + 0.4, "forward: 50 steps")
            d.text(x_of(75), below + 0.4, "backward: 49 steps")
    return d


# ------------------------------------------------------------------ chapter 9
def encoder_decoder() -> Diagram:
    """The encoder reads the source once; the decoder reads the shifted target under a causal
    mask and asks the encoder's output (keys, values) with its own queries."""
    d = Diagram(4.5, 6.2)
    enc, dec, op_w = 1.05, 3.2, 1.75
    d.text(enc, 0.2, "encoder", weight="bold")
    d.text(dec, 0.2, "decoder", weight="bold")
    d.tensor(enc, 0.75, 1.6, 0.5, "source\nx1 x2 x3 x4")
    d.tensor(dec, 0.75, 1.9, 0.5, "target, shifted\n<bos> y1 y2 y3")
    for cx in (enc, dec):
        d.arrow((cx, 1.0), (cx, 1.34))
        d.operation(cx, 1.55, op_w, 0.42, "embed + position")
    d.arrow((enc, 1.76), (enc, 2.19))
    d.operation(enc, 2.4, op_w, 0.42, "L × enc. block")
    d.arrow((enc, 2.61), (enc, 3.06))
    d.tensor(enc, 3.3, 1.3, 0.48, "memory\n(B, Ts, D)")

    # One decoder block, repeated L times (residuals and norms as in chapter 6).
    d.line(
        [(2.25, 2.0), (4.42, 2.0), (4.42, 4.65), (2.25, 4.65), (2.25, 2.0)],
        dashed=True,
    )
    d.text(4.15, 4.5, "×L")
    d.arrow((dec, 1.76), (dec, 2.2))
    d.operation(dec, 2.5, op_w, 0.6, "causal\nself-attention", "mask")
    d.arrow((dec, 2.8), (dec, 3.09), role="query")
    d.operation(dec, 3.3, op_w, 0.42, "cross-attention")
    d.arrow((enc + 0.65, 3.22), (dec - op_w / 2, 3.22), role="key")
    d.arrow((enc + 0.65, 3.38), (dec - op_w / 2, 3.38), role="value")
    d.text(2.02, 3.03, "K, V")
    d.arrow((dec, 3.51), (dec, 3.89))
    d.operation(dec, 4.1, op_w, 0.42, "feed-forward")
    d.arrow((dec, 4.31), (dec, 4.89))
    d.operation(dec, 5.1, op_w, 0.42, "Linear → logits")
    d.arrow((dec, 5.31), (dec, 5.59))
    d.tensor(dec, 5.85, 1.9, 0.5, "predicted\ny1 y2 y3 <eos>")
    return d


# ------------------------------------------------------------------ chapter 10
def decoder_only() -> Diagram:
    """Chapter 10's GPT: token and position embeddings, L causal pre-norm blocks, a final
    norm and a head that shares the embedding matrix; the causal mask beside the attention."""
    d = Diagram(4.5, 6.4)
    spine, op_w = 1.75, 2.1
    d.tensor(spine, 0.3, 2.2, 0.42, "tokens t0 … t(T−1)")
    d.arrow((spine, 0.51), (spine, 0.74), label="(B, T)")
    d.operation(spine, 0.95, op_w, 0.42, "embedding V → D")
    d.arrow((spine, 1.16), (spine, 1.44))
    d.operation(spine, 1.65, op_w, 0.42, "+ learned positions")
    d.arrow((spine, 1.86), (spine, 2.42), label="(B, T, D)")
    # One block, repeated L times (pre-norm: RMSNorm before each sublayer, residuals around).
    d.line(
        [(0.55, 2.25), (2.95, 2.25), (2.95, 4.3), (0.55, 4.3), (0.55, 2.25)],
        dashed=True,
    )
    d.text(2.75, 4.1, "×L")
    d.operation(
        spine, 2.7, op_w, 0.56, "RMSNorm, causal\nself-attention", "mask"
    )
    d.arrow((spine, 2.98), (spine, 3.3))
    d.operation(spine, 3.58, op_w, 0.56, "RMSNorm,\nfeed-forward")
    d.text(spine, 4.08, "each with a residual")
    causal = [[j <= i for j in range(4)] for i in range(4)]
    colours = [[tint(ROLE_COLOURS["key"]) if ok else ROLE_COLOURS["mask"] for ok in row]
               for row in causal]  # fmt: skip
    d.text(3.73, 2.1, "causal mask")
    d.cells(3.25, 2.3, causal, cell=(0.24, 0.24), colours=colours, labels=False)
    d.arrow((3.2, 2.7), (spine + op_w / 2, 2.7), role="mask")
    d.text(3.73, 3.45, "query t sees")
    d.text(3.73, 3.7, "keys 0 … t")
    d.arrow((spine, 4.3), (spine, 4.64), label="(B, T, D)")
    d.operation(spine, 4.85, op_w, 0.42, "final RMSNorm")
    d.arrow((spine, 5.06), (spine, 5.34))
    d.operation(spine, 5.55, op_w, 0.42, "Linear D → V")
    d.arrow((spine, 5.76), (spine, 5.99), label="(B, T, V)")
    d.tensor(spine, 6.15, 2.6, 0.3, "logits: token t + 1")
    # Weight tying: the head reuses the embedding's V × D matrix.
    left = spine - op_w / 2
    d.line([(left, 5.55), (0.25, 5.55), (0.25, 0.95)], dashed=True)
    d.arrow((0.25, 0.95), (left, 0.95), dashed=True)
    d.text(0.12, 3.2, "tied: one V × D matrix", rotation=90)
    return d


def kv_cache() -> Diagram:
    """Decoder-only attention: a causal mask in training, a cache and one new row in generation."""
    d = Diagram(4.5, 5.5)
    size, cell = 5, 0.3
    d.text(
        0.05,
        0.2,
        "Training: all positions, causal mask",
        ha="left",
        weight="bold",
    )
    d.text(1.1, 0.55, "keys 0 … 4")
    d.text(0.2, 1.35, "queries 0 … 4", rotation=90)
    causal = [[j <= i for j in range(size)] for i in range(size)]
    colours = [[tint(ROLE_COLOURS["key"]) if ok else ROLE_COLOURS["mask"] for ok in row]
               for row in causal]  # fmt: skip
    d.cells(
        0.35, 0.72, causal, cell=(cell, cell), colours=colours, labels=False
    )
    last_row_y = 0.72 + (size - 1) * cell
    # The row that generation computes at step 4, outlined in the query colour.
    d.tensor(0.35 + size * cell / 2, last_row_y + cell / 2, size * cell, cell, "", "query",
             filled=False)  # fmt: skip
    legend = ["row t: query t sees", "keys 0 … t (orange);", "grey: masked.", "One pass trains all",
              "T predictions."]  # fmt: skip
    for i, line in enumerate(legend):
        d.text(2.1, 0.85 + i * 0.26, line, ha="left")

    d.text(
        0.05, 2.55, "Generation: a key/value cache", ha="left", weight="bold"
    )
    d.tensor(0.5, 3.25, 0.7, 0.42, "q4", "query")
    for j in range(size):
        new = j == size - 1
        x = 1.45 + j * 0.55
        d.tensor(x, 3.0, 0.48, 0.38, f"k{j}", "key", dashed=new)
        d.tensor(x, 3.5, 0.48, 0.38, f"v{j}", "value", dashed=new)
    d.arrow((0.85, 3.2), (1.19, 3.05), role="query")
    d.text(4.05, 3.0, "new", ha="left")
    d.text(4.05, 3.5, "new", ha="left")
    d.text(2.28, 4.0, "cache: k0 … k3, v0 … v3 reused")
    explanation = [
        "Step 4 computes q, k, v of the new token",
        "only, appends k4 and v4 to the cache,",
        "and attends over all five: the last row",
        "of the mask above, with nothing masked.",
    ]
    for i, line in enumerate(explanation):
        d.text(0.05, 4.45 + i * 0.26, line, ha="left")
    return d


# ------------------------------------------------------------------ every chapter
# The book's map of the Transformer: the encoder and the decoder of the original paper, one
# block of each (repeated L times), and the parts a chapter teaches filled in the query colour.
MAP_PARTS = {
    "01_kernel_regression": {"enc_attn", "dec_mattn", "dec_xattn"},
    "02_masking": {"enc_attn", "dec_mattn", "dec_xattn"},
    "03_scaled_dot_product_attention": {"enc_attn", "dec_mattn", "dec_xattn"},
    "04_multi_head_attention": {"enc_attn", "dec_mattn", "dec_xattn"},
    "05_positional_encoding": {"enc_emb", "dec_emb"},
    "06_encoder": {"enc_attn", "enc_norm1", "enc_ffn", "enc_norm2"},
    "07_reverse_prediction": {
        "enc_in", "enc_emb", "enc_attn", "enc_norm1", "enc_ffn", "enc_norm2", "enc_head",
    },
    "08_cnn_attention_lstm": {"enc_attn"},
    "09_encoder_decoder": {
        "dec_in", "dec_emb", "dec_mattn", "dec_xattn", "dec_ffn", "dec_head", "memory",
    },
    "10_decoder_only_lm": {"dec_in", "dec_emb", "dec_mattn", "dec_ffn", "dec_head"},
    "11_generation_cost": {"dec_in", "dec_emb", "dec_mattn", "dec_ffn", "dec_head"},
    "12_shakespeare_gpt": {"dec_in", "dec_emb", "dec_mattn", "dec_ffn", "dec_head"},
    "13_long_sequences": {"enc_attn", "dec_mattn", "dec_xattn"},
    "14_vision_transformer": {
        "enc_in", "enc_emb", "enc_attn", "enc_norm1", "enc_ffn", "enc_norm2", "enc_head",
    },
}  # fmt: skip


def transformer_map(chapter: str) -> Diagram:
    """The whole Transformer, with the boxes of ``chapter`` (a ``MAP_PARTS`` key) filled."""
    lit = MAP_PARTS[chapter]
    d = Diagram(4.5, 5.75)
    enc, dec, box_w = 0.98, 3.46, 1.7
    frames = ((0.06, 1.9), (2.56, 4.36))

    def box(name, x, y, label, h=0.42, dashed=False):
        role = "query" if name in lit else None
        d.tensor(x, y, box_w, h, label, role, dashed=dashed)
        return y + h / 2

    d.text(enc, 0.22, "encoder", weight="bold")
    d.text(dec, 0.22, "decoder", weight="bold")
    box("enc_in", enc, 0.72, "tokens or\npatches", h=0.55)
    box("dec_in", dec, 0.72, "tokens so far", h=0.55)
    for cx, name in ((enc, "enc_emb"), (dec, "dec_emb")):
        d.arrow((cx, 1.0), (cx, 1.26))
        box(name, cx, 1.52, "embed +\nposition", h=0.55)
        d.arrow((cx, 1.8), (cx, 2.1))
    # One block of each, repeated L times: dashed frames.
    for left, right in frames:
        d.line(
            [
                (left, 1.95),
                (right, 1.95),
                (right, 4.85),
                (left, 4.85),
                (left, 1.95),
            ],
            dashed=True,
        )
    encoder = [
        ("enc_attn", "self-attention"),
        ("enc_norm1", "add & norm"),
        ("enc_ffn", "feed-forward"),
        ("enc_norm2", "add & norm"),
    ]
    y = 2.31
    for name, label in encoder:
        bottom = box(name, enc, y, label)
        if name != encoder[-1][0]:
            d.arrow((enc, bottom), (enc, bottom + 0.23))
        y += 0.65
    d.text(enc, 4.64, "×L")
    decoder = [
        ("dec_mattn", "masked\nself-attention", 0.62),
        ("dec_xattn", "cross-\nattention", 0.62),
        ("dec_ffn", "feed-forward", 0.42),
    ]
    y = 2.41
    for name, label, h in decoder:
        bottom = box(name, dec, y, label, h=h)
        if name == "dec_xattn":
            cross_y = y
        if name != decoder[-1][0]:
            d.arrow((dec, bottom), (dec, bottom + 0.22))
            y = (
                bottom
                + 0.22
                + decoder[[n for n, *_ in decoder].index(name) + 1][2] / 2
            )
    d.text(dec - 0.22, 4.55, "add & norm\nafter each", ha="center")
    d.text(dec + 0.7, 4.64, "×L")
    # The encoder's output: the keys and values of the decoder's cross-attention.
    memory = "key" if "memory" in lit else None
    d.arrow((frames[0][1], cross_y), (dec - box_w / 2, cross_y), role=memory)
    d.text((frames[0][1] + dec - box_w / 2) / 2, cross_y - 0.22, "K, V")
    d.arrow((enc, 4.85), (enc, 5.18))
    box("enc_head", enc, 5.42, "linear\n(per token)", h=0.55, dashed=True)
    d.arrow((dec, 4.85), (dec, 5.18))
    box("dec_head", dec, 5.42, "linear →\nnext token", h=0.55)
    return d


DIAGRAMS = {
    "soft_lookup": (soft_lookup, "01_kernel_regression"),
    "scaled_dot_product_attention": (
        scaled_dot_product_attention,
        "03_scaled_dot_product_attention",
    ),
    "mha_per_head": (mha_per_head, "04_multi_head_attention"),
    "mha_fused": (mha_fused, "04_multi_head_attention"),
    "positional_encoding": (positional_encoding, "05_positional_encoding"),
    "encoder_block": (encoder_block, "06_encoder"),
    "encoder_stack": (encoder_stack, "07_reverse_prediction"),
    "what_each_position_sees": (
        what_each_position_sees,
        "08_cnn_attention_lstm",
    ),
    "encoder_decoder": (encoder_decoder, "09_encoder_decoder"),
    "decoder_only": (decoder_only, "10_decoder_only_lm"),
    "kv_cache": (kv_cache, "11_generation_cost"),
    **{
        f"map_{chapter[:2]}": (lambda c=chapter: transformer_map(c), chapter)
        for chapter in MAP_PARTS
    },
}


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(DIAGRAMS))
    if unknown:
        raise SystemExit(
            f"unknown diagrams {unknown}; known: {sorted(DIAGRAMS)}"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or DIAGRAMS:
        draw, _chapter = DIAGRAMS[name]
        print(
            draw()
            .save(OUT / f"{name}.svg")
            .relative_to(OUT.parent.parent.parent)
        )


if __name__ == "__main__":
    main(sys.argv[1:])
