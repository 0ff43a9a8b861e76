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
# The models that write text today are *decoder-only*: one stack of causal blocks, no
# encoder, trained to predict the next token, as GPT-2 {cite}`radford2019language`. This
# chapter builds one from the pieces of chapters 2-6 (the Transformer
# {cite}`vaswani2017attention` without its encoder), trains it on a small language whose
# strings a program can check, and samples from it; {doc}`chapter 11 <11_generation_cost>`
# asks what each generated token costs.
#
# After this chapter you will be able to:
#
# - turn text into tokens (characters, or byte pairs), and build a decoder-only model
#   (causal attention, pre-norm blocks, a tied head) that no later token can influence;
# - train it and judge its loss, and its perplexity, against the language's exact entropy
#   and an $n$-gram baseline;
# - sample from it greedily, with a temperature and with top-$k$, and say what each trades.
#
# ```{figure} ../book/_static/diagrams/map_10.svg
# :alt: The book's map of the Transformer: the decoder stack without its cross-attention, its embeddings and its output layer are highlighted; the encoder is greyed out.
# :width: 60%
# :name: fig-map-10
#
# Where this chapter sits in the Transformer: the decoder stack alone, with no
# cross-attention, and its output layer: a decoder-only language model.
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
import importlib
import inspect
import math
import re
import time
from collections import Counter

import matplotlib.pyplot as plt
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

# %%
import helpers
from helpers import expect_error, glue, show_source
from helpers.analysis import count_parameters, parameter_table
from helpers.checks import check_sampling_distribution
from helpers.gpt import (
    GPT,
    CausalSelfAttention,
    GPTBlock,
    GPTConfig,
    next_token_probabilities,
    top_k_filter,
)
from helpers.masks import causal_mask
from helpers.tasks.brackets import (
    ALPHABET,
    OVERFIT,
    BracketConfig,
    NGramModel,
    closing_accuracy,
    decode,
    encode,
    entropy_rate,
    generator_loss,
    gpt_probabilities,
    is_balanced,
    make_rows,
    make_strings,
    overfitting_run,
    packed_generator_loss,
    per_token_loss,
    sample_statistics,
    sample_strings,
    string_log_probability,
    train_brackets,
    validity_rate,
)
from helpers.transformer import (
    EncoderBlock,
    TransformerConfig,
    TransformerEncoder,
)

# (no use_one_thread here: this chapter's training shares its matrix products
# between the cores, about 1.7 times faster on two)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# %% [markdown]
# (ch10-tokens)=
# ## Tokens
#
# A language model reads integers. The simplest way to turn text into integers is one token
# per character: the vocabulary is the set of characters the text uses, and a token's id is
# its index in that set. For a text we take the docstrings of the book's own `helpers`
# package, which ship with it, so nothing is downloaded.


# %% tags=["nbval-ignore-output"]
# The text changes whenever the package's docstrings do: the counts are not
# compared between runs, and only relations between them are asserted.
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


print(encode_chars("softmax(q k^T)"))

# %% tags=["remove-cell", "nbval-ignore-output"]
assert decode_chars(encode_chars(text)) == text
glue("ch10_num_characters", len(characters))
glue("ch10_text_length", f"{len(text):,}")

# %% [markdown]
# The text's {glue:text}`ch10_text_length` characters use only
# {glue:text}`ch10_num_characters` distinct ones: a tiny vocabulary, and long sequences.
# A *subword* tokenizer trades the other way: a larger vocabulary of frequent chunks
# (`" the"`, `"tion"`), so the same text becomes fewer tokens. GPT-2's is byte-pair
# encoding (BPE) {cite}`sennrich2016bpe` over bytes: 256 byte tokens, 50,000 merges and one
# end-of-text token make its 50,257. BPE starts from characters (or bytes) and
# repeatedly merges the most frequent adjacent pair into a new token, inside words only:


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
        best = max(pairs, key=pairs.get)  # the first seen wins ties
        merges.append(best)
        for word in word_counts:
            if best[0] in splits[word]:
                splits[word] = merge_pair(splits[word], best)
    return merges


# %%
def bpe_tokens(text: str, merges: list[tuple[str, str]]) -> list[str]:
    """Split each word into characters, then apply the merges in order."""
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

# %% tags=["remove-cell"]
# nothing lost
assert "".join(bpe_tokens(held_out_text, merges)) == held_out_text

# %% [markdown]
# Now the trade-off, measured on the held-out fifth of the text. The vocabulary is the
# characters plus one token per merge; the last column counts a $D = 64$ embedding table:

# %% tags=["hide-input", "nbval-ignore-output"]
rows = []
for num_merges in (0, 100, 300, 1000):
    tokens = bpe_tokens(held_out_text, merges[:num_merges])
    vocab_size = len(characters) + num_merges
    per_token = round(len(held_out_text) / len(tokens), 2)
    rows.append(
        {
            "merges": num_merges,
            "vocabulary": vocab_size,
            "tokens": len(tokens),
            "characters per token": per_token,
            "embedding (D=64)": vocab_size * 64,
        }
    )
