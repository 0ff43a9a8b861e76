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
# # A small decoder-only language model
#
# The models people use every day to write text are *decoder-only*: one stack of causal
# blocks, no encoder, trained to predict the next token of a sequence, as GPT-2
# {cite}`radford2019language`. This chapter builds one from the pieces of chapters 2-6
# (the Transformer {cite}`vaswani2017attention` without its encoder): tokens and their
# embedding table, positions, masked multi-head attention, pre-norm blocks with RMSNorm
# {cite}`zhang2019rmsnorm`, an output head tied to the embedding.
# It counts its parameters against GPT-2's published size, trains it on a small formal
# language whose strings a program can check, samples from it greedily, with a temperature
# and with top-$k$, and measures what it learned against the language's exact entropy (the
# loss no model can beat) and an $n$-gram model fitted to the same data. Last, it decodes
# incrementally with a key/value cache and measures what the
# cache saves.

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
import importlib
import inspect
import math
import re
import time
import warnings
from collections import Counter

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

# %%
from helpers import expect_error, glue, show_source
from helpers.analysis import DispatchCounter, count_parameters, parameter_table
from helpers.attention import causal_mask
from helpers.checks import check_sampling_distribution
from helpers.efficient import kv_cache_bytes, median_seconds
from helpers.gpt import (
    GPT,
    CausalSelfAttention,
    GPTBlock,
    GPTConfig,
    next_token_probabilities,
    score_bias,
    top_k_filter,
)
from helpers.interop import load_gpt2
from helpers.tasks.brackets import (
    ALPHABET,
    BracketConfig,
    NGramModel,
    closing_accuracy,
    decode,
    entropy_rate,
    generator_loss,
    gpt_probabilities,
    is_balanced,
    make_rows,
    make_strings,
    packed_generator_loss,
    per_token_loss,
    sample_strings,
    train_brackets,
    validity_rate,
)
from helpers.transformer import EncoderBlock, TransformerEncoder

helpers.use_one_thread(device)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# %% [markdown]
# ## Tokens
#
# A language model reads integers. The simplest way to turn text into integers is one token
# per character: the vocabulary is the set of characters the text uses, and a token's id is
# its index in that set. We need a text: the book's own prose, the docstrings of the
# `helpers` package that every chapter builds (they ship with the package, so nothing is
# downloaded). They change whenever the book's code does, so the counts below are printed
# in cells whose output is not compared between runs, and only relations between them are
# asserted.


# %% tags=["nbval-ignore-output"]
def docstrings(module) -> list[str]:
    """The docstrings of a module and of every class and function it defines."""
    parts = [inspect.getdoc(module) or ""]
    for _, member in inspect.getmembers(module):
        defined_here = getattr(member, "__module__", None) == module.__name__
        if defined_here and (
            inspect.isclass(member) or inspect.isfunction(member)
        ):
            parts.append(inspect.getdoc(member) or "")
    return parts


names = [
    "attention",
    "positional",
    "transformer",
    "training",
    "analysis",
    "gpt",
]
modules = [
    helpers,
    *(importlib.import_module(f"helpers.{name}") for name in names),
]
text = "\n\n".join(part for module in modules for part in docstrings(module))
split = int(0.8 * len(text))
fitting_text, held_out_text = text[:split], text[split:]
print(f"{len(text):,} characters: 80% to fit tokenizers, 20% to measure them")

# %% tags=["nbval-ignore-output"]
characters = sorted(set(text))
char_to_id = {char: index for index, char in enumerate(characters)}


def encode_chars(text: str) -> list[int]:
    return [char_to_id[char] for char in text]


def decode_chars(ids: list[int]) -> str:
    return "".join(characters[index] for index in ids)


ids = encode_chars("softmax(q k^T)")
print(ids)
assert decode_chars(encode_chars(text)) == text
glue("ch10_num_characters", len(characters))
glue("ch10_text_length", f"{len(text):,}")

# %% [markdown]
# The whole text, {glue:text}`ch10_text_length` characters, uses
# {glue:text}`ch10_num_characters` distinct ones. Character tokens make a tiny vocabulary
# and long sequences: a model with a context of 1,024 tokens sees about a page.
#
# A *subword* tokenizer trades the other way: a larger vocabulary whose tokens are frequent
# chunks (`" the"`, `"tion"`, `"attention"`), so the same text becomes fewer tokens. GPT-2's
# tokenizer is byte-pair encoding (BPE) {cite}`sennrich2016bpe` with 50,257 tokens
# {cite}`radford2019language`. BPE starts from characters and
# repeatedly merges the most frequent adjacent pair into a new token. A small version fits in
# a cell: words (with their leading space) are split into characters, and each merge is
# applied inside words only, as GPT-2's does.


# %%
def words_of(text: str) -> list[str]:
    return re.findall(r" ?\w+| ?[^\w\s]+|\s+", text)