bpe_table = pd.DataFrame(rows)
bpe_table

# %% tags=["remove-cell", "nbval-ignore-output"]
lengths = bpe_table["tokens"].tolist()
assert lengths == sorted(lengths, reverse=True) and lengths[-1] < lengths[0] / 2
glue("ch10_bpe_ratio", round(lengths[0] / lengths[-1], 1))
glue("ch10_bpe_vocab", int(bpe_table["vocabulary"].iloc[-1]))

# %% [markdown]
# With {glue:text}`ch10_bpe_vocab` tokens the held-out text is
# {glue:text}`ch10_bpe_ratio` times shorter than in characters: the same context holds
# that much more text. The price is a larger embedding table, one row per token, and rare
# tokens that the model seldom sees.
#
# :::{admonition} Going deeper: the embedding table's memory, and padding it to 64
# :class: dropdown
# For a GPT-2-sized vocabulary the table is large, and it grows with the width: at
# $D = 4096$ in float32 it takes {glue:text}`ch10_table_mb` MB
# ({glue:text}`ch10_table_mib` MiB). A learned *position* table is small beside it: one row
# per position, not per token, so GPT-2's 1,024 positions are
# {glue:text}`ch10_position_share` of its token table.
#
# nanoGPT rounds the vocabulary up from 50,257 to 50,304 = 786 x 64, "padded up to nearest
# multiple of 64 for efficiency" in the words of its configuration
# {cite}`karpathy2022nanogpt`. A matrix product is computed in tiles, and an output width
# that is not a multiple of the tile leaves a ragged last tile that takes as long as a full
# one or pushes the kernel onto a slower path. The extra 47 rows are never used: no token has
# their ids, and the loss only ever pushes their logits down. Timing the output head on
# this page's CPU at four widths, the padded head took {glue:text}`ch10_pad_ratio` times as
# long as the exact one, one column *fewer* (50,256, a multiple of 16)
# {glue:text}`ch10_even_ratio` times and one column more {glue:text}`ch10_plus_one_ratio`
# times: {glue:text}`ch10_pad_verdict`. Each is the best of five timings from one run on a
# shared CPU; run the folded cells below on yours. The book's small models keep their exact
# vocabulary: with 7 tokens, the head is not where their time goes.
# :::

# %% tags=["hide-cell"]
V_GPT2 = 50_257  # GPT-2's vocabulary
V_PADDED = math.ceil(V_GPT2 / 64) * 64  # rounded up to the next multiple of 64
memory = pd.DataFrame(
    [
        {
            "width D": D,
            "parameters": V_PADDED * D,
            "float32 (MB)": round(V_PADDED * D * 4 / 1e6, 1),
            "bfloat16 (MB)": round(V_PADDED * D * 2 / 1e6, 1),
        }
        for D in (768, 1024, 4096, 8192)
    ]
)
assert V_PADDED == 50_304 and V_PADDED - V_GPT2 == 47
table_bytes = V_PADDED * 4096 * 4
glue("ch10_table_mb", round(table_bytes / 1e6))
glue("ch10_table_mib", round(table_bytes / 2**20))
glue("ch10_position_share", f"{1024 * 768 / (V_GPT2 * 768):.1%}")
memory


# %% tags=["hide-cell", "nbval-ignore-output"]
def head_seconds(vocab_sizes: tuple[int, ...], repeats: int = 5) -> list[float]:
    """The best of ``repeats`` timings of the head, per size."""
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
for w, t in seconds.items():
    print(f"{w:,}: {t * 1e3:.0f} ms ({ratios[w]:.2f})")
glue("ch10_pad_ratio", round(ratios[V_PADDED], 2))
glue("ch10_even_ratio", round(ratios[V_GPT2 - 1], 2))
glue("ch10_plus_one_ratio", round(ratios[V_GPT2 + 1], 2))
# Timings of one run on a shared machine: no claim is asserted; the verdict is
# computed from this run (a difference under 5% counts as none).
faster = [f"{w:,}" for w in widths[1:] if ratios[w] < 0.95]
if not faster:
    verdict = "this machine's kernels did not care about the width (no width was 5% faster)"
else:
    verdict = f"{', '.join(faster)} beat the odd width by 5% or more"
    if ratios[V_PADDED] > 0.95 * ratios[V_GPT2 - 1]:
        verdict += (
            ", and the multiple of 64 did no better than the multiple of 16"
        )
glue("ch10_pad_verdict", verdict)

# %% [markdown]
# ## A language a program can check
#
# To say what a model *learned*, we need text whose rules are known: balanced brackets of
# three kinds, each closed by its own kind in the reverse order of opening. `([]{})`
# belongs to the language; `([)]` and `(()` do not. To write valid strings a model must keep
# a stack of the open brackets in its activations. The strings are random walks of 1 to 16
# pairs, nested at most 8 deep:

# %%
train_strings = make_strings(10_000, seeded(1))
val_strings = make_strings(1_000, seeded(2))
for example in train_strings[:4]:
    print(example)
print("checker agrees:", all(map(is_balanced, train_strings + val_strings)))
print(
    "and refuses:", [s for s in ["([)]", "(()", "())("] if not is_balanced(s)]
)