def merge_pair(symbols: list[str], pair: tuple[str, str]) -> list[str]:
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def learn_bpe(text: str, num_merges: int) -> list[tuple[str, str]]:
    word_counts = Counter(words_of(text))
    splits = {word: list(word) for word in word_counts}
    merges = []
    for _ in range(num_merges):
        pairs = Counter()
        for word, count in word_counts.items():
            for pair in zip(splits[word], splits[word][1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = max(
            pairs, key=pairs.get
        )  # most frequent pair; the first seen wins ties
        merges.append(best)
        for word in word_counts:
            if best[0] in splits[word]:
                splits[word] = merge_pair(splits[word], best)
    return merges


# %%
def bpe_tokens(text: str, merges: list[tuple[str, str]]) -> list[str]:
    """Split each word into characters, then apply the merges in the order they were learned."""
    cache, tokens = {}, []
    for word in words_of(text):
        if word not in cache:
            symbols = list(word)
            for pair in merges:
                if pair[0] in symbols:
                    symbols = merge_pair(symbols, pair)
            cache[word] = symbols
        tokens.extend(cache[word])
    return tokens


merges = learn_bpe(fitting_text, 1000)
print(len(merges), "merges learned")
assert (
    "".join(bpe_tokens(held_out_text, merges)) == held_out_text
)  # nothing lost

# %% [markdown]
# Now the trade-off, measured on the held-out fifth of the text (the merges were learned on
# the rest). The vocabulary is the characters plus one token per merge; the embedding
# column counts a $D = 64$ table:

# %% tags=["nbval-ignore-output"]
rows = []
for num_merges in (0, 100, 300, 1000):
    tokens = bpe_tokens(held_out_text, merges[:num_merges])
    vocab_size = len(characters) + num_merges
    rows.append({"merges": num_merges, "vocabulary": vocab_size, "tokens": len(tokens),
                 "characters per token": round(len(held_out_text) / len(tokens), 2),
                 "embedding (D=64)": vocab_size * 64})  # fmt: skip
bpe_table = pd.DataFrame(rows)
lengths = bpe_table["tokens"].tolist()
assert lengths == sorted(lengths, reverse=True) and lengths[-1] < lengths[0] / 2
glue("ch10_bpe_ratio", round(lengths[0] / lengths[-1], 1))
glue("ch10_bpe_vocab", int(bpe_table["vocabulary"].iloc[-1]))
bpe_table

# %% [markdown]
# With {glue:text}`ch10_bpe_vocab` tokens the held-out text is
# {glue:text}`ch10_bpe_ratio` times shorter than in characters: a model with the same
# context sees that much more text, and attention, whose cost grows with the square of the
# length, gets cheaper. The price is paid in the embedding table, which grows with the
# vocabulary, and in rare tokens, each of which the model sees seldom.
#
# ## The embedding table's memory
#
# The first layer of a language model is a table of one $D$-dimensional vector per token,
# $V \times D$ numbers. For a GPT-2-sized vocabulary it is large, and it grows with the
# width:

# %%
V_GPT2 = 50_257  # GPT-2's vocabulary
V_PADDED = math.ceil(V_GPT2 / 64) * 64  # rounded up to the next multiple of 64
assert V_PADDED == 50_304 and V_PADDED - V_GPT2 == 47
memory = pd.DataFrame(
    [{"width D": D, "parameters": V_PADDED * D,
      "float32 (MB)": round(V_PADDED * D * 4 / 1e6, 1),
      "bfloat16 (MB)": round(V_PADDED * D * 2 / 1e6, 1)} for D in (768, 1024, 4096, 8192)]
)  # fmt: skip
table_bytes = V_PADDED * 4096 * 4
glue("ch10_table_mb", round(table_bytes / 1e6))
glue("ch10_table_mib", round(table_bytes / 2**20))
glue("ch10_position_share", f"{1024 * 768 / (V_GPT2 * 768):.1%}")
memory

# %% [markdown]
# At $D = 4096$ in float32 the table takes {glue:text}`ch10_table_mb` MB
# ({glue:text}`ch10_table_mib` MiB), the figure
# {ref}`the blog post "Learning the Transformer" <source-002>` computes in bits. A learned
# *position* table is small beside it: it has one row per position, not per token, so
# GPT-2's 1,024 positions are {glue:text}`ch10_position_share` of its token table (the post
# suggests the opposite, that learning positions costs memory the way the token table does).
#
# ### Padding the vocabulary to a multiple of 64
#
# The same post rounds the vocabulary up from 50,257 to 50,304, the next multiple of 64
# (50,304 = 786 x 64), and nanoGPT does the same, "padded up to nearest multiple of 64 for
# efficiency" in the words of its configuration {cite}`karpathy2022nanogpt`. The reason
# given is the hardware: a matrix product is computed in tiles, and an output width that is
# not a multiple of the tile leaves a ragged last tile that takes as long as a full one or
# pushes the kernel onto a slower path. The extra 47 rows are never used: no token has their
# ids, and the loss only ever pushes their logits down.
# (The post gives a second reason, that the vocabulary must be even for the sine/cosine
# table: that table's width is the model width $D$, not the vocabulary, so the vocabulary's
# parity plays no part.)
#
# Does it matter on this CPU? We time the output head, the largest matrix product of a small
# GPT, at four widths: GPT-2's odd 50,257, one more (even), one fewer (a multiple of 16) and
# the padded 50,304:


# %% tags=["nbval-ignore-output"]
def head_seconds(vocab_sizes: tuple[int, ...], repeats: int = 5) -> list[float]:
    """The fastest of ``repeats`` timings of the head, for each size, the sizes interleaved."""
    hidden = torch.randn(48, 768)  # 48 positions of width 768
    weights = [torch.randn(vocab_size, 768) for vocab_size in vocab_sizes]
    best = [math.inf] * len(vocab_sizes)
    for _ in range(repeats):
        for index, weight in enumerate(weights):
            start = time.perf_counter()
            F.linear(hidden, weight)
            best[index] = min(best[index], time.perf_counter() - start)
    return best


widths = (V_GPT2, V_GPT2 + 1, V_GPT2 - 1, V_PADDED)
seconds = dict(zip(widths, head_seconds(widths), strict=True))
ratios = {width: seconds[width] / seconds[V_GPT2] for width in widths}
print(
    ", ".join(
        f"{w:,}: {t * 1e3:.0f} ms ({ratios[w]:.2f})" for w, t in seconds.items()
    )
)
glue("ch10_pad_ratio", round(ratios[V_PADDED], 2))
glue("ch10_even_ratio", round(ratios[V_GPT2 - 1], 2))
glue("ch10_plus_one_ratio", round(ratios[V_GPT2 + 1], 2))
# Timings of one run on a shared machine: no claim is asserted; the verdict is computed from
# this run's timings (a difference under 5% counts as none), and the prose quotes it.
faster = [f"{w:,}" for w in widths[1:] if ratios[w] < 0.95]
if not faster:
    verdict = "this machine's kernels did not care about the width"
else:
    verdict = f"{', '.join(faster)} beat the odd width by 5% or more"
    if ratios[V_PADDED] > 0.95 * ratios[V_GPT2 - 1]:
        verdict += (
            ", and the multiple of 64 did no better than the multiple of 16"
        )
glue("ch10_pad_verdict", verdict)

# %% [markdown]
# When this page was computed, the padded head took {glue:text}`ch10_pad_ratio` times as
# long as the exact one, one column *fewer* (50,256, a multiple of 16)
# {glue:text}`ch10_even_ratio` times and one column more (50,258)
# {glue:text}`ch10_plus_one_ratio` times: {glue:text}`ch10_pad_verdict`. Each is the best
# of five timings from one run on a shared CPU, not a margin measured over runs, and
# another CPU's matrix kernels may behave differently: run the cell on yours. On GPUs this
# book has measured nothing: the advice to pad to 64 is nanoGPT's, quoted above, and it is
# the reader with a GPU who can check it (time the head's `F.linear` in float16 at these
# four widths, with `torch.cuda.synchronize()` before reading the clock). The book's small
# models below keep their exact vocabulary: with 7 tokens, the head is not where their time
# goes.
#
# ## A language a program can check
#
# To say what a model *learned*, we need text whose rules are known. Our language is
# balanced brackets of three kinds: every `(`, `[` or `{` is closed, later, by its own
# closing bracket, and brackets close in the reverse order they opened. `([]{})` belongs to
# the language; `([)]` (crossed) and `(()` (unclosed) do not. A model that writes valid
# strings must keep a stack in its activations: which brackets are open, in which order. An
# $n$-gram model that sees only the last few characters cannot, once the bracket to close was
# opened further back. The strings are random walks of 1 to 16 pairs, nested at most 8 deep:

# %%
train_strings = make_strings(10_000, seeded(1))
val_strings = make_strings(1_000, seeded(2))
for example in train_strings[:4]:
    print(example)
assert all(map(is_balanced, train_strings + val_strings))
assert not any(map(is_balanced, ["([)]", "(()", "", "())(", "(]"]))
glue("ch10_num_train", f"{len(train_strings):,}")
glue("ch10_num_val", f"{len(val_strings):,}")
glue(
    "ch10_mean_length",
    round(sum(map(len, train_strings)) / len(train_strings), 1),
)

# %% [markdown]
# `is_balanced` is the language's checker: every string we generated passes it, and the
# crossed, unclosed, empty or misordered strings above fail it. We have
# {glue:text}`ch10_num_train` training strings and {glue:text}`ch10_num_val` validation
# strings (drawn with another seed), {glue:text}`ch10_mean_length` characters long on
# average.
#
# The tokens are the characters, seven of them: a newline, which starts and ends every
# string, and the six brackets. Training rows pack whole strings one after another, each
# ended by a newline, into rows of 64 characters; the input is the row, the target is the row
# shifted by one, so every position is asked for the next character. Positions after the last
# string of a row are padding, whose targets are marked to be ignored by the loss:

# %%
CONTEXT = BracketConfig().context_length
train_rows = make_rows(train_strings, CONTEXT)
val_rows = make_rows(val_strings, CONTEXT)
inputs, targets = train_rows[0]
print(repr("".join(ALPHABET[i] for i in inputs[:24].tolist())))
print(targets[:24].tolist())
assert torch.equal(inputs[1:24], targets[:23])
print(len(train_rows), "training rows,", len(val_rows), "validation rows")

# %% [markdown]
# ## The model
#
# A decoder-only model is the encoder stack of chapter 6 with a causal mask in every
# attention layer, between an embedding at the bottom and a classifier over the vocabulary at
# the top. Position $t$'s output is a distribution over the token at $t + 1$, computed from
# tokens $0..t$ only, so one forward pass over a sequence of $T$ tokens trains $T$
# predictions at once.
#
# ```{figure} ../book/_static/diagrams/decoder_only.svg
# :alt: A vertical chain: tokens, an embedding from V to D, plus learned positions, then a dashed box repeated L times holding RMSNorm with causal self-attention and RMSNorm with a feed-forward network, each with a residual; then a final RMSNorm and a Linear layer from D to V that gives the logits of token t plus 1. Beside the attention, a four by four causal mask, light orange on and below the diagonal and grey above it. A dashed line on the left joins the Linear layer to the embedding, labelled tied: one V by D matrix.
# :name: fig-decoder-only
#
# The decoder-only model. Look at the box repeated $L$ times: it is chapter 6's pre-norm
# block, with the causal mask (right) inside its attention, so position $t$ reads keys
# $0..t$ only. Look also at the two ends: the same $V \times D$ matrix embeds the tokens and
# scores the next one (dashed line), and the output at position $t$ is a distribution over
# token $t + 1$.
# ```
#
# Every size and choice of the model is one configuration, checked once when it is made
# (nanoGPT's layout): the model hands it to each block, and each block to its attention
# layer, which read the fields they need.

# %%
show_source(GPTConfig)

# %% [markdown]
# The attention layer is chapter 4's multi-head attention with the mask built in. It also has
# what chapter 11 needs: fewer key/value heads than query heads (*grouped-query* attention
# {cite}`ainslie2023gqa`, and *multi-query* with one {cite}`shazeer2019mqa`), an optional
# sliding window {cite}`beltagy2020longformer`, RoPE or ALiBi positions from chapter 5, and
# a cache for
# generation (below):

# %%
show_source(CausalSelfAttention)

# %% [markdown]
# What it adds to the scores before the softmax is one function of the query and key
# positions: $-\infty$ where chapter 2's mask forbids a key (later, or outside the window),
# and with ALiBi, chapter 5's penalty $-m_h (i - j)$ on the rest:

# %%
show_source(score_bias)

# %% [markdown]
# A block is the pre-norm block of chapter 6, with RMSNorm: two sublayers, each with its own
# norm and its own residual connection. The model adds a token embedding and (here) a learned
# position embedding, runs the blocks, normalizes once more and maps each position to logits
# with a head that reuses the embedding matrix (*weight tying* {cite}`press2017tying`: the
# same $V \times D$ matrix reads a token in and scores it out, which saves a second table):

# %%
show_source(GPTBlock)

# %%
show_source(GPT.forward)

# %% [markdown]
# The block is chapter 6's `EncoderBlock` (pre-norm, RMSNorm, no biases) with a causal mask:
# its submodules carry the same names, so an encoder block's weights load into it unchanged,
# and the two compute the same function.

# %%
torch.manual_seed(0)
# the defaults: width 64, 4 heads, 2 layers, learned positions
model_config = GPTConfig(vocab_size=len(ALPHABET), context_length=CONTEXT)
encoder_block = EncoderBlock(64, 4, 256, bias=False, norm="rms").eval()
block = GPTBlock(model_config).eval()  # a feed-forward width of 4 x 64 = 256
block.load_state_dict(encoder_block.state_dict())
x = torch.randn(2, 10, 64)
same = torch.allclose(
    block(x), encoder_block(x, mask=causal_mask(10)), atol=1e-5
)
print("GPT block == causal encoder block (within 1e-5):", same)
assert same

# %% [markdown]
# Causality, checked through gradients: the logits at position $t$ must not change when a
# later token changes, so the gradient of position $t$'s logits with respect to every later
# input embedding is exactly zero.

# %%
torch.manual_seed(0)
model = GPT(model_config)
tokens = torch.randint(len(ALPHABET), (1, 12))
embedded = model.token_embedding(tokens).detach().requires_grad_(True)
hook = model.token_embedding.register_forward_hook(lambda *_: embedded)
logits = model(tokens)
hook.remove()
leaks = 0
for t in range(12):
    (gradient,) = torch.autograd.grad(
        logits[0, t].sum(), embedded, retain_graph=True
    )
    leaks += int((gradient[0, t + 1 :] != 0).any())
print("positions whose logits depend on a later token:", leaks)
assert leaks == 0

# %% [markdown]
# An untrained model knows nothing, so its predictions should be close to uniform over the
# seven characters, and its loss close to $\log 7$:

# %%
untrained_loss = per_token_loss(model, val_rows)
near = abs(untrained_loss - math.log(7)) < 0.1
print("untrained loss within 0.1 nats of log 7:", near)
assert near
glue("ch10_log_vocab", round(math.log(7), 2))

# %% [markdown]
# Its weights start small ($\mathcal{N}(0, 0.02^2)$, as GPT-2's), so every logit starts
# near zero and the softmax near uniform: $\log 7 =$ {glue:text}`ch10_log_vocab` nats is
# the loss of a model that has learned nothing, the baseline every curve below starts from.
# (The small logits add a little to it, a few hundredths of a nat.)
#
# Where the parameters are:

# %%
parameter_table(model, max_depth=2)

# %%
glue("ch10_num_parameters", f"{count_parameters(model):,}")
total = count_parameters(model)
attention_share = (
    sum(count_parameters(b.self_attn) for b in model.blocks) / total
)
ffn_share = sum(count_parameters(b.ffn) for b in model.blocks) / total
glue("ch10_ffn_share", f"{ffn_share:.0%}")
glue("ch10_attention_share", f"{attention_share:.0%}")
assert ffn_share > 0.6

# %% [markdown]
# The model has {glue:text}`ch10_num_parameters` parameters; the feed-forward networks hold
# {glue:text}`ch10_ffn_share` of them and attention {glue:text}`ch10_attention_share`. The
# embedding is tiny here (7 rows), and tied: the head has no weights of its own.
#
# ### GPT-2 small, counted
#
# The same class, configured as GPT-2 small, must have GPT-2's parameter count. GPT-2 uses
# LayerNorm (with a bias) rather than RMSNorm, biases in every linear layer and GELU rather
# than ReLU, so its configuration says `norm="layer", bias=True, activation="gelu_tanh"`
# (the activation has no parameters; the count would be the same without it), and
# `residual_init="gpt2"` for GPT-2's initialization (below); the rest is GPT-2's published
# configuration: 50,257
# tokens, 1,024 learned positions, width 768, 12 layers of 12 heads, a feed-forward width of
# $4D$, the head tied to the token embedding. On the `meta` device the model has shapes and
# no memory, so building it costs nothing:

# %%
GPT2_LIKE = dict(
    bias=True, norm="layer", activation="gelu_tanh", residual_init="gpt2"
)
GPT2_SMALL = GPTConfig(vocab_size=50_257, context_length=1024, d_model=768, num_layers=12,
                       num_heads=12, **GPT2_LIKE)  # fmt: skip
with torch.device("meta"):
    gpt2 = GPT(GPT2_SMALL)
gpt2_count = count_parameters(gpt2)
token_table = gpt2.token_embedding.weight.numel()
position_table = gpt2.position_embedding.weight.numel()
per_block = count_parameters(gpt2.blocks[0])
print(f"total {gpt2_count:,} = tokens {token_table:,} + positions {position_table:,} "
      f"+ 12 x {per_block:,} + final norm {count_parameters(gpt2.final_norm):,}")  # fmt: skip
assert gpt2.head.weight is gpt2.token_embedding.weight
assert gpt2_count == 124_439_808
glue("ch10_gpt2_count", f"{gpt2_count:,}")
glue("ch10_gpt2_untied", f"{(gpt2_count + token_table) / 1e6:.1f}")

# %% [markdown]
# {glue:text}`ch10_gpt2_count` parameters: the "124M" of the GPT-2 release
# {cite}`radford2019language`. What is counted: the token table once (the head reuses it;
# untied, the count would be {glue:text}`ch10_gpt2_untied` million), the learned position
# table, twelve blocks (the fused query/key/value projection and the output projection with
# their biases, the feed-forward network with its biases, two LayerNorms with gain and bias)
# and the final LayerNorm. Padding the vocabulary to 50,304, as nanoGPT does, would add
# 36,096 parameters that no token uses.
#
# With these options the model is GPT-2's: pre-norm blocks with a final LayerNorm (eps
# $10^{-5}$), biases, one fused query/key/value projection, scores scaled by
# $1/\sqrt{d_\text{head}}$, learned positions, a head tied to the token table, without a
# bias, and a feed-forward network that applies GELU in its tanh approximation,
# $\tfrac12 x (1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715 x^3)))$ (`activation="gelu_tanh"`;
# BERT uses the exact GELU, `"gelu"`; the 2017 Transformer and this chapter's own model use
# ReLU, the default, which keeps every chapter's results as they were). The section
# {ref}`ch10-same-as-gpt2` below loads weights in GPT-2's layout into it and gets the logits
# of the reference implementation.
#
# GPT-2 also starts its training differently. It scales the weights of the layers that write
# into the residual stream by $1/\sqrt{N}$ for $N$ residual layers
# {cite}`radford2019language`: nanoGPT draws the attention's and the feed-forward network's
# output projections with standard deviation $0.02/\sqrt{2L}$,
# {glue:text}`ch10_gpt2_residual_std` for $L = 12$. The stream is a sum of $2L$ such
# writes, and independent terms add their variances, so the scaling keeps its size at
# initialization the same however deep the model is. `residual_init="gpt2"` does that; the
# default draws them at 0.02, like every other weight. One difference remains: GPT-2's
# released code draws the position table with standard deviation 0.01, where ours uses
# 0.02 (a difference at initialization only; loaded weights replace both). The cell checks
# the activations and the initializations on the classes themselves:

# %%
torch.manual_seed(0)
# 12 blocks of width 64, our defaults
deep = GPTConfig(vocab_size=7, context_length=1024, num_layers=12)
deep_default = GPT(deep)
deep_gpt2 = GPT(deep.replace(**GPT2_LIKE))  # and GPT-2's options


def residual_std(model):
    return (
        torch.stack([b.self_attn.out_proj.weight for b in model.blocks])
        .std()
        .item()
    )


gpt2_residual_std = 0.02 / math.sqrt(2 * 12)
glue("ch10_gpt2_residual_std", round(gpt2_residual_std, 4))
position_std = deep_gpt2.position_embedding.weight.std().item()
print("default activation ReLU, GPT-2's the tanh GELU:",
      isinstance(deep_default.blocks[0].ffn.activation, nn.ReLU),
      deep_gpt2.blocks[0].ffn.activation.approximate == "tanh")  # fmt: skip
print("residual projections at std 0.02 by default:",
      abs(residual_std(deep_default) - 0.02) < 0.001)  # fmt: skip
print("at std 0.02 / sqrt(2L) with residual_init='gpt2':",
      abs(residual_std(deep_gpt2) - gpt2_residual_std) < 0.0005)  # fmt: skip
print(
    "position table at std 0.02, not GPT-2's 0.01:",
    abs(position_std - 0.02) < 0.001,
)
assert isinstance(deep_default.blocks[0].ffn.activation, nn.ReLU)
assert isinstance(gpt2.blocks[0].ffn.activation, nn.GELU)
assert deep_gpt2.blocks[0].ffn.activation.approximate == "tanh"
assert abs(residual_std(deep_default) - 0.02) < 0.001
assert abs(residual_std(deep_gpt2) - gpt2_residual_std) < 0.0005
assert abs(position_std - 0.02) < 0.001 and abs(position_std - 0.01) > 0.005

# %% [markdown]
# ## Training
#
# We train with the book's loop, `helpers.training.fit`: AdamW, a cosine schedule with
# warm-up, the mean cross-entropy of next-character prediction over the non-padding targets,
# and the validation loss at the end of each of the eight epochs:

# %% tags=["nbval-ignore-output"]
config = BracketConfig()
start = time.perf_counter()
lm, history = train_brackets(config, train_rows, val_rows)
train_seconds = time.perf_counter() - start
val_loss = per_token_loss(lm, val_rows)
glue("ch10_train_seconds", round(train_seconds))
glue("ch10_steps", int(history["step"].iloc[-1]))
glue("ch10_val_loss", round(val_loss, 3))
glue("ch10_perplexity", round(math.exp(val_loss), 2))
train_val_gap = abs(val_loss - history["train_loss"].iloc[-1])
glue("ch10_train_val_gap", round(train_val_gap, 3))
# scripts/margins.py lm, seeds 0-3 (default numerics) and 0-2 (scalar): validation loss
# 1.107-1.124
assert val_loss < 1.14 and train_val_gap < 0.05
print(f"{train_seconds:.0f} s; validation loss {val_loss:.3f} nats, "
      f"perplexity {math.exp(val_loss):.2f}")  # fmt: skip

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
ax.plot(history["step"], history["train_loss"], label="training batches")
ends = history.dropna(subset=["val_loss"])
ax.plot(ends["step"], ends["val_loss"], "o-", label="validation (end of epoch)")
ax.axhline(math.log(7), color="k", ls=":", label="uniform, log 7")
ax.set(
    xlabel="optimizer step", ylabel="loss (nats per character)", ylim=(1.0, 2.0)
)
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Training and validation loss per character. Both drop fast from the uniform
# model's $\log 7$, then creep down together: with {glue:text}`ch10_num_train` strings and a
# model this size, the last training loss and the validation loss differ by
# {glue:text}`ch10_train_val_gap` nats, so there is no overfitting to see here.
#
# After {glue:text}`ch10_steps` steps ({glue:text}`ch10_train_seconds` seconds), the
# validation loss is {glue:text}`ch10_val_loss` nats per character, a *perplexity* of
# {glue:text}`ch10_perplexity`: $e^{\text{loss}}$, the number of equally likely characters
# the model is, on average, choosing among. The uniform model's perplexity is 7.
#
# ### The floor: the language's entropy
#
# How good is that loss? The floor is not 0: the language leaves real choices (how many
# pairs? open or close? which kind to open?), and no model can predict a coin flip. Because
# a program generates the strings, the floor can be computed exactly. `make_strings` draws
# the number of pairs $n$ uniformly from 1 to 16, then walks: each opening bracket's kind is
# one of three ($\log 3$ nats, $n$ times), and wherever both opening and closing are allowed
# the walk tosses a fair coin ($\log 2$). So a string's probability is known, and the
# entropy of the strings is
#
# $$H = \log 16 + \mathbb{E}[n] \log 3 + \mathbb{E}[\text{coin tosses}] \log 2,$$
#
# the last expectation summed exactly over the walk's depth distribution
# (`helpers.tasks.brackets.entropy_rate`). The loss counts every character *and* the newline
# that ends each string, so the floor per predicted token is
# $H / (\mathbb{E}[\text{length}] + 1)$, in nats like the loss. On the validation strings
# themselves, the generator's own probabilities score `generator_loss`. One more thing
# leaks: the packing. A string that follows another in a row must fit in the room left, and
# the first string of a row is the one that did not fit in the row before, so long strings
# are over-represented there. A model that knows its place in the row can use both;
# `packed_generator_loss` scores the generator's probabilities conditioned on them (the
# lengths of first strings as counted in the training rows):

# %%
floor = entropy_rate()  # nats per token, the end-of-string newline included
val_floor = generator_loss(
    val_strings
)  # the true probabilities on the validation rows
print(
    f"entropy rate: {floor:.3f} nats per token (perplexity {math.exp(floor):.2f})"
)
print(f"the generator's own loss on the validation strings: {val_floor:.3f}")
assert abs(val_floor - floor) < 0.02  # 1,000 strings estimate the rate
glue("ch10_floor", f"{floor:.3f}")
glue("ch10_floor_perplexity", round(math.exp(floor), 2))
glue("ch10_val_floor", round(val_floor, 3))
packed_floor = packed_generator_loss(val_strings, train_strings, CONTEXT)
print(f"the same, knowing how the rows are packed: {packed_floor:.3f}")
assert 0.005 < val_floor - packed_floor < 0.02
glue("ch10_packed_floor", f"{packed_floor:.3f}")

# %% tags=["nbval-ignore-output"]
above_floor = (
    val_loss - val_floor
)  # on the same strings, so the sampling noise cancels
glue("ch10_above_floor", round(above_floor, 3))
glue("ch10_above_floor_share", f"{above_floor / (math.log(7) - val_floor):.1%}")
above_packed = val_loss - packed_floor
glue("ch10_above_packed", round(above_packed, 3))
# margins.py lm --part quick, seeds 0-4 (default numerics) and 0-2 (scalar): 0.016-0.034 above
# the generator's loss, so 0.028-0.045 above the packed one (0.011 lower, the same strings)
assert 0 < above_floor < 0.05 and 0 < above_packed < 0.06
print(f"the model's loss is {above_floor:.3f} nats above the floor, "
      f"{above_packed:.3f} above the packed one")  # fmt: skip

# %% [markdown]
# The language's entropy rate is {glue:text}`ch10_floor` nats per token, a perplexity of
# {glue:text}`ch10_floor_perplexity`: even the generator that wrote the strings is, on
# average, choosing among about three characters. On the validation strings its own
# probabilities score {glue:text}`ch10_val_floor`, and the trained model is
# {glue:text}`ch10_above_floor` nats above that: of the way from the uniform model's
# $\log 7$ down to the floor, {glue:text}`ch10_above_floor_share` is left. Knowing the
# packing lowers the floor to {glue:text}`ch10_packed_floor`, and the model is
# {glue:text}`ch10_above_packed` above that. A model that reads one string at a time could
# not go below {glue:text}`ch10_val_floor` in expectation (a cross-entropy is at least the
# entropy); ours reads packed rows, so its floor is the lower one, and a few hundredths of a
# nat are all that is left to learn. The loss alone does not say *what* the model got
# wrong; the samples below do.
#
# ### What overfitting looks like
#
# Overfitting needs a model that can memorize its data. The same model trained for 60 epochs
# on 300 strings instead of 10,000:

# %% tags=["nbval-ignore-output"]
small_train = make_rows(make_strings(300, seeded(11)), CONTEXT)
small_val = make_rows(make_strings(300, seeded(12)), CONTEXT)
overfit_config = BracketConfig(batch_size=16, epochs=60, lr=3e-3, weight_decay=0.0,
                               warmup_steps=20)  # fmt: skip
overfit_model, overfit_history = train_brackets(
    overfit_config, small_train, small_val
)
epochs = overfit_history.dropna(subset=["val_loss"])
best_epoch = int(epochs.loc[epochs["val_loss"].idxmin(), "epoch"])
rise = epochs["val_loss"].iloc[-1] - epochs["val_loss"].min()
gap = epochs["val_loss"].iloc[-1] - epochs["train_loss"].iloc[-1]
glue("ch10_overfit_best_epoch", best_epoch)
glue("ch10_overfit_rise", round(rise, 2))
glue("ch10_overfit_gap", round(gap, 2))
# margins.py lm, 7 runs: rise 0.24-0.30, final gap 0.73-0.78
assert rise > 0.15 and gap > 0.4
print(f"best validation loss at epoch {best_epoch}; then up by {rise:.2f}, "
      f"final gap {gap:.2f}")  # fmt: skip

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
ax.plot(epochs["epoch"], epochs["train_loss"], label="training (300 strings)")
ax.plot(epochs["epoch"], epochs["val_loss"], label="validation")
ax.axvline(best_epoch, color="0.6", ls="--", lw=0.8)
ax.set(xlabel="epoch", ylabel="loss (nats per character)")
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Overfitting on 300 strings. The training loss keeps falling; the validation
# loss stops improving at epoch {glue:text}`ch10_overfit_best_epoch` (dashed line), then
# rises by {glue:text}`ch10_overfit_rise` nats while the model learns its training strings by
# heart, and ends {glue:text}`ch10_overfit_gap` nats above the training loss. The cures are
# the usual ones: more data (the run above), stopping at the best validation loss, or a
# smaller model.
#
# ## Generation
#
# A language model is a distribution over the next token. To write, we pick a token from it,
# append it, and run the model again on the longer sequence. How we pick is a choice:
#
# - **greedy**: always the most likely token. Deterministic, and every sample is the same;
# - **temperature** $\tau$: sample from $\operatorname{softmax}(z / \tau)$. $\tau < 1$
#   sharpens the distribution towards the arg-max, $\tau > 1$ flattens it towards uniform;
# - **top-$k$**: keep the $k$ most likely tokens, renormalize, sample among them
#   {cite}`fan2018hierarchical`.

# %%
show_source(next_token_probabilities)

# %% [markdown]
# The cut is its own function: every logit below the $k$-th largest becomes $-\infty$, so
# the softmax that follows gives it probability zero and renormalizes the rest for free.

# %%
show_source(top_k_filter)

# %% [markdown]
# Here is what each does to the model's distribution after the prefix `([{`, where the
# right continuations are another opening bracket or `}`, and a newline or `)` or `]` would
# break the string:

# %% tags=["hide-input", "nbval-ignore-output"]
prefix = "([{"
with torch.no_grad():
    last_logits = lm(torch.tensor([[0] + [ALPHABET.index(c) for c in prefix]]))[
        0, -1
    ]
settings = {"τ = 0.5": (0.5, None), "τ = 1": (1.0, None), "τ = 2": (2.0, None),
            "τ = 1, top-3": (1.0, 3)}  # fmt: skip
fig, ax = plt.subplots(figsize=(5.5, 2.6))
width = 0.2
for i, (label, (temperature, top_k)) in enumerate(settings.items()):
    probabilities = next_token_probabilities(last_logits, temperature, top_k)
    offsets = [j + (i - 1.5) * width for j in range(7)]
    ax.bar(offsets, probabilities.numpy(), width, label=label)
ax.set_xticks(range(7), ["\\n", *ALPHABET[1:]])
ax.set(xlabel=f"next character after {prefix!r}", ylabel="probability")
ax.legend(fontsize=8)
plt.show()
wrong = next_token_probabilities(last_logits)[[0, 2, 4]].sum().item()
glue("ch10_wrong_mass", f"{wrong:.1%}")

# %% [markdown]
# **Figure.** The next-character distribution after `([{` under four settings. At $\tau = 1$
# the trained model puts {glue:text}`ch10_wrong_mass` of its probability on characters that
# would break the string. Lowering the temperature moves mass from unlikely to likely
# characters; raising it spreads mass onto the wrong ones; top-3 removes the tail entirely
# and renormalizes the rest.
#
# The shift shows in the samples. For each setting we sample 1,000 strings and check them
# with `is_balanced`. Each starts after a newline and ends at the model's next newline:
# `sample_strings` calls `lm.generate(..., end_id=0)`, so a row that writes the newline
# (id 0) stops there, its remaining positions are padded with the same id, and generation
# stops once every row has ended. The tokens up to each end are the ones generation without
# `end_id` writes (the cell checks it on four rows).
#
# A sample can be valid and still a copy of a training string, and the short strings of the
# language are few: there are only 3 strings of one pair, and the training set holds all of
# them. So the table counts samples that are *valid and new* (balanced, and not among the
# training strings), and gives the same statistics for 1,000 strings drawn from the
# generator itself, the baseline a perfect model would match:

# %% tags=["nbval-ignore-output"]
start_ids = torch.zeros(
    4, 1, dtype=torch.long
)  # four rows that start after a newline
ended = lm.generate(start_ids, CONTEXT - 1, generator=seeded(5), end_id=0)
free = lm.generate(start_ids, CONTEXT - 1, generator=seeded(5))
for row_ended, row_free in zip(ended.tolist(), free.tolist(), strict=True):
    stop = row_free.index(0, 1) + 1 if 0 in row_free[1:] else len(row_free)
    assert row_ended[:stop] == row_free[:stop] and set(row_ended[stop:]) <= {0}
print(repr(decode(ended[0].tolist())))


# %%
def sample_statistics(strings: list[str | None], known: set[str]) -> dict:
    finished = [s for s in strings if s is not None]
    valid_new = [s for s in finished if is_balanced(s) and s not in known]
    return {"valid": validity_rate(strings), "distinct": len(set(finished)) / len(strings),
            "valid and new": len(valid_new) / len(strings),
            "mean length": sum(map(len, finished)) / max(len(finished), 1)}  # fmt: skip


known = set(train_strings)
generated = make_strings(
    1_000, seeded(3)
)  # the generator's own strings, a fresh seed
generator_row = {"sampling": "generator"} | sample_statistics(generated, known)
assert {
    "()",
    "[]",
    "{}",
} <= known  # every string of one pair is a training string
glue("ch10_generator_new", f"{generator_row['valid and new']:.1%}")
glue("ch10_generator_repeat", f"{1 - generator_row['valid and new']:.1%}")
glue("ch10_generator_length", round(generator_row["mean length"], 1))
print(f"generator: {generator_row['valid and new']:.1%} valid and new")

# %% tags=["nbval-ignore-output"]
samples, rows = {}, []
for label, (temperature, top_k) in {"greedy": (1.0, None), "τ = 0.7": (0.7, None),
                                    "τ = 1": (1.0, None), "τ = 1.5": (1.5, None),
                                    "τ = 1, top-2": (1.0, 2)}.items():  # fmt: skip
    greedy = label == "greedy"
    strings = sample_strings(
        lm, 1_000, seeded(3), temperature, top_k, greedy=greedy
    )
    samples[label] = strings
    rows.append({"sampling": label} | sample_statistics(strings, known))
sampling_table = pd.DataFrame([*rows, generator_row]).round(3)
valid = dict(
    zip(sampling_table["sampling"], sampling_table["valid"], strict=True)
)
print("greedy writes:", samples["greedy"][0])
sampling_table

# %% tags=["nbval-ignore-output"]
glue("ch10_valid_t1", f"{valid['τ = 1']:.1%}")
glue("ch10_valid_t07", f"{valid['τ = 0.7']:.1%}")
glue("ch10_valid_t15", f"{valid['τ = 1.5']:.1%}")
glue("ch10_greedy_string", samples["greedy"][0])
valid_new = dict(
    zip(
        sampling_table["sampling"], sampling_table["valid and new"], strict=True
    )
)
glue("ch10_valid_new_t1", f"{valid_new['τ = 1']:.1%}")
glue("ch10_valid_new_t15", f"{valid_new['τ = 1.5']:.1%}")
# margins.py lm, 7 runs: valid at τ = 1 0.70-0.87, at τ = 0.7 0.94-0.98, at τ = 1.5
# 0.28-0.38. Valid and new at τ = 1 (margins.py lm --part quick, seeds 0-4 default, 0-2
# scalar): 0.64-0.79, so -0.13 to +0.03 from the generator's 0.764 with seeded(3)
assert (
    valid["τ = 1"] > 0.6
    and valid["τ = 0.7"] > valid["τ = 1"] > valid["τ = 1.5"]
)
assert len(set(samples["greedy"])) == 1
assert -0.2 < valid_new["τ = 1"] - valid_new["generator"] < 0.06

# %% [markdown]
# Sampled at $\tau = 1$, {glue:text}`ch10_valid_t1` of the model's strings are balanced; at
# $\tau = 0.7$, {glue:text}`ch10_valid_t07`; at $\tau = 1.5$ only
# {glue:text}`ch10_valid_t15`, and a top-2 cut removes nearly every mistake. At $\tau = 1$,
# {glue:text}`ch10_valid_new_t1` of the samples are valid *and* not in the training set,
# against {glue:text}`ch10_generator_new` for strings drawn from the generator itself (at
# $\tau = 1.5$, {glue:text}`ch10_valid_new_t15`). So the model writes new strings of the
# language, at the rate of the process that made its data or somewhat below it (the range
# over five training seeds is in the cell, asserted with room): what it loses is its
# invalid samples. That is the claim, and no more: the generator's own strings repeat a
# training string {glue:text}`ch10_generator_repeat` of the time, so "new" alone, which
# also counts invalid samples, says little. Greedy decoding writes one string,
# {glue:text}`ch10_greedy_string`, every time: the single most likely path.
# The usual trade-off of sampling shows: a lower temperature or a top-$k$ cut buys validity
# with diversity, and too high a temperature buys diversity with mistakes.
#
# The table's last column shows what the validity rate hides: the model's strings are
# longer than the generator's. Here are the lengths of the valid samples at $\tau = 1$
# beside those of the generator's strings:

# %% tags=["nbval-ignore-output"]
model_lengths = [
    len(s) for s in samples["τ = 1"] if s is not None and is_balanced(s)
]
generator_lengths = [len(s) for s in generated]
model_mean = sum(model_lengths) / len(model_lengths)
generator_mean = sum(generator_lengths) / len(generator_lengths)
over = sum(length > 32 for length in model_lengths) / len(model_lengths)
# the first string of each training row: what the model saw right after a row's newline
first_lengths = [
    len(decode(row.tolist()).split("\n")[1]) for row in train_rows.tensors[0]
]
first_mean = sum(first_lengths) / len(first_lengths)
glue("ch10_model_length", round(model_mean, 1))
glue("ch10_over_support", f"{over:.1%}")
glue("ch10_first_length", round(first_mean, 1))
assert first_mean > generator_mean + 3  # the data's fact: 21.5 against 17.0
assert abs(model_mean - first_mean) < abs(model_mean - generator_mean)
# margins.py lm --part quick, 8 runs: valid samples' mean length 20.0-21.7 against the
# generator's 16.8-17.2; longer than 32: 4.7-8.1%
assert (
    model_mean > generator_mean + 2
    and over > 0.02
    and max(generator_lengths) <= 32
)
print(f"mean length: model {model_mean:.1f}, generator {generator_mean:.1f}; "
      f"model strings longer than 32: {over:.1%}")  # fmt: skip

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
bins = range(1, CONTEXT + 1, 2)  # one bin per even length
series = [generator_lengths, first_lengths, model_lengths]
ax.hist(series, bins=bins, weights=[[1 / len(x)] * len(x) for x in series],
        label=["generator", "first string of a training row", "model, τ = 1"])  # fmt: skip
ax.axvline(32.5, color="0.4", ls="--", lw=0.8)
ax.set(xlabel="string length (characters)", ylabel="share of strings")
ax.set_ylim(top=ax.get_ylim()[1] * 1.4)  # room for the legend
ax.legend(fontsize=8, loc="upper right")
plt.show()

# %% [markdown]
# **Figure.** Lengths of the generator's strings (blue), of the first string of each
# training row (orange) and of the model's valid samples (green), as shares. The generator
# draws 1 to 16 pairs uniformly, so its lengths are flat from 2 to 32 and stop at the dashed
# line. The model's samples are not: few are short, their mean is
# {glue:text}`ch10_model_length` characters against {glue:text}`ch10_generator_length`,
# and {glue:text}`ch10_over_support` of them are longer than 32, balanced strings the
# generator never writes. Compare them with the orange bars rather than the blue ones. A
# sample starts right after a newline at position 0, and in training the string at that
# position is the first of a row, which is biased towards long strings: `make_rows` starts a
# new row when a string does not fit in the old one, and long strings are the ones that do
# not fit. Those first strings average {glue:text}`ch10_first_length` characters, and the
# model's samples match them better than the generator's: the model learned the data as
# packed. The few samples beyond 32 are a mistake of its own: it has not learned the limit
# of 16 pairs, which depends on a count over the whole string. (For the same reason the
# model's "valid and new" share above is measured on longer strings than the generator's,
# and long strings are more often new.)
#
# ### Against an $n$-gram model
#
# Is that good? The natural baseline is an $n$-gram model: the distribution of the next
# character given the previous $n - 1$, counted on the same training strings (with a little
# smoothing). We pick $n$ by its validation loss, as we would any hyper-parameter, and score
# both models the same way: the validity of 1,000 samples at $\tau = 1$, and a measure with a
# right answer. Wherever a string closes a bracket, the *kind* of closing bracket is forced
# by the bracket left open; we check whether each model's most likely closing bracket is the
# right one, over every closing position of the validation strings.

# %% tags=["nbval-ignore-output"]
ngram_losses = {}
for n in range(2, 11):  # the order n with the lowest validation loss
    ngram_losses[n] = NGramModel(n).fit(train_strings).loss(val_strings)
best_n = min(ngram_losses, key=ngram_losses.get)
ngram = NGramModel(best_n).fit(train_strings)
ngram_valid = validity_rate(ngram.sample(1_000, seeded(3), max_len=CONTEXT))
ngram_closing = closing_accuracy(ngram.probabilities, val_strings)
lm_table = gpt_probabilities(lm, val_strings)
lm_closing = closing_accuracy(lambda prefix: lm_table[prefix], val_strings)
# positions whose opening bracket is within the n-gram model's sight, and farther back
near, far = (1, best_n - 1), (best_n, CONTEXT)
comparison = pd.DataFrame(
    {"model": [f"{best_n}-gram", "GPT"],
     "validation loss": [ngram_losses[best_n], val_loss],
     "valid samples (τ = 1)": [ngram_valid, valid["τ = 1"]],
     "closing right": [ngram_closing, lm_closing],
     "opener in sight": [closing_accuracy(ngram.probabilities, val_strings, near),
                         closing_accuracy(lambda p: lm_table[p], val_strings, near)],
     "opener farther": [closing_accuracy(ngram.probabilities, val_strings, far),
                        closing_accuracy(lambda p: lm_table[p], val_strings, far)]}
).round(3)  # fmt: skip
comparison

# %% tags=["nbval-ignore-output"]
scores = comparison.set_index("model")
ngram_far, lm_far = scores["opener farther"]
glue("ch10_best_n", best_n)
glue("ch10_ngram_sight", best_n - 1)
glue("ch10_ngram_valid", f"{ngram_valid:.1%}")
glue("ch10_ngram_closing", f"{ngram_closing:.1%}")
glue("ch10_lm_closing", f"{lm_closing:.1%}")
glue("ch10_ngram_near", f"{scores['opener in sight'].iloc[0]:.1%}")
glue("ch10_ngram_far", f"{ngram_far:.1%}")
glue("ch10_lm_far", f"{lm_far:.1%}")
ngram_above_floor = ngram_losses[best_n] - val_floor
glue("ch10_ngram_loss", round(ngram_losses[best_n], 3))
glue("ch10_ngram_above_floor", round(ngram_above_floor, 3))
# the n-gram counts are the same in every run: 0.275 nats above the floor
assert ngram_above_floor > 5 * above_floor
# margins.py lm, 7 runs: GPT closing 0.984-0.994, 0.951-0.986 when the opener is far;
# the n-gram model (counts, the same in every run) 0.861, 0.999 near, 0.327 far; the
# validity gap 0.48-0.62
assert lm_closing > 0.96 and ngram_closing < 0.92 and lm_far > 0.9
assert (
    scores["opener in sight"].iloc[0] > 0.99 and ngram_far < 0.5
)  # chance: 1/3
assert valid["τ = 1"] - ngram_valid > 0.35

# %% [markdown]
# The best $n$-gram model predicts from the last {glue:text}`ch10_ngram_sight` characters
# ($n =$ {glue:text}`ch10_best_n`); with longer contexts its counts get too sparse and its
# validation loss rises. Its best validation loss, {glue:text}`ch10_ngram_loss`, is
# {glue:text}`ch10_ngram_above_floor` nats above the floor, against
# {glue:text}`ch10_above_floor` for the Transformer. Its samples are valid
# {glue:text}`ch10_ngram_valid` of the time,
# against {glue:text}`ch10_valid_t1` for the Transformer, and it picks the right closing
# bracket {glue:text}`ch10_ngram_closing` of the time, against
# {glue:text}`ch10_lm_closing`. The last two columns say why. When the bracket to close was
# opened within its sight, the $n$-gram model is right {glue:text}`ch10_ngram_near` of the
# time; when it was opened farther back, only {glue:text}`ch10_ngram_far`, about the one
# in three of a guess among the three kinds, while the Transformer, whose attention reaches the whole prefix, stays at
# {glue:text}`ch10_lm_far`.
#
# ## Generation with a key/value cache
#
# Generating $N$ tokens as above runs the model $N$ times, on sequences of length
# $1, 2, \ldots, N$. Each run recomputes the keys and values of every earlier position, which
# have not changed: a position's key and value depend only on the tokens up to it, and the
# causal mask guarantees that. A *key/value cache* keeps them. Each step then computes the
# query, key and value of the new token only, appends the key and value to the cache, and
# attends over the cache.

# %% [markdown]
# ```{figure} ../book/_static/diagrams/kv_cache.svg
# :alt: Top, a five by five grid of query rows and key columns for training; the cells on and below the diagonal are orange (allowed) and those above are grey (masked), and the last row is outlined in blue. Bottom, generation with a cache: a blue query q4 next to a row of orange keys k0 to k4 and green values v0 to v4, where k4 and v4 are dashed and labelled new, and k0 to k3, v0 to v3 are labelled as reused from the cache.
# :name: fig-kv-cache
#
# Causal attention in training and in generation. Look at the training grid first: row $t$
# of the mask lets query $t$ see keys $0..t$ (orange) and nothing later (grey), and one pass
# trains all rows at once. Then look at the outlined last row: it is all that a generation
# step needs. With a cache, step 4 computes only q4, k4 and v4 (dashed: new) and reuses the
# earlier keys and values, so nothing is masked in that row and nothing is recomputed.
# ```
#
# The cache must change nothing but the cost. On the trained model, greedy generation gives
# the same tokens with and without it, and its step-by-step logits equal the logits of one
# full pass:

# %%
prompts = val_rows.tensors[0][
    :64, :8
]  # the first 8 characters of 64 validation rows
with_cache = lm.generate(prompts, 40, greedy=True)
without_cache = lm.generate(prompts, 40, greedy=True, use_cache=False)
print(
    "same tokens with and without the cache:",
    torch.equal(with_cache, without_cache),
)
caches = lm.new_caches(len(prompts))
with torch.no_grad():
    steps = [lm(with_cache[:, :8], caches)]
    steps += [lm(with_cache[:, t : t + 1], caches) for t in range(8, 48)]
    full = lm(with_cache)
close = torch.allclose(torch.cat(steps, dim=1), full, atol=1e-4)
print("cached logits equal full-pass logits (within 1e-4):", close)
assert torch.equal(with_cache, without_cache) and close

# %% [markdown]
# The tests `test_gpt.py::test_cache_gives_the_logits_and_tokens_of_full_recomputation`
# check the same for every kind of position (learned, sinusoidal, RoPE, ALiBi, none), with
# grouped-query and multi-query heads and with a sliding window.
#
# ### What it saves
#
# Without a cache, step $t$ runs the whole model on $t$ tokens: its projections and
# feed-forward networks cost $O(t)$ and its attention $O(t^2)$, so writing $N$ tokens costs
# $O(N^2)$ for the per-token layers and $O(N^3)$ for attention. With a cache, step $t$ runs
# the layers on one token ($O(1)$) and one attention row over $t$ keys ($O(t)$): $O(N)$
# and $O(N^2)$ in total. We time the generation of $N$ tokens by an untrained model of the
# chapter's size with a longer context (the weights do not change the cost):

# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
timing_model = GPT(GPTConfig(vocab_size=64, context_length=1024)).eval()
prompt = torch.zeros(1, 1, dtype=torch.long)
for use_cache in (True, False):  # a warm-up run of each
    timing_model.generate(prompt, 8, use_cache=use_cache)
timings = []
for length in (32, 64, 128, 256, 512):
    row = {"tokens": length}
    repeats = (
        3 if length == 512 else 1
    )  # the speed-up quoted: a median of 3 runs
    for use_cache in (True, False):
        seconds = median_seconds(timing_model.generate, prompt, length, greedy=True,
                                 use_cache=use_cache, repeats=repeats, warmup=0)  # fmt: skip
        row["cache" if use_cache else "no cache"] = seconds
    timings.append(row)
timings = pd.DataFrame(timings)
timings["speed-up"] = timings["no cache"] / timings["cache"]
speedup = timings["speed-up"].iloc[-1]
glue("ch10_cache_speedup", round(speedup, 1))
glue("ch10_cache_longest", int(timings["tokens"].iloc[-1]))
# measured 10-17x on a loaded 2-core CPU, one thread, default and scalar numerics (the
# per-step figures: scripts/bench_decode.py); a timing, on a machine that may be busy: a margin
assert speedup > 4
timings.round(3)

# %% tags=["hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(4.5, 2.8))
for column in ("no cache", "cache"):
    per_token_ms = timings[column] / timings["tokens"] * 1e3
    ax.plot(timings["tokens"], per_token_ms, "o-", label=column)
ax.set(xscale="log", yscale="log", xlabel="tokens generated N",
       ylabel="milliseconds per token")  # fmt: skip
ax.xaxis.set_minor_locator(plt.NullLocator())  # only the lengths measured
ax.set_xticks(timings["tokens"], timings["tokens"])
ax.yaxis.set_major_formatter(plt.FormatStrFormatter("%g"))
ax.yaxis.set_minor_formatter(plt.FormatStrFormatter("%g"))
ax.legend()
plt.show()

# %% [markdown]
# **Figure.** Time per generated token, against the number of tokens generated, on log
# scales. With the cache (orange) the time per token is nearly flat: each step does the same
# small amount of work plus one attention row that grows slowly. Without it (blue) the time
# per token grows with $N$, since every step re-reads the whole prefix. At
# {glue:text}`ch10_cache_longest` tokens the cache makes generation
# {glue:text}`ch10_cache_speedup` times faster here, on this CPU with one thread (timings
# vary from run to run; the direction does not). At a few dozen tokens it gains little: a
# step of a model this small costs mostly the fixed overhead of dispatching each of its small
# operations, which the cache does not remove. The larger the model and the longer the
# sequence, the more of the work is the recomputation the cache avoids.
#
# ### What a step costs the host
#
# That fixed overhead is worth counting, because it is what is left when the arithmetic is
# cheap. `helpers.analysis.DispatchCounter` counts the operators PyTorch dispatches inside a
# `with` block (a `TorchDispatchMode`), the ones that read a value back into Python (on a
# GPU, each makes the host wait for the device), and the elements the operators write
# (views and allocations aside). We count `generate` continuing prompts of three lengths by
# 1 token and by 9, and divide the difference by 8: what one step of the loop costs, the
# prompt's pass cancelled out.


# %%
def per_step(model, context, use_cache=True, steps=8):
    """Operators, value reads and elements written by one step of generate at `context`."""
    prompt = torch.randint(
        model.vocab_size, (1, context), generator=seeded(context)
    )
    counts = []
    for new in (1, 1 + steps):
        with DispatchCounter() as counter:
            model.generate(prompt, new, greedy=True, use_cache=use_cache)
        counts.append(counter)
    short, long = counts
    return {
        "operators": (long.ops - short.ops) // steps,
        "not views": (long.non_view_ops - short.non_view_ops) // steps,
        "value reads": (long.syncs - short.syncs) // steps,
        "elements written": (long.elements_written - short.elements_written)
        // steps,
    }


rows = [{"cache": mode, "context": context, **per_step(timing_model, context, mode == "cache")}
        for mode in ("cache", "no cache") for context in (64, 256, 1000)]  # fmt: skip
step_costs = pd.DataFrame(rows).set_index(["cache", "context"])
cached = step_costs.loc["cache"]
# the same work at every cache length: operators, and elements written (so no copy of
# the cache, no mask over its keys); and no value read back into Python
assert (cached == cached.iloc[0]).all().all() and cached["value reads"].eq(
    0
).all()
recomputed = step_costs.loc["no cache"]
assert (
    recomputed["operators"].nunique() == 1
)  # as many operators, on more positions:
assert recomputed["elements written"].is_monotonic_increasing
glue("ch10_step_ops", int(cached["operators"].iloc[0]))
glue("ch10_step_launches", int(cached["not views"].iloc[0]))
glue("ch10_step_elements", f"{int(cached['elements written'].iloc[0]):,}")
glue("ch10_recompute_launches", int(recomputed["not views"].iloc[0]))
glue(
    "ch10_recompute_elements",
    f"{int(recomputed['elements written'].iloc[-1]):,}",
)
glue("ch10_step_longest", f"{cached.index[-1]:,}")
step_costs

# %% [markdown]
# With the cache, a step dispatches {glue:text}`ch10_step_ops` operators
# ({glue:text}`ch10_step_launches` of them not views) and writes
# {glue:text}`ch10_step_elements` elements, whether the cache holds 64 positions or
# {glue:text}`ch10_step_longest`,
# and it never reads a value back. Only attention's reading of the cached keys and values
# grows with the context. Three choices make that so, and each was once otherwise in this
# book:
#
# - the cache is *preallocated*: `KVCache` allocates room for the prompt plus every new
#   token on first use and each step writes one position into it. A cache that grows by
#   concatenation, `torch.cat([cached, new])`, copies everything it holds at every step, so
#   the elements written grow with the context
#   (`test_gpt.py::test_a_decoding_step_costs_the_same_at_every_cache_length` fails on it);
# - a step's single query may read every cached key, so it builds no mask at all
#   (`_score_bias` returns None,
#   `test_gpt.py::test_a_decoding_step_that_sees_every_key_builds_no_mask`); a causal mask
#   rebuilt at every step writes one entry per cached key;
# - the loop reads no value back: the prompt's tokens are checked once before it (the
#   generated ones are in the vocabulary by construction), and with an `end_id` the test
#   "has every sequence ended?" runs every step on the CPU, where it costs nothing, but only
#   every `GPT.END_CHECK_EVERY` steps on a GPU (the output is the same: the extra steps
#   write padding).
#
# The counts are exact and the same on every machine with this version of PyTorch, which is
# why the table above is compared when the book is tested. Without the cache a step runs as
# many operators, but on every position: at {glue:text}`ch10_step_longest` tokens it writes
# {glue:text}`ch10_recompute_elements` elements.
#
# Which of the two, arithmetic or dispatch, decides the speed depends on the machine. On this
# CPU, arithmetic is slow enough that recomputation loses by the factor above. On a GPU, the
# arithmetic of a model this small takes microseconds and each operator that is not a view
# costs about one kernel launch, so a step's time is set by its launches
# ({glue:text}`ch10_step_launches` with the cache, {glue:text}`ch10_recompute_launches`
# without) more than by the prefix it reads or recomputes, and the cache's speed-up can
# vanish. The
# book's build has no GPU, so that claim is *unmeasured here*: the measurement behind it is the
# one reported in the book's issue 27, where cached decoding with an earlier version of this
# model, which rebuilt a mask and read the tokens back at every step, ran
# {glue:text}`ch10_issue_h100_low` to {glue:text}`ch10_issue_h100_high` times the speed of
# recomputation on an H100, at contexts where one CPU thread ran it many times faster.
# Whether the leaner step changes that is for a GPU to say: `scripts/bench_decode.py`
# measures the step's time, operators and elements written at several contexts, on the CPU
# or with `--device cuda`, and writes them with the machine named:

# %%
# reported in issue 27 by its author (an H100, before the decode step was slimmed); not
# measured by this book's build, which has no GPU
ISSUE_27_H100 = (0.8, 1.1)
glue("ch10_issue_h100_low", ISSUE_27_H100[0])
glue("ch10_issue_h100_high", ISSUE_27_H100[1])
print("python scripts/bench_decode.py --models chapter gpt2-small "
      "--out book/bench_decode.csv")  # fmt: skip
print(
    "python scripts/bench_decode.py --device cuda --models chapter gpt2-small"
)

# %% [markdown]
# The price is memory. For each layer, the cache holds a key and a value of $d_\text{head}$
# numbers per key/value head, per position, per sequence:
#
# $$\text{cache bytes} = 2 \times L \times H_{kv} \times d_\text{head} \times T \times B \times \text{bytes per number}.$$


# %%
def held_bytes(caches) -> int:
    """The memory the caches' tensors keep alive: their storages, each counted once."""
    storages = {}
    for cache in caches:
        for tensor in (cache.keys, cache.values):
            storages[tensor.untyped_storage().data_ptr()] = (
                tensor.untyped_storage().nbytes()
            )
    return sum(storages.values())


caches = lm.new_caches(
    8, capacity=64
)  # room for 64 positions, allocated on first use
with torch.no_grad():
    lm(
        train_rows.tensors[0][:8, :63], caches
    )  # 8 sequences of 63 tokens in one pass
    counted_after_pass = sum(cache.memory_bytes() for cache in caches)
    held_after_pass = held_bytes(caches)
    lm(train_rows.tensors[0][:8, 63:], caches)  # and one more token each: 64
counted = sum(
    cache.memory_bytes() for cache in caches
)  # elements x bytes per element
# the formula above, as helpers.efficient.kv_cache_bytes (float32: 4 bytes per number)
assert counted == kv_cache_bytes(
    2, 4, 16, 64, batch_size=8, bytes_per_element=4
)
counted_63 = kv_cache_bytes(2, 4, 16, 63, batch_size=8, bytes_per_element=4)
assert counted_after_pass == counted_63
# what is allocated is the capacity, from the first pass on: the formula at T = 64
assert held_after_pass == held_bytes(caches) == counted
assert sum(cache.allocated_bytes() for cache in caches) == counted
gpt2_cache = kv_cache_bytes(12, 12, 64, 1024, bytes_per_element=4)
glue("ch10_small_cache_kb", round(counted / 1024))
glue("ch10_small_cache_after_pass_kb", round(counted_after_pass / 1024))
glue("ch10_gpt2_cache_mb", round(gpt2_cache / 1e6, 1))
glue("ch10_gpt2_weights_mb", round(gpt2_count * 4 / 1e6))
glue("ch10_gpt2_batch_equal", math.ceil(gpt2_count * 4 / gpt2_cache))
print(f"chapter's model, 8 x 64 tokens: {counted:,} bytes; "
      f"GPT-2 small, one sequence of 1,024: {gpt2_cache:,} bytes")  # fmt: skip

# %% [markdown]
# For our model and 8 sequences of 64 tokens, the caches' keys and values count
# {glue:text}`ch10_small_cache_kb` KiB (elements times 4 bytes), exactly what the formula
# gives: a count, not a measurement of the process's memory. What the tensors keep alive
# can differ, and the cell measures that too, by asking each key and value tensor for the
# storage it lives in (each storage counted once). The caches were made with a capacity of
# 64 positions, so they hold the formula's bytes *at 64 positions* from their first use on:
# right after the pass over 63 tokens, when the filled part counts
# {glue:text}`ch10_small_cache_after_pass_kb` KiB, and after the 64th token, when the two
# agree. `generate` asks for the prompt's length plus the tokens to generate, so its caches
# are allocated once and never move.
#
# For GPT-2 small in float32, one full sequence of 1,024 tokens takes
# {glue:text}`ch10_gpt2_cache_mb` MB of
# cache, beside {glue:text}`ch10_gpt2_weights_mb` MB of weights: from a batch of
# {glue:text}`ch10_gpt2_batch_equal` full sequences on, the cache outweighs the model. The
# cache's size is linear in $H_{kv}$, which is why chapter 11's grouped-query attention,
# with fewer key/value heads than query heads, shrinks it.

# %% [markdown]
# (ch10-same-as-gpt2)=
# ## The same model as GPT-2
#
# Configured as GPT-2, the class is GPT-2: the same function of the same weights.
# `helpers.interop.load_gpt2` copies a checkpoint in the layout of the `transformers`
# library's `GPT2LMHeadModel` into it. Two things change on the way: the names
# (`transformer.h.0.attn.c_attn` is `blocks[0].self_attn.qkv_proj`), and the matrices, which
# GPT-2 stores in (in, out) `Conv1D` layers, the transpose of `nn.Linear`'s (out, in). Its
# `c_attn` stacks the query, key and value projections in the order `qkv_proj` does, so the
# transpose is all it needs. The loader checks the model's configuration against the
# checkpoint first (layers, width, heads, vocabulary, context, biases, norm, activation, tied
# head) and refuses a mismatch before it copies anything.
#
# The book's build has no network, so the reference here is a `GPT2LMHeadModel` with random
# weights, built from a small configuration in code: the loader and the comparison are the
# same for the released weights. (`transformers` is not one of the book's helpers'
# dependencies; the cell says how to install it if it is missing.) The reference draws its
# weights with standard deviation {glue:text}`ch10_reference_std` rather than GPT-2's 0.02,
# so that the activations are large enough for GELU and its tanh approximation to differ
# visibly in the logits:

# %%
REFERENCE_STD = 0.2  # GPT2Config's initializer_range; GPT-2's own is 0.02
try:
    with (
        warnings.catch_warnings()
    ):  # tqdm's, about Jupyter widgets the book does not use
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import GPT2Config, GPT2LMHeadModel
except ModuleNotFoundError:  # the book's tests install it; Colab ships it
    GPT2LMHeadModel = None
    print(
        "This section needs the transformers package: pip install transformers"
    )
if GPT2LMHeadModel is not None:
    torch.manual_seed(0)
    sizes = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=16)
    config = GPT2Config(
        **sizes,
        initializer_range=REFERENCE_STD,
        bos_token_id=0,
        eos_token_id=None,
    )
    reference = GPT2LMHeadModel(config).eval()
    tiny_gpt2 = GPTConfig(
        vocab_size=64, context_length=16, d_model=32, **GPT2_LIKE
    )
    ours = GPT(tiny_gpt2)
    load_gpt2(ours, reference.state_dict(), num_heads=config.n_head).eval()
    tokens = torch.randint(64, (4, 16), generator=seeded(0))
    with torch.no_grad():
        gpt2_error = (
            (ours(tokens) - reference(tokens).logits).abs().max().item()
        )
    print("logits agree within 1e-4:", gpt2_error < 1e-4)
    assert gpt2_error < 1e-4
glue("ch10_gpt2_atol", "1e-4")
glue("ch10_reference_std", REFERENCE_STD)

# %% [markdown]
# The logits agree within {glue:text}`ch10_gpt2_atol`, and greedy generation gives
# `generate`'s tokens, with the book's cache and without it. Each agreement has a failing
# case beside it: the untransposed `Conv1D` matrices (the attention's square output
# projection fits either way, so nothing but the logits can tell), or the exact GELU in place
# of its approximation, and the logits differ by more than the tolerance:

# %%
if GPT2LMHeadModel is not None:
    prompt = tokens[:, :4]
    # an explicit mask: else generate() masks prompt tokens equal to pad_token_id
    everything = torch.ones_like(prompt)
    expected = reference.generate(
        prompt,
        attention_mask=everything,
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
    )
    for use_cache in (True, False):
        ours_tokens = ours.generate(
            prompt, 12, greedy=True, use_cache=use_cache
        )
        same = torch.equal(ours_tokens, expected)
        print(f"greedy tokens equal generate()'s, use_cache={use_cache}:", same)
        assert same

# %%
if GPT2LMHeadModel is not None:
    flipped = GPT(tiny_gpt2).eval()
    load_gpt2(flipped, reference.state_dict())
    with torch.no_grad():
        for index, block in enumerate(
            flipped.blocks
        ):  # GPT-2's (in, out), as it is
            conv1d = reference.state_dict()[
                f"transformer.h.{index}.attn.c_proj.weight"
            ]
            block.self_attn.out_proj.weight.copy_(conv1d)
        untransposed = (
            (flipped(tokens) - reference(tokens).logits).abs().max().item()
        )
        for block in ours.blocks:
            block.ffn.activation = (
                nn.GELU()
            )  # exact GELU, not its tanh approximation
        exact_gelu = (
            (ours(tokens) - reference(tokens).logits).abs().max().item()
        )
        for block in ours.blocks:
            block.ffn.activation = nn.GELU(approximate="tanh")  # back
    print(
        "untransposed Conv1D: logits differ by more than 1e-4:",
        untransposed > 1e-4,
    )
    print("exact GELU: logits differ by more than 1e-4:", exact_gelu > 1e-4)
    assert untransposed > 1e-4 and exact_gelu > 1e-4

# %% [markdown]
# A model built otherwise is refused, with the mismatch named; here, the chapter's own
# default, ReLU:

# %%
if GPT2LMHeadModel is not None:
    relu_model = GPT(tiny_gpt2.replace(activation="relu"))
    with expect_error(ValueError):
        load_gpt2(relu_model, reference.state_dict())

# %% [markdown]
# The tests in `test_gpt2_parity.py` check the same against several random references, with
# both of `transformers`' attention implementations, and check that every kind of mismatch
# (layers, width, heads, vocabulary, context length, bias, norm, activation, an untied head,
# positions, grouped-query heads, the feed-forward width) is refused before any weight is
# copied.
#
# With an internet connection, the same lines load the released GPT-2 small and sample from
# it. The book does not run them (its build has no network, and the download is about half
# a gigabyte); the tokenizer is GPT-2's byte-pair encoding, from the same library:
#
# ```python
# from transformers import GPT2LMHeadModel, GPT2TokenizerFast
#
# released = GPT2LMHeadModel.from_pretrained("gpt2")  # downloads the weights
# tokenizer = GPT2TokenizerFast.from_pretrained("gpt2")
# model = GPT(GPT2_SMALL)
# load_gpt2(model, released.state_dict(), num_heads=12).eval()
# prompt = torch.tensor([tokenizer.encode("The attention mechanism")])
# text = model.generate(prompt, 40, temperature=0.8, top_k=40, generator=seeded(0))
# print(tokenizer.decode(text[0]))
# ```

# %% [markdown]
# ## What the source gets wrong
#
# {ref}`The blog post "Learning the Transformer" <source-002>` builds a decoder-only model
# in JAX. Six of its statements and lines of code do not hold; each is pinned by a test, and
# listed on the {doc}`../book/sources` page.
#
# ```{admonition} Pitfall: the attention layer sized by the vocabulary, with an undefined qkv_size
# :class: warning
# The post's model builds its attention layer with `input_dim=n_dims`, the *vocabulary size*,
# while the tokens reach it as embeddings of width `n_embd`; its projections expect
# vocabulary-wide inputs, and the first forward pass fails with a shape error (below). Its
# constructor also computes `self.qkv_size` but then uses a bare `qkv_size`, a name that does
# not exist there (a `NameError` before any shape is checked). In the book the attention width
# is the model width, the configuration's `d_model`, whatever the vocabulary
# (`test_gpt.py::test_attention_is_sized_by_the_model_width`, and chapter 4's
# `test_attention.py::test_source_002_vocabulary_width_crashes_on_embeddings`).
# ```

# %%
vocabulary, width = 65, 32
embeddings = torch.randn(8, width)  # 8 tokens, embedded to n_embd = 32
# the post's query projection, sized by the vocabulary
query_sized_by_vocabulary = nn.Linear(vocabulary, vocabulary, bias=False)
with expect_error(RuntimeError):
    query_sized_by_vocabulary(embeddings)

# %% [markdown]
# ```{admonition} Pitfall: one norm for both sublayers
# :class: warning
# The post's model calls the same `self.rms_norm` after attention and after the feed-forward
# network, so both sums share one gain vector; the block it describes (and every Transformer)
# has a norm per sublayer. Chapter 6 showed the mistake; here every block has its own `norm1`
# and `norm2` and the stack one `final_norm`: $2L + 1$ distinct norms
# (`test_gpt.py::test_every_sublayer_has_its_own_norm`).
# ```

# %%
norms = [m for m in lm.modules() if m.__class__.__name__ == "RMSNorm"]
print(len(norms), "distinct RMSNorm modules for", len(lm.blocks), "blocks")
assert len({id(norm) for norm in norms}) == 2 * len(lm.blocks) + 1

# %% [markdown]
# ```{admonition} Pitfall: "the encoder generates a fixed-size vector"
# :class: warning
# The post describes the encoder as turning the input into a fixed-size vector, a summary
# the decoder reads. That is the sequence-to-sequence RNN of 2014. A Transformer encoder
# outputs one vector per input position, $(B, T, D)$, and cross-attention (chapter 9) reads
# all of them; its output grows with the input
# (`test_gpt.py::test_encoder_outputs_one_vector_per_position`).
# ```

# %%
encoder = TransformerEncoder(2, 32, 4, 64).eval()
for length in (5, 11):
    output = encoder(torch.randn(2, length, 32))
    print(f"input (2, {length}, 32) -> output {tuple(output.shape)}")
assert encoder(torch.randn(2, 11, 32)).shape == (2, 11, 32)

# %% [markdown]
# ```{admonition} Pitfall: a positional table that is trained, and only fits eight tokens
# :class: warning
# The post stores its sinusoidal table as a plain array field of its Equinox module. Equinox
# treats every floating-point array of a module as a parameter: the post's own training
# step (`eqx.filter(..., eqx.is_inexact_array)`, then AdamW) differentiates and updates the
# table along with the weights, so the "fixed" encoding drifts, with weight decay pulling it
# towards zero. PyTorch has the same trap when a table is made an `nn.Parameter`; the book
# registers it as a buffer, which no optimizer sees (the first demonstration below). Second,
# the table is built for `max_token_size=8` positions and added whole, `x += table`: every
# sequence must be exactly 8 tokens long, and a prompt of 5 tokens fails to broadcast (the
# second demonstration). The book adds the first $T$ rows, so any length up to the context
# works (`test_gpt.py::test_sinusoidal_table_is_not_trained`,
# `test_any_length_up_to_the_context_works`).
# ```

# %%
table = torch.randn(8, width)
as_parameter = nn.Parameter(table.clone())  # the post's table, in PyTorch terms
optimizer = torch.optim.AdamW([as_parameter], lr=1e-2)
(torch.randn(8, width) + as_parameter).pow(2).mean().backward()
optimizer.step()
print(
    "a table stored as a parameter changed:",
    not torch.equal(as_parameter, table),
)
sinusoidal = GPT(
    GPTConfig(
        vocab_size=7, context_length=64, d_model=32, positions="sinusoidal"
    )
)
print("GPT's sinusoidal table is a parameter:",
      any(p is sinusoidal.position_embedding.pe for p in sinusoidal.parameters()))  # fmt: skip
with expect_error(RuntimeError):
    torch.randn(5, width) + table  # a 5-token sequence and the 8-row table
five_tokens = torch.zeros(1, 5, dtype=torch.long)
print("GPT reads 5 tokens:", tuple(sinusoidal(five_tokens).shape))

# %% [markdown]
# ## Exercises
#
# 1. **The sampling distribution.** Write `sampling_distribution(logits, temperature, top_k)`
#    that returns the probabilities a sampler draws from: the softmax of `logits / temperature`
#    over the last dimension, restricted to the `top_k` largest logits (all of them when
#    `top_k` is None) and renormalized; `top_k_filter` (above) makes the cut. Check it with
#    `check_sampling_distribution(sampling_distribution)`.
#
# :::{admonition} Solution
# :class: dropdown
# ```python
# def sampling_distribution(logits, temperature, top_k):
#     return top_k_filter(logits / temperature, top_k).softmax(dim=-1)
#
# check_sampling_distribution(sampling_distribution)
# ```
# Cutting with $-\infty$ *before* the softmax renormalizes for free. Dividing after the
# softmax, or cutting after it without renormalizing, is what the checker catches.
# :::
#
# 2. **The cache of a bigger model.** A model has 32 layers, 32 query heads of width 128 and
#    8 key/value heads, and keeps its cache in bfloat16 (2 bytes). How much cache does one
#    sequence of 4,096 tokens need? And with as many key/value heads as query heads?
#
# :::{admonition} Solution
# :class: dropdown
# $2 \times 32 \times 8 \times 128 \times 4096 \times 2$ bytes $= 536{,}870{,}912$ bytes,
# 512 MiB; with 32 key/value heads four times as much, 2 GiB per sequence.
# `kv_cache_bytes(32, 8, 128, 4096)` computes it (bfloat16 is its default). Grouped-query attention (chapter 11) exists because of
# this line.
# :::
#
# 3. **Why the $n$-gram model fails.** Find a validation string where the best $n$-gram model
#    picks the wrong closing bracket. How far back is the opening bracket it should close?
#
# :::{admonition} Solution
# :class: dropdown
# Typically the opening bracket is more than $n - 1$ characters back, outside what the model
# sees: after `([][][]` the next closing bracket must be `)`, whose `(` is seven characters
# back, and a 6-gram model sees only `][][]`, which does not say which kind is open. The
# Transformer's attention reaches the whole prefix.
# :::


# %% tags=["remove-cell"]
def sampling_distribution_solution(logits, temperature, top_k):
    return top_k_filter(logits / temperature, top_k).softmax(dim=-1)


print(check_sampling_distribution(sampling_distribution_solution))
assert kv_cache_bytes(32, 8, 128, 4096) == 536_870_912