# %% tags=["remove-cell"]
assert all(map(is_balanced, train_strings + val_strings))
assert not any(map(is_balanced, ["([)]", "(()", "", "())(", "(]"]))
glue("ch10_num_train", f"{len(train_strings):,}")
glue("ch10_num_val", f"{len(val_strings):,}")
glue(
    "ch10_mean_length",
    round(sum(map(len, train_strings)) / len(train_strings), 1),
)

# %% [markdown]
# We have {glue:text}`ch10_num_train` training strings and {glue:text}`ch10_num_val`
# validation strings, {glue:text}`ch10_mean_length` characters long on average. The tokens
# are seven characters: the six brackets and a newline that ends every string. Rows of 64
# characters pack whole strings one after another; the target is the row shifted by one, and
# the padding after a row's last string is ignored by the loss:

# %%
CONTEXT = BracketConfig().model.context_length
train_rows = make_rows(train_strings, CONTEXT)
val_rows = make_rows(val_strings, CONTEXT)
inputs, targets = train_rows[0]
print(repr("".join(ALPHABET[i] for i in inputs[:24].tolist())))
print(targets[:24].tolist())
print(len(train_rows), "training rows,", len(val_rows), "validation rows")

# %% tags=["remove-cell"]
assert torch.equal(inputs[1:24], targets[:23])

# %% [markdown]
# ## The model
#
# A decoder-only model is chapter 6's encoder stack with a causal mask in every attention
# layer, between an embedding and a classifier over the vocabulary. Position $t$'s output is
# a distribution over token $t + 1$, computed from tokens $0..t$ only, so one pass over $T$
# tokens trains $T$ predictions at once.
#
# ```{figure} ../book/_static/diagrams/decoder_only.svg
# :alt: A vertical chain: tokens, an embedding from V to D, plus learned positions, then a dashed box repeated L times holding RMSNorm with causal self-attention and RMSNorm with a feed-forward network, each with a residual; then a final RMSNorm and a Linear layer from D to V that gives the logits of token t plus 1. Beside the attention, a four by four causal mask, light orange on and below the diagonal and grey above it. A dashed line on the left joins the Linear layer to the embedding, labelled tied: one V by D matrix.
# :name: fig-decoder-only
#
# The decoder-only model. The box repeated $L$ times is chapter 6's pre-norm block with the
# causal mask (right) inside its attention. Look at the two ends: one $V \times D$ matrix
# embeds the tokens and scores the next one (dashed line).
# ```
#
# Every size and choice of the model is one configuration (nanoGPT's layout):

# %% tags=["hide-output"]
show_source(GPTConfig)

# %% [markdown]
# The attention layer is chapter 4's multi-head attention with chapter 2's causal mask
# built in: one projection makes the queries, keys and values, each is cut into heads, and
# position $t$'s scores for keys after $t$ are set to $-\infty$ before the softmax.


# %%
class CausalAttention(nn.Module):
    """Multi-head self-attention in which position t reads positions 0..t."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):  # (B, T, D)
        batch, length, d_model = x.shape
        q, k, v = self.qkv_proj(x).split(d_model, dim=-1)
        # (B, T, D) -> (B, H, T, d_head): each head gets a strip of width d_head
        q, k, v = (
            z.view(batch, length, self.num_heads, self.d_head).transpose(1, 2)
            for z in (q, k, v)
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        scores = scores.masked_fill(~causal_mask(length), float("-inf"))
        heads = scores.softmax(dim=-1) @ v  # (B, H, T, d_head)
        return self.out_proj(heads.transpose(1, 2).reshape(batch, length, -1))


# %% [markdown]
# The book's layer, `CausalSelfAttention`, computes the same function (the weights copy
# across unchanged):

# %%
torch.manual_seed(0)
# the defaults: width 64, 4 heads, 2 layers, learned positions
model_config = GPTConfig(vocab_size=len(ALPHABET), context_length=CONTEXT)
books_layer = CausalSelfAttention(model_config)
ours_layer = CausalAttention(64, 4)
ours_layer.load_state_dict(books_layer.state_dict())
x = torch.randn(2, 10, 64)
same_layer = torch.allclose(ours_layer(x), books_layer(x), atol=1e-6)
print("equals the book's CausalSelfAttention (within 1e-6):", same_layer)

# %% tags=["remove-cell"]
assert same_layer
# the counter-case: without the mask, the two differ
with torch.no_grad():
    q, k, v = ours_layer.qkv_proj(x).split(64, dim=-1)
    q, k, v = (z.view(2, 10, 4, 16).transpose(1, 2) for z in (q, k, v))
    unmasked = F.scaled_dot_product_attention(q, k, v)
    unmasked = ours_layer.out_proj(unmasked.transpose(1, 2).reshape(2, 10, 64))
assert not torch.allclose(unmasked, books_layer(x), atol=1e-6)

# %% [markdown]
# (It also holds a cache for generation, the subject of chapter 11, and options chapter 13
# uses.)
#
# A block is chapter 6's pre-norm block with RMSNorm, and chapter 6's feed-forward network
# with its ReLU:

# %%
show_source(GPTBlock)

# %% [markdown]
# The model adds token and position embeddings, runs the blocks, normalizes once more and
# maps each position to logits with a head that reuses the embedding matrix: the last lines
# of `__init__` make `head.weight` and `token_embedding.weight` one tensor (*weight tying*
# {cite}`press2017tying`). Its two generation methods, `generate` and `new_caches`, are left
# out here: this chapter calls `generate`, chapter 11 shows it and uses `new_caches`:

# %%
show_source(GPT, without=("new_caches", "generate"))

# %% [markdown]
# `GPTBlock` is chapter 6's `EncoderBlock` (pre-norm, RMSNorm, no biases) with a causal mask,
# and the two compute the same function:

# %%
encoder_block = EncoderBlock(64, 4, 256, bias=False, norm="rms").eval()
block = GPTBlock(model_config).eval()  # a feed-forward width of 4 x 64 = 256
block.load_state_dict(encoder_block.state_dict())
x = torch.randn(2, 10, 64)
same = torch.allclose(
    block(x), encoder_block(x, mask=causal_mask(10)), atol=1e-5
)
print("GPT block == causal encoder block (within 1e-5):", same)

# %% tags=["remove-cell"]
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

# %% tags=["remove-cell"]
assert leaks == 0

# %% [markdown]
# Its weights start small ($\mathcal{N}(0, 0.02^2)$, as GPT-2's), so every logit starts
# near zero and the softmax near uniform: the untrained loss is close to
# $\log 7 =$ {glue:text}`ch10_log_vocab` nats, the loss of a model that has learned nothing.

# %%
untrained_loss = per_token_loss(model, val_rows)
near = abs(untrained_loss - math.log(7)) < 0.1
print("untrained loss within 0.1 nats of log 7:", near)

# %% tags=["remove-cell"]
assert near
glue("ch10_log_vocab", round(math.log(7), 2))

# %% [markdown]
# Where the parameters are:

# %%
parameter_table(model, max_depth=2)

# %% tags=["remove-cell"]
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
# The head is the token embedding's matrix (tied), so the total counts it once: the model has
# {glue:text}`ch10_num_parameters` parameters; the feed-forward networks hold
# {glue:text}`ch10_ffn_share` of them and attention {glue:text}`ch10_attention_share`.
# (A source of this chapter gets several details of such a model wrong; see
# [Sources and errata](../book/sources.md).)

# %% [markdown]
# ## Training
#
# We train with the book's loop (AdamW, a cosine schedule with warm-up) on the mean
# cross-entropy of next-character prediction, for eight epochs:

# %% tags=["nbval-ignore-output"]
config = BracketConfig()
start = time.perf_counter()
lm, history = train_brackets(config, train_rows, val_rows)
train_seconds = time.perf_counter() - start
val_loss = per_token_loss(lm, val_rows)
print(
    f"{train_seconds:.0f} s; validation loss {val_loss:.3f} nats, "
    f"perplexity {math.exp(val_loss):.2f}"
)

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch10_train_seconds", round(train_seconds))
glue("ch10_steps", int(history["step"].iloc[-1]))
glue("ch10_val_loss", round(val_loss, 3))
glue("ch10_perplexity", round(math.exp(val_loss), 2))
train_val_gap = abs(val_loss - history["train_loss"].iloc[-1])
glue("ch10_train_val_gap", round(train_val_gap, 3))
# scripts/margins.py lm, seeds 0-3 (default numerics) and 0-2 (scalar), one thread:
# validation loss 1.107-1.124; seeds 0-2 on two threads 1.114-1.122 (every other
# claim of the chapter held on them too)
assert val_loss < 1.14 and train_val_gap < 0.05

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
# model's $\log 7$, then creep down together (they end {glue:text}`ch10_train_val_gap`
# nats apart: no overfitting).
#
# After {glue:text}`ch10_steps` steps ({glue:text}`ch10_train_seconds` seconds), the
# validation loss is {glue:text}`ch10_val_loss` nats per character, a *perplexity*
# $e^{\text{loss}}$ of {glue:text}`ch10_perplexity`: the model is, on average, choosing
# among that many equally likely characters (the uniform model, among 7).
#
# ### The floor: the language's entropy
#
# How good is that loss? The floor is not 0: the language leaves real choices, and no model
# can predict a coin flip. Because a program generates the strings, the floor is exact. The
# generator draws the number of pairs $n$ from 1 to 16, then walks: each opening bracket's
# kind is one of three ($\log 3$ nats), and wherever both opening and closing are allowed
# it tosses a fair coin ($\log 2$). So the entropy of the strings is
#
# $$H = \log 16 + \mathbb{E}[n] \log 3 + \mathbb{E}[\text{coin tosses}] \log 2,$$
#
# and the floor per predicted token is $H / (\mathbb{E}[\text{length}] + 1)$, counting
# each string's closing newline. The generator's own probabilities also score the
# validation strings themselves:

# %%
floor = entropy_rate()  # nats per token, the end-of-string newline included
val_floor = generator_loss(val_strings)  # the true probabilities, same strings
print(
    f"entropy rate: {floor:.3f} nats per token "
    f"(perplexity {math.exp(floor):.2f})"
)
print(f"the generator's own loss on the validation strings: {val_floor:.3f}")

# %% tags=["remove-cell"]
assert abs(val_floor - floor) < 0.02  # 1,000 strings estimate the rate
glue("ch10_floor", f"{floor:.3f}")
glue("ch10_floor_perplexity", round(math.exp(floor), 2))
glue("ch10_val_floor", round(val_floor, 3))
packed_floor = packed_generator_loss(val_strings, train_strings, CONTEXT)
assert 0.005 < val_floor - packed_floor < 0.02
glue("ch10_packed_floor", f"{packed_floor:.3f}")

# %% tags=["remove-cell", "nbval-ignore-output"]
above_floor = val_loss - val_floor  # same strings: the sampling noise cancels
glue("ch10_above_floor", round(above_floor, 3))
glue("ch10_above_floor_share", f"{above_floor / (math.log(7) - val_floor):.1%}")
above_packed = val_loss - packed_floor
glue("ch10_above_packed", round(above_packed, 3))
# margins.py lm --part quick, seeds 0-4 (default numerics) and 0-2 (scalar): 0.016-0.034 above
# the generator's loss, so 0.028-0.045 above the packed one (0.011 lower, the same strings)
assert 0 < above_floor < 0.05 and 0 < above_packed < 0.06

# %% [markdown]
# The floor is {glue:text}`ch10_floor` nats per token, a perplexity of
# {glue:text}`ch10_floor_perplexity`. On the validation strings the generator scores
# {glue:text}`ch10_val_floor`, and the trained model is {glue:text}`ch10_above_floor` nats
# above that: of the way from $\log 7$ down to the floor, only
# {glue:text}`ch10_above_floor_share` is left.
#
# :::{admonition} Going deeper: a floor below the floor
# :class: dropdown
# One more thing leaks: the packing. A string that follows another in a row must fit in the
# room left, and the first string of a row is the one that did not fit in the row before, so
# long strings are over-represented there. A model that knows its place in the row can use
# both. Scored with the generator's probabilities conditioned on them
# (`packed_generator_loss`), the floor drops to {glue:text}`ch10_packed_floor`, and the
# model is {glue:text}`ch10_above_packed` above that. A model that reads one string at a
# time could not, on average, go below the strings' entropy (a cross-entropy is at least the
# entropy), which the generator's own loss on these strings puts at
# {glue:text}`ch10_val_floor`; ours reads packed rows, so its floor is the lower one.
# :::
#
# :::{admonition} Going deeper: what overfitting looks like
# :class: dropdown
# Overfitting needs a model that can memorize its data. The same model trained for 60
# epochs on 300 strings instead of 10,000 (the folded cells below): the training loss keeps
# falling; the validation loss stops improving at epoch
# {glue:text}`ch10_overfit_best_epoch`, then rises by {glue:text}`ch10_overfit_rise` nats
# while the model learns its training strings by heart, and ends
# {glue:text}`ch10_overfit_gap` nats above the training loss. The cures are the usual ones:
# more data (the run above), stopping at the best validation loss, or a smaller model.
# :::

# %% tags=["hide-cell", "nbval-ignore-output"]
print(OVERFIT)  # what changes: smaller batches, 60 epochs, no weight decay
overfit_model, epochs, measures = overfitting_run(seed=0)
best_epoch, rise, gap = (measures[k] for k in ("best_epoch", "rise", "gap"))
glue("ch10_overfit_best_epoch", best_epoch)
glue("ch10_overfit_rise", round(rise, 2))
glue("ch10_overfit_gap", round(gap, 2))
# overfitting_run, seeds 0-2, one thread: rise 0.23-0.25, final gap 0.69-0.74
# (scripts/margins.py lm, 7 runs, before the gap was taken at the epoch's end:
# rise 0.24-0.30, gap 0.73-0.78)
assert rise > 0.15 and gap > 0.4
print(
    f"best validation loss at epoch {best_epoch}; then up by {rise:.2f}, "
    f"final gap {gap:.2f}"
)
fig, ax = plt.subplots(figsize=(4.5, 2.8))
ax.plot(epochs["epoch"], epochs["train_loss"], label="training (300 strings)")
ax.plot(epochs["epoch"], epochs["val_loss"], label="validation")
ax.axvline(best_epoch, color="0.6", ls="--", lw=0.8)
ax.set(xlabel="epoch", ylabel="loss (nats per character)")
ax.legend()
plt.show()

# %% [markdown]
# ## Generation
#
# To write, we pick a token from the model's distribution, append it, and run the model
# again on the longer sequence. How we pick is a choice:
#
# - **greedy**: always the most likely token; every sample is the same;
# - **temperature** $\tau$: sample from $\operatorname{softmax}(z / \tau)$. $\tau < 1$
#   sharpens the distribution towards the arg-max, $\tau > 1$ flattens it towards uniform;
# - **top-$k$**: keep the $k$ most likely tokens, renormalize, sample among them
#   {cite}`fan2018hierarchical`.

# %%
show_source(next_token_probabilities)

# %% [markdown]
# The cut sets every logit below the $k$-th largest to $-\infty$, so the softmax gives it
# probability zero and renormalizes the rest:

# %%
show_source(top_k_filter)

# %% [markdown]
# What each does after the prefix `([{`, where a newline, `)` or `]` would break the
# string:

# %% tags=["hide-input", "nbval-ignore-output"]
prefix = "([{"
with torch.no_grad():
    last_logits = lm(torch.tensor([[0] + [ALPHABET.index(c) for c in prefix]]))[
        0, -1
    ]
# the settings of the table below
settings = {"τ = 0.7": (0.7, None), "τ = 1": (1.0, None)}
settings |= {"τ = 1.5": (1.5, None), "τ = 1, top-2": (1.0, 2)}
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
# the model puts {glue:text}`ch10_wrong_mass` of its probability on characters that would
# break the string; a lower temperature moves mass onto likely characters, a higher one
# onto the wrong ones, and top-2 keeps only the two likeliest characters.
#
# For each setting we sample 1,000 strings (each ends at the model's next newline) and check
# them with `is_balanced`. The table also counts samples that are *valid and new* (not a
# training string), and the same for 1,000 strings from the generator itself, what a perfect
# model would match:

# %% tags=["remove-cell", "nbval-ignore-output"]
# four rows that start after a newline
start_ids = torch.zeros(4, 1, dtype=torch.long)
ended = lm.generate(start_ids, CONTEXT - 1, generator=seeded(5), end_id=0)
free = lm.generate(start_ids, CONTEXT - 1, generator=seeded(5))
# the tokens up to each end are the ones generation without end_id writes
for row_ended, row_free in zip(ended.tolist(), free.tolist(), strict=True):
    stop = row_free.index(0, 1) + 1 if 0 in row_free[1:] else len(row_free)
    assert row_ended[:stop] == row_free[:stop] and set(row_ended[stop:]) <= {0}
print(repr(decode(ended[0].tolist())))


# %%
known = set(train_strings)
generated = make_strings(1_000, seeded(3))  # the generator's, a fresh seed
generator_row = {"sampling": "generator"} | sample_statistics(generated, known)
print(f"generator: {generator_row['valid and new']:.1%} valid and new")

# %% tags=["remove-cell"]
# every string of one pair is a training string
assert {"()", "[]", "{}"} <= known
glue("ch10_generator_new", f"{generator_row['valid and new']:.1%}")
glue("ch10_generator_repeat", f"{1 - generator_row['valid and new']:.1%}")
glue("ch10_generator_length", round(generator_row["mean length"], 1))

# %% tags=["nbval-ignore-output"]
samples, rows = {}, []
settings = {"greedy": (1.0, None), "τ = 0.7": (0.7, None)}
settings |= {"τ = 1": (1.0, None), "τ = 1.5": (1.5, None)}
settings |= {"τ = 1, top-2": (1.0, 2)}
for label, (temperature, top_k) in settings.items():
    greedy = label == "greedy"
    strings = sample_strings(
        lm, 1_000, seeded(3), temperature, top_k, greedy=greedy
    )
    samples[label] = strings
    rows.append({"sampling": label} | sample_statistics(strings, known))
shown = ["sampling", "valid", "distinct", "valid and new", "mean length"]
sampling_table = pd.DataFrame([*rows, generator_row])[shown].round(3)
print("greedy writes:", samples["greedy"][0])
sampling_table

# %% tags=["remove-cell", "nbval-ignore-output"]
valid = dict(
    zip(sampling_table["sampling"], sampling_table["valid"], strict=True)
)
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
glue("ch10_invalid_t1", f"{1 - valid['τ = 1']:.0%}")
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
# At $\tau = 1$, {glue:text}`ch10_valid_t1` of the samples are balanced; at $\tau = 0.7$,
# {glue:text}`ch10_valid_t07`; at $\tau = 1.5$ only {glue:text}`ch10_valid_t15`. A low
# temperature or a top-$k$ cut buys validity; diversity pays only at the extreme: greedy
# decoding writes the same string every time. At $\tau = 1$,
# {glue:text}`ch10_valid_new_t1` are valid and new, against
# {glue:text}`ch10_generator_new` for the generator: the model writes new strings of the
# language at about the rate of the process that made its data, but where every string of the
# generator is balanced, {glue:text}`ch10_invalid_t1` of the model's are not.
#
# Greedy decoding writes {glue:text}`ch10_greedy_string` every time. It takes the
# *locally* most likely token at each step, which need not make the most likely *string*:
# every character costs probability, and a short string pays for few. Scored by the model
# and by the language's own probabilities:


# %% tags=["nbval-ignore-output"]
def log_probability(model, string: str) -> float:
    """log P(string, then a newline | a newline) under the model, in nats."""
    ids = torch.tensor([[0, *encode(string), 0]])
    with torch.no_grad():
        logits = model(ids[:, :-1])
    picked = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])
    return picked.sum().item()


greedy_string = samples["greedy"][0]
for string in ("()", greedy_string):
    print(
        f"{string!r}: model {log_probability(lm, string):.1f}, "
        f"language {string_log_probability(string):.1f} nats"
    )

# %% tags=["remove-cell", "nbval-ignore-output"]
short_model = log_probability(lm, "()")
greedy_model = log_probability(lm, greedy_string)
short_language = string_log_probability("()")
greedy_language = string_log_probability(greedy_string)
glue("ch10_short_logp", round(short_model, 1))
glue("ch10_greedy_logp", round(greedy_model, 1))
# the language's: one pair (1/16), one kind of three
assert abs(short_language - (-math.log(16) - math.log(3))) < 1e-12
# greedy's string is far less likely than "()" under both: greedy is not the mode
assert greedy_model < short_model - 5 and greedy_language < short_language - 5

# %% [markdown]
# Under the model, `"()"` has log-probability {glue:text}`ch10_short_logp`, greedy's
# string {glue:text}`ch10_greedy_logp`: greedy is a rule for each step, not a search for
# the most probable sequence.
#
# :::{admonition} Going deeper: the model's strings are longer than the generator's
# :class: dropdown
# Lengths show what the validity rate hides: at $\tau = 1$ the model's
# valid samples average {glue:text}`ch10_model_length` characters against the generator's
# {glue:text}`ch10_generator_length`, and {glue:text}`ch10_over_support` of them are longer
# than 32, balanced strings the generator never writes (it draws at most 16 pairs). Why? A
# sample starts right after a newline at position 0, and in training the string at that
# position is the first of a row, which is biased towards long strings: a new row starts
# when a string does not fit in the old one, and long strings are the ones that do not fit.
# Those first strings average {glue:text}`ch10_first_length` characters, and the model's
# samples match them better than the generator's: the model learned the data as packed. The
# few samples beyond 32 are a mistake of its own: it has not learned the limit of 16 pairs,
# which depends on a count over the whole string. (So the model's "valid and new" share is
# measured on longer strings than the generator's, and long strings are more often new.)
# The folded cells below draw the three length distributions.
# :::

# %% tags=["hide-cell", "nbval-ignore-output"]
model_lengths = [
    len(s) for s in samples["τ = 1"] if s is not None and is_balanced(s)
]
generator_lengths = [len(s) for s in generated]
model_stats = sample_statistics(samples["τ = 1"], known)
model_mean, over = (
    model_stats["valid mean length"],
    model_stats["valid over 32"],
)
generator_mean = generator_row["mean length"]
# the first string of each training row: what follows a row's first newline
first_lengths = [
    len(decode(row.tolist()).split("\n")[1]) for row in train_rows.tensors[0]
]
first_mean = sum(first_lengths) / len(first_lengths)
glue("ch10_model_length", round(model_mean, 1))
glue("ch10_over_support", f"{over:.1%}")
glue("ch10_first_length", round(first_mean, 1))
assert first_mean > generator_mean + 3  # the data's fact: 21.5 against 17.0
assert abs(model_mean - first_mean) < abs(model_mean - generator_mean)
# margins.py lm --part quick, 8 runs: valid samples' mean length 20.0-21.7
# against the generator's 16.8-17.2; longer than 32: 4.7-8.1%
assert (
    model_mean > generator_mean + 2
    and over > 0.02
    and max(generator_lengths) <= 32
)
print(
    f"mean length: model {model_mean:.1f}, generator {generator_mean:.1f}; "
    f"model strings longer than 32: {over:.1%}"
)
fig, ax = plt.subplots(figsize=(4.5, 2.8))
bins = range(1, CONTEXT + 1, 2)  # one bin per even length
series = [generator_lengths, first_lengths, model_lengths]
labels = ["generator", "first string of a training row", "model, τ = 1"]
shares = [[1 / len(x)] * len(x) for x in series]
ax.hist(series, bins=bins, weights=shares, label=labels)
ax.axvline(32.5, color="0.4", ls="--", lw=0.8)
ax.set(xlabel="string length (characters)", ylabel="share of strings")
ax.set_ylim(top=ax.get_ylim()[1] * 1.4)  # room for the legend
ax.legend(fontsize=8, loc="upper right")
plt.show()

# %% [markdown]
# ### Against an $n$-gram model
#
# The natural baseline is an $n$-gram model: the next character's distribution given the
# previous $n - 1$, counted on the same strings, with $n$ picked by validation loss. Besides
# loss and validity, a measure with a right answer: wherever a string closes a bracket, the
# *kind* is forced by the bracket left open. Is each model's most likely closing bracket the
# right one, when the opener is within the $n$-gram model's sight, and when it is farther?

# %% tags=["hide-input", "nbval-ignore-output"]
ngram_losses = {}
for n in range(2, 11):  # the order n with the lowest validation loss
    ngram_losses[n] = NGramModel(n).fit(train_strings).loss(val_strings)
best_n = min(ngram_losses, key=ngram_losses.get)
ngram = NGramModel(best_n).fit(train_strings)
ngram_valid = validity_rate(ngram.sample(1_000, seeded(3), max_len=CONTEXT))
ngram_closing = closing_accuracy(ngram.probabilities, val_strings)
lm_table = gpt_probabilities(lm, val_strings)
lm_closing = closing_accuracy(lambda prefix: lm_table[prefix], val_strings)
# openers within the n-gram model's sight, and farther back
near, far = (1, best_n - 1), (best_n, CONTEXT)


def ngram_at(span):
    return closing_accuracy(ngram.probabilities, val_strings, span)


def lm_at(span):
    return closing_accuracy(lambda p: lm_table[p], val_strings, span)


comparison = pd.DataFrame(
    {
        "model": [f"{best_n}-gram", "GPT"],
        "validation loss": [ngram_losses[best_n], val_loss],
        "valid samples (τ = 1)": [
            ngram_valid,
            sampling_table.set_index("sampling").loc["τ = 1", "valid"],
        ],
        "closing right": [ngram_closing, lm_closing],
        "opener in sight": [ngram_at(near), lm_at(near)],
        "opener farther": [ngram_at(far), lm_at(far)],
    }
).round(3)
comparison

# %% tags=["remove-cell", "nbval-ignore-output"]
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
# chance: 1/3
assert scores["opener in sight"].iloc[0] > 0.99 and ngram_far < 0.5
assert valid["τ = 1"] - ngram_valid > 0.35

# %% [markdown]
# The best $n$-gram model reads the last {glue:text}`ch10_ngram_sight` characters; its loss
# is {glue:text}`ch10_ngram_above_floor` nats above the floor (the Transformer's,
# {glue:text}`ch10_above_floor`) and its samples are valid {glue:text}`ch10_ngram_valid` of
# the time. The last two columns say why: with the opener in sight it closes right
# {glue:text}`ch10_ngram_near` of the time, with the opener farther back only
# {glue:text}`ch10_ngram_far`, a guess among three, while the Transformer, whose attention
# reaches the whole prefix, stays at {glue:text}`ch10_lm_far`.
#
# Each generated token needs the model's output at the last position of the whole string
# so far. Run naively, every step recomputes the earlier positions; `generate` avoids that
# with a cache. {doc}`Chapter 11 <11_generation_cost>` explains the cache, measures what a
# step costs, and loads a GPT-2 checkpoint into the same class.

# %% tags=["remove-cell"]
vocabulary, width, heads = 65, 32, 4
embeddings = torch.randn(8, width)  # 8 tokens, embedded to n_embd = 32
# the post's query projection, sized by the vocabulary: 65 in, (65 // 4) * 4 = 64 out
query_sized_by_vocabulary = nn.Linear(
    vocabulary, vocabulary // heads * heads, bias=False
)
assert query_sized_by_vocabulary.weight.shape == (64, 65)
with expect_error(RuntimeError):
    query_sized_by_vocabulary(embeddings)

# %% tags=["remove-cell"]
norms = [m for m in lm.modules() if m.__class__.__name__ == "RMSNorm"]
print(len(norms), "distinct RMSNorm modules for", len(lm.blocks), "blocks")
assert len({id(norm) for norm in norms}) == 2 * len(lm.blocks) + 1

# %% tags=["remove-cell"]
encoder_config = TransformerConfig(
    d_model=32, num_heads=4, num_layers=2, ffn_width=64
)
encoder = TransformerEncoder(encoder_config).eval()
for length in (5, 11):
    output = encoder(torch.randn(2, length, 32))
    print(f"input (2, {length}, 32) -> output {tuple(output.shape)}")
assert encoder(torch.randn(2, 11, 32)).shape == (2, 11, 32)

# %% tags=["remove-cell"]
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
print(
    "GPT's sinusoidal table is a parameter:",
    any(p is sinusoidal.position_embedding.pe for p in sinusoidal.parameters()),
)
with expect_error(RuntimeError):
    torch.randn(5, width) + table  # a 5-token sequence and the 8-row table
five_tokens = torch.zeros(1, 5, dtype=torch.long)
print("GPT reads 5 tokens:", tuple(sinusoidal(five_tokens).shape))

# %% [markdown]
# ## Summary
#
# - Characters make a small vocabulary and long sequences; byte-pair merges made the
#   held-out text {glue:text}`ch10_bpe_ratio` times shorter with
#   {glue:text}`ch10_bpe_vocab` tokens, at the price of a larger embedding table.
# - A decoder-only model is an embedding, pre-norm blocks with causal attention, a final
#   norm and a tied head; one pass over $T$ tokens trains $T$ predictions, and no position
#   reads a later one.
# - On balanced brackets it ends {glue:text}`ch10_above_floor` nats above the language's
#   exact entropy, and closes a bracket opened out of an $n$-gram model's sight right
#   {glue:text}`ch10_lm_far` of the time (the $n$-gram model: {glue:text}`ch10_ngram_far`).
# - A lower temperature or a top-$k$ cut raises validity; greedy decoding, the limit, always
#   writes the same string and is locally, not globally, most likely.
#
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
# 2. **Why the $n$-gram model fails.** Find a validation string where the best $n$-gram model
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
