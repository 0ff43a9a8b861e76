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
# strings a program can check, and makes its generation cheap with a key/value cache.
#
# After this chapter you will be able to:
#
# - build a decoder-only model (tokens, causal attention, pre-norm blocks, a tied head) and
#   count its parameters against GPT-2's;
# - train it and judge its loss against the language's entropy and an $n$-gram baseline, and
#   sample from it greedily, with a temperature and with top-$k$;
# - decode with a key/value cache, and say what the cache saves on a CPU and on a GPU.
#
# ```{figure} ../book/_static/diagrams/map_10.svg
# :alt: The book's map of the Transformer: the decoder stack, without its cross-attention, and the output layer are highlighted; the encoder is greyed out.
# :width: 60%
# :name: fig-map-10
#
# Where this chapter sits in the Transformer: the decoder stack alone, with no
# cross-attention, and its output layer: a decoder-only language model.
# ```

# %% tags=["hide-cell"]
# Setup: on Colab, install the book's helpers; everywhere, import, seed and pick a device.
import sys

# The book's package at the book's version (a release tag, kept in step by a test).
HELPERS = "attention-book-helpers @ git+https://github.com/attention-book/attention-book@v0.7.0"
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
import pathlib
import re
import textwrap
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
    encode,
    entropy_rate,
    generator_loss,
    gpt_probabilities,
    is_balanced,
    make_rows,
    make_strings,
    packed_generator_loss,
    per_token_loss,
    sample_strings,
    string_log_probability,
    train_brackets,
    validity_rate,
)
from helpers.transformer import EncoderBlock, TransformerEncoder

helpers.use_one_thread(device)


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


# %% tags=["hide-input", "nbval-ignore-output"]
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
# encoding (BPE) {cite}`sennrich2016bpe` with 50,257 tokens. BPE starts from characters and
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
    rows.append({"merges": num_merges, "vocabulary": vocab_size,
                 "tokens": len(tokens), "characters per token": per_token,
                 "embedding (D=64)": vocab_size * 64})  # fmt: skip
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
    [{"width D": D, "parameters": V_PADDED * D,
      "float32 (MB)": round(V_PADDED * D * 4 / 1e6, 1),
      "bfloat16 (MB)": round(V_PADDED * D * 2 / 1e6, 1)}
     for D in (768, 1024, 4096, 8192)]
)  # fmt: skip
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
    verdict = "this machine's kernels did not care about the width"
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
CONTEXT = BracketConfig().context_length
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

# %%
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
# (It also holds a cache for generation, explained below, and options chapter 12 uses.)
# A block is chapter 6's pre-norm block with RMSNorm. The model adds token and position
# embeddings, runs the blocks, normalizes once more and maps each position to logits with a
# head that reuses the embedding matrix (*weight tying* {cite}`press2017tying`):

# %%
show_source(GPTBlock)

# %%
show_source(GPT.forward)

# %% [markdown]
# The block is chapter 6's `EncoderBlock` (pre-norm, RMSNorm, no biases) with a causal mask,
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
# The model has {glue:text}`ch10_num_parameters` parameters; the feed-forward networks hold
# {glue:text}`ch10_ffn_share` of them and attention {glue:text}`ch10_attention_share`.
#
# ### GPT-2 small, counted
#
# Configured as GPT-2 small, the same class must have GPT-2's parameter count. GPT-2 has
# LayerNorm, biases and GELU's tanh approximation (`norm="layer", bias=True,
# activation="gelu_tanh"`), 50,257 tokens, 1,024 positions, width 768 and 12 layers of 12
# heads. On the `meta` device a model has shapes but no memory:

# %%
GPT2_LIKE = dict(
    bias=True, norm="layer", activation="gelu_tanh", residual_init="gpt2"
)
GPT2_SMALL = GPTConfig(vocab_size=50_257, context_length=1024, d_model=768,
                       num_layers=12, num_heads=12, **GPT2_LIKE)  # fmt: skip
with torch.device("meta"):
    gpt2 = GPT(GPT2_SMALL)
gpt2_count = count_parameters(gpt2)
token_table = gpt2.token_embedding.weight.numel()
position_table = gpt2.position_embedding.weight.numel()
per_block = count_parameters(gpt2.blocks[0])
print(f"total {gpt2_count:,}\n = tokens {token_table:,}"
      f" + positions {position_table:,}\n + 12 x {per_block:,}"
      f" + final norm {count_parameters(gpt2.final_norm):,}")  # fmt: skip

# %% tags=["remove-cell"]
assert gpt2.head.weight is gpt2.token_embedding.weight
assert gpt2_count == 124_439_808
glue("ch10_gpt2_count", f"{gpt2_count:,}")
glue("ch10_gpt2_untied", f"{(gpt2_count + token_table) / 1e6:.1f}")

# %% [markdown]
# {glue:text}`ch10_gpt2_count` parameters: the "124M" by which
# [GPT-2's released code](https://github.com/openai/gpt-2) names its smallest model (the
# paper {cite}`radford2019language` reports it as 117M). The token table is counted once;
# untied, the count would be {glue:text}`ch10_gpt2_untied` million.
#
# :::{admonition} Going deeper: GPT-2's activation and initialization
# :class: dropdown
# GPT-2's feed-forward network applies GELU in its tanh approximation,
# $\tfrac12 x (1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715 x^3)))$ (`activation="gelu_tanh"`;
# BERT uses the exact GELU, `"gelu"`; the 2017 Transformer and this chapter's own model use
# ReLU, the default).
#
# GPT-2 also starts its training differently. It scales the weights of the layers that write
# into the residual stream by $1/\sqrt{N}$ for $N$ residual layers
# {cite}`radford2019language`: nanoGPT draws the attention's and the feed-forward network's
# output projections with standard deviation $0.02/\sqrt{2L}$,
# {glue:text}`ch10_gpt2_residual_std` for $L = 12$. The stream is a sum of $2L$ such
# writes, and independent terms add their variances, so the scaling keeps its size at
# initialization the same however deep the model is. `residual_init="gpt2"` does that; the
# default draws them at 0.02, like every other weight. GPT-2's released code draws the
# position table with standard deviation 0.01, where ours uses 0.02 (a difference at
# initialization only; loaded weights replace both). The folded cell checks the activations
# and the initializations on the classes themselves.
# :::

# %% tags=["hide-cell"]
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
# We train with the book's loop (AdamW, a cosine schedule with warm-up) on the mean
# cross-entropy of next-character prediction, for eight epochs:

# %% tags=["nbval-ignore-output"]
config = BracketConfig()
start = time.perf_counter()
lm, history = train_brackets(config, train_rows, val_rows)
train_seconds = time.perf_counter() - start
val_loss = per_token_loss(lm, val_rows)
print(f"{train_seconds:.0f} s; validation loss {val_loss:.3f} nats, "
      f"perplexity {math.exp(val_loss):.2f}")  # fmt: skip

# %% tags=["remove-cell", "nbval-ignore-output"]
glue("ch10_train_seconds", round(train_seconds))
glue("ch10_steps", int(history["step"].iloc[-1]))
glue("ch10_val_loss", round(val_loss, 3))
glue("ch10_perplexity", round(math.exp(val_loss), 2))
train_val_gap = abs(val_loss - history["train_loss"].iloc[-1])
glue("ch10_train_val_gap", round(train_val_gap, 3))
# scripts/margins.py lm, seeds 0-3 (default numerics) and 0-2 (scalar): validation loss
# 1.107-1.124
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
print(f"entropy rate: {floor:.3f} nats per token "
      f"(perplexity {math.exp(floor):.2f})")  # fmt: skip
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
# time could not go below {glue:text}`ch10_val_floor` in expectation (a cross-entropy is at
# least the entropy); ours reads packed rows, so its floor is the lower one.
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
small_train = make_rows(make_strings(300, seeded(11)), CONTEXT)
small_val = make_rows(make_strings(300, seeded(12)), CONTEXT)
overfit_config = BracketConfig(batch_size=16, epochs=60, lr=3e-3,
                               weight_decay=0.0, warmup_steps=20)  # fmt: skip
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
# the model puts {glue:text}`ch10_wrong_mass` of its probability on characters that would
# break the string; a lower temperature moves mass onto likely characters, a higher one
# onto the wrong ones, and top-3 removes the tail.
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


# %% tags=["hide-input"]
def sample_statistics(strings: list[str | None], known: set[str]) -> dict:
    finished = [s for s in strings if s is not None]
    valid_new = [s for s in finished if is_balanced(s) and s not in known]
    return {
        "valid": validity_rate(strings),
        "distinct": len(set(finished)) / len(strings),
        "valid and new": len(valid_new) / len(strings),
        "mean length": sum(map(len, finished)) / max(len(finished), 1),
    }


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
settings = {"greedy": (1.0, None), "τ = 0.7": (0.7, None), "τ = 1": (1.0, None),
            "τ = 1.5": (1.5, None), "τ = 1, top-2": (1.0, 2)}  # fmt: skip
for label, (temperature, top_k) in settings.items():
    greedy = label == "greedy"
    strings = sample_strings(
        lm, 1_000, seeded(3), temperature, top_k, greedy=greedy
    )
    samples[label] = strings
    rows.append({"sampling": label} | sample_statistics(strings, known))
sampling_table = pd.DataFrame([*rows, generator_row]).round(3)
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
# temperature or a top-$k$ cut buys validity with diversity. At $\tau = 1$,
# {glue:text}`ch10_valid_new_t1` are valid and new, against
# {glue:text}`ch10_generator_new` for the generator: the model writes new strings of the
# language at about the rate of the process that made its data.
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
    print(f"{string!r}: model {log_probability(lm, string):.1f}, "
          f"language {string_log_probability(string):.1f} nats")  # fmt: skip

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
# The table's last column shows what the validity rate hides: at $\tau = 1$ the model's
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
model_mean = sum(model_lengths) / len(model_lengths)
generator_mean = sum(generator_lengths) / len(generator_lengths)
over = sum(length > 32 for length in model_lengths) / len(model_lengths)
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
print(f"mean length: model {model_mean:.1f}, generator {generator_mean:.1f}; "
      f"model strings longer than 32: {over:.1%}")  # fmt: skip
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
    {"model": [f"{best_n}-gram", "GPT"],
     "validation loss": [ngram_losses[best_n], val_loss],
     "valid samples (τ = 1)": [ngram_valid, valid["τ = 1"]],
     "closing right": [ngram_closing, lm_closing],
     "opener in sight": [ngram_at(near), lm_at(near)],
     "opener farther": [ngram_at(far), lm_at(far)]}
).round(3)  # fmt: skip
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
# ## Generation with a key/value cache
#
# Generating $N$ tokens as above runs the model on sequences of length $1, 2, \ldots, N$,
# and each run recomputes the keys and values of every earlier position, which have not
# changed (the causal mask guarantees it). A *key/value cache* keeps them: each step
# computes the new token's query, key and value only, appends the key and value to the
# cache, and attends over it.

# %% [markdown]
# ```{figure} ../book/_static/diagrams/kv_cache.svg
# :alt: Top, a five by five grid of query rows and key columns for training; the cells on and below the diagonal are orange (allowed) and those above are grey (masked), and the last row is outlined in blue. Bottom, generation with a cache: a blue query q4 next to a row of orange keys k0 to k4 and green values v0 to v4, where k4 and v4 are dashed and labelled new, and k0 to k3, v0 to v3 are labelled as reused from the cache.
# :name: fig-kv-cache
#
# Causal attention in training and in generation. In training (top), row $t$ lets query $t$
# see keys $0..t$, and one pass trains all rows. Look at the outlined last row: a generation
# step needs only that one; with a cache (bottom), it computes q4, k4 and v4 and reuses the
# earlier keys and values.
# ```
#
# The cache must change nothing but the cost:

# %%
prompts = val_rows.tensors[0][:64, :8]  # 8 characters of 64 validation rows
with_cache = lm.generate(prompts, 40, greedy=True)
without_cache = lm.generate(prompts, 40, greedy=True, use_cache=False)
same_tokens = torch.equal(with_cache, without_cache)
print("same tokens with and without the cache:", same_tokens)
caches = lm.new_caches(len(prompts))
with torch.no_grad():
    steps = [lm(with_cache[:, :8], caches)]
    steps += [lm(with_cache[:, t : t + 1], caches) for t in range(8, 48)]
    full = lm(with_cache)
close = torch.allclose(torch.cat(steps, dim=1), full, atol=1e-4)
print("cached logits equal full-pass logits (within 1e-4):", close)

# %% tags=["remove-cell"]
assert same_tokens and close

# %% [markdown]
# ### What it saves
#
# Without a cache, step $t$ runs the per-token layers on $t$ tokens ($O(t)$) and attention
# on $t \times t$ scores ($O(t^2)$); with one, the layers run on one token and attention
# on one row ($O(t)$). We time $N$ tokens from an untrained model of the chapter's size
# with a longer context (the weights do not change the cost):

# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
timing_model = GPT(GPTConfig(vocab_size=64, context_length=1024)).eval()
prompt = torch.zeros(1, 1, dtype=torch.long)
for use_cache in (True, False):  # a warm-up run of each
    timing_model.generate(prompt, 8, use_cache=use_cache)
timings = []
for length in (32, 64, 128, 256, 512):
    row = {"tokens": length}
    repeats = 3 if length == 512 else 1  # the speed-up quoted: a median of 3
    for use_cache in (True, False):
        seconds = median_seconds(timing_model.generate, prompt, length,
                                 greedy=True, use_cache=use_cache,
                                 repeats=repeats, warmup=0)  # fmt: skip
        row["cache" if use_cache else "no cache"] = seconds
    timings.append(row)
timings = pd.DataFrame(timings)
timings["speed-up"] = timings["no cache"] / timings["cache"]
timings.round(3)

# %% tags=["remove-cell", "nbval-ignore-output"]
speedup = timings["speed-up"].iloc[-1]
glue("ch10_cache_speedup", round(speedup, 1))
glue("ch10_cache_longest", int(timings["tokens"].iloc[-1]))
# measured 10-17x on a loaded 2-core CPU, one thread, default and scalar numerics (the
# per-step figures: scripts/bench_decode.py); a timing, on a machine that may be busy: a margin
assert speedup > 4

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
# **Figure.** Time per generated token against the number generated, on log scales. With
# the cache (orange) it is nearly flat; without it (blue) it grows with $N$. At
# {glue:text}`ch10_cache_longest` tokens the cache makes generation
# {glue:text}`ch10_cache_speedup` times faster on this CPU (one thread; timings vary, the
# direction does not). At a few dozen tokens it gains little: a step of a model this small
# costs mostly the fixed overhead of dispatching its operations.
#
# ### What a step costs the host
#
# That overhead is what is left when the arithmetic is cheap. `DispatchCounter` counts the
# operators PyTorch dispatches, the values read back into Python (on a GPU, each makes the
# host wait), and the elements written, here for one step of `generate` at three contexts:


# %% tags=["hide-input"]
def per_step(model, context, use_cache=True, steps=8):
    """Operators, value reads and elements written by one step of generate."""
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


rows = [{"cache": mode, "context": context,
         **per_step(timing_model, context, mode == "cache")}
        for mode in ("cache", "no cache")
        for context in (64, 256, 1000)]  # fmt: skip
step_costs = pd.DataFrame(rows).set_index(["cache", "context"])
step_costs

# %% tags=["remove-cell"]
cached = step_costs.loc["cache"]
# the same work at every cache length: operators, and elements written (so no copy of
# the cache, no mask over its keys); and no value read back into Python
assert (cached == cached.iloc[0]).all().all() and cached["value reads"].eq(
    0
).all()
recomputed = step_costs.loc["no cache"]
# as many operators, on more positions:
assert recomputed["operators"].nunique() == 1
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

# %% [markdown]
# With the cache, a step dispatches {glue:text}`ch10_step_ops` operators
# ({glue:text}`ch10_step_launches` of them not views, each a kernel) and writes
# {glue:text}`ch10_step_elements` elements at every context, and never reads a value back.
# Without it, at {glue:text}`ch10_step_longest` tokens a step writes
# {glue:text}`ch10_recompute_elements` elements.
#
# :::{admonition} Going deeper: why a cached step's cost does not grow
# :class: dropdown
# Three choices make it so, and each is easy to get wrong:
#
# - the cache is *preallocated*: `KVCache` allocates room for the prompt plus every new
#   token on first use, and each step writes one position into it. A cache that grows by
#   concatenation, `torch.cat([cached, new])`, copies everything it holds at every step, so
#   the elements written grow with the context;
# - a step's single query may read every cached key, so it builds no mask at all; a causal
#   mask rebuilt at every step writes one entry per cached key;
# - the loop reads no value back: the prompt's tokens are checked once before it (the
#   generated ones are in the vocabulary by construction), and with an `end_id` the test
#   "has every sequence ended?" runs every step on the CPU, where it costs nothing, but only
#   every `GPT.END_CHECK_EVERY` steps on a GPU (the output is the same: the extra steps
#   write padding).
# :::
#
# ### On a GPU
#
# Whether arithmetic or dispatch sets the speed depends on the machine. The same step, timed
# on one CPU thread and on an NVIDIA H100 GPU, for the chapter's model and for GPT-2 small's
# shape (measured by a longer run of the same code, shipped with the book):


# %% tags=["hide-input"]
def shipped_benchmark(name: str) -> pd.DataFrame | None:
    """A file of the book's `book/` folder, or None outside a clone."""
    checkout = pathlib.Path(helpers.__file__).resolve().parents[1]
    for folder in (checkout, pathlib.Path.cwd(), pathlib.Path.cwd().parent):
        if (folder / "book" / name).is_file():
            return pd.read_csv(folder / "book" / name)
    print(
        f"book/{name} ships with the book's repository: clone it to draw this"
    )
    return None


cpu_bench = shipped_benchmark("bench_decode.csv")
gpu_bench = shipped_benchmark("bench_decode_gpu.csv")
if cpu_bench is not None and gpu_bench is not None:
    bench = pd.concat([cpu_bench, gpu_bench])
    bench["ms"] = bench["seconds_per_step"] * 1e3
    per_step_ms = bench.pivot_table(
        index=["model", "context"], columns=["device", "mode"], values="ms"
    )
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 2.9))
    titles = {
        "chapter": "the chapter's model",
        "gpt2-small": "GPT-2 small's shape",
    }
    styles = {("cpu", "cache"): ("C1", "o-"), ("cpu", "no cache"): ("C0", "o-"),
              ("cuda", "cache"): ("C1", "s--"),
              ("cuda", "no cache"): ("C0", "s--")}  # fmt: skip
    for ax, (model_name, title) in zip(axes, titles.items(), strict=True):
        for (dev, mode), (color, style) in styles.items():
            line = per_step_ms.loc[model_name, (dev, mode)].dropna()
            label = f"{'H100' if dev == 'cuda' else 'CPU'}, {mode}"
            ax.plot(line.index, line, style, color=color, label=label)
        ax.set(xscale="log", yscale="log", title=title, xlabel="context")
        ax.set_xticks([64, 256, 1024, 2048], ["64", "256", "1024", "2048"])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.yaxis.set_major_formatter(plt.FormatStrFormatter("%g"))
    axes[0].set_ylabel("milliseconds per step")
    axes[0].legend(fontsize=7, loc="upper left")
    plt.show()

# %% tags=["remove-cell"]
if cpu_bench is not None and gpu_bench is not None:
    ms = per_step_ms
    small_cpu = ms.loc["chapter", ("cpu", "cache")].dropna()
    small_gpu = ms.loc["chapter", ("cuda", "cache")]
    small_saving = ms.loc["chapter", ("cuda", "no cache")] / small_gpu
    big_gpu = ms.loc["gpt2-small", ("cuda", "cache")]
    big_recompute = ms.loc["gpt2-small", ("cuda", "no cache")]
    big_cpu = ms.loc["gpt2-small", ("cpu", "cache")].dropna()
    gpu_rows = gpu_bench.set_index(["model", "mode", "context"])
    small_ops = gpu_rows.loc[("chapter", "cache", 64)]
    # GPT-2 small's float32 weights, read once per token, at the H100's ~3 TB/s
    H100_BYTES_PER_SECOND = 3e12
    weights_ms = gpt2_count * 4 / H100_BYTES_PER_SECOND * 1e3
    # the chapter's model: slower on the GPU than on one CPU thread, at every context
    assert (small_gpu.loc[small_cpu.index] > small_cpu).all()
    assert small_gpu.min() > 0.8 and small_gpu.max() < 1.1
    assert small_cpu.min() > 0.4 and small_cpu.max() < 0.7
    assert small_saving.min() > 1.2 and small_saving.max() < 1.6
    # GPT-2 small: the cached step is flat; recomputation grows with the context
    assert big_gpu.max() / big_gpu.min() < 1.15 and big_gpu.min() > 3.0
    assert 3.0 < (big_recompute / big_gpu).loc[1024] < 3.5
    assert 5.2 < (big_recompute / big_gpu).loc[2048] < 6.0
    assert big_cpu.min() > 90 and big_cpu.max() < 160
    # launch-bound: the step takes over 15 times the time to read the weights once
    assert big_gpu.min() / weights_ms > 15
    machines = bench.groupby("device")["machine"].first()
    glue("ch10_gpu_machine", machines["cuda"])
    glue("ch10_cpu_machine", machines["cpu"])
    glue("ch10_gpu_small_ms", f"{small_gpu.min():.1f}-{small_gpu.max():.1f}")
    glue("ch10_cpu_small_ms", f"{small_cpu.min():.1f}-{small_cpu.max():.1f}")
    glue("ch10_gpu_small_saving",
         f"{small_saving.min():.1f}-{small_saving.max():.1f}")  # fmt: skip
    glue("ch10_gpu_small_ops", int(small_ops["ops_per_step"]))
    glue("ch10_gpu_small_launches", int(small_ops["non_view_ops_per_step"]))
    glue("ch10_gpt2_gpu_ms", f"{big_gpu.min():.1f}-{big_gpu.max():.1f}")
    glue("ch10_gpt2_recompute_64", round(big_recompute.loc[64], 1))
    glue("ch10_gpt2_recompute_1024", round(big_recompute.loc[1024], 1))
    glue("ch10_gpt2_recompute_2048", round(big_recompute.loc[2048]))
    glue(
        "ch10_gpt2_saving_1024",
        round(big_recompute.loc[1024] / big_gpu.loc[1024], 1),
    )
    glue(
        "ch10_gpt2_saving_2048",
        round(big_recompute.loc[2048] / big_gpu.loc[2048], 1),
    )
    glue(
        "ch10_gpt2_cpu_ms",
        f"{round(big_cpu.min(), -1):.0f}-{round(big_cpu.max(), -1):.0f}",
    )
    glue("ch10_weights_read_ms", round(weights_ms, 2))
    glue("ch10_launch_bound_ratio", round(big_gpu.min() / weights_ms))

# %% [markdown]
# **Figure.** Time per decoding step against the context, on log scales: one thread of
# {glue:text}`ch10_cpu_machine` (circles, solid) and {glue:text}`ch10_gpu_machine`
# (squares, dashed), with the cache (orange) and without it (blue). Left, the chapter's
# model; right, a model of GPT-2 small's shape.
#
# For the chapter's model the GPU is the *slower* machine: a cached step takes
# {glue:text}`ch10_gpu_small_ms` ms on the H100 against {glue:text}`ch10_cpu_small_ms` ms
# on one CPU thread, and the cache saves only {glue:text}`ch10_gpu_small_saving` times. The
# arithmetic takes microseconds; the time goes to launching the step's
# {glue:text}`ch10_gpu_small_ops` operators. The step is *launch-bound*. GPT-2 small's shape
# shows the cache's promise: {glue:text}`ch10_gpt2_gpu_ms` ms per cached step at every
# context, while recomputation takes {glue:text}`ch10_gpt2_recompute_64` ms at 64 positions,
# {glue:text}`ch10_gpt2_recompute_1024` ms at 1,024 ({glue:text}`ch10_gpt2_saving_1024`
# times the cached step) and {glue:text}`ch10_gpt2_recompute_2048` ms at 2,048
# ({glue:text}`ch10_gpt2_saving_2048` times); one CPU thread needs
# {glue:text}`ch10_gpt2_cpu_ms` ms per cached step. Even so the H100 is far from its limit:
# reading GPT-2 small's {glue:text}`ch10_gpt2_weights_mb` MB of float32 weights once per
# token at its ~3 TB/s takes {glue:text}`ch10_weights_read_ms` ms, and the step takes
# {glue:text}`ch10_launch_bound_ratio` times that, spent in launches, not arithmetic.
#
# The full `CausalSelfAttention`, with the cache and chapter 12's options (grouped-query
# heads {cite}`ainslie2023gqa`, multi-query {cite}`shazeer2019mqa`, a sliding window
# {cite}`beltagy2020longformer`, RoPE or ALiBi), and the function that builds its mask:

# %% tags=["hide-output"]
show_source(CausalSelfAttention)

# %% tags=["hide-output"]
show_source(score_bias)

# %% [markdown]
# ### What it costs: memory
#
# For each layer the cache holds a key and a value of $d_\text{head}$ numbers per key/value
# head, per position, per sequence:
#
# $$\text{cache bytes} = 2 \times L \times H_{kv} \times d_\text{head} \times T \times B \times \text{bytes per number}.$$


# %% tags=["hide-input"]
def held_bytes(caches) -> int:
    """The memory the caches' tensors keep alive: each storage counted once."""
    storages = {}
    for cache in caches:
        for tensor in (cache.keys, cache.values):
            storages[tensor.untyped_storage().data_ptr()] = (
                tensor.untyped_storage().nbytes()
            )
    return sum(storages.values())


caches = lm.new_caches(8, capacity=64)  # room for 64 positions, on first use
with torch.no_grad():
    lm(train_rows.tensors[0][:8, :63], caches)  # 8 sequences of 63 tokens
    counted_after_pass = sum(cache.memory_bytes() for cache in caches)
    held_after_pass = held_bytes(caches)
    lm(train_rows.tensors[0][:8, 63:], caches)  # and one more token each: 64
counted = sum(cache.memory_bytes() for cache in caches)  # elements x 4 bytes
gpt2_cache = kv_cache_bytes(12, 12, 64, 1024, bytes_per_element=4)
print(f"chapter's model, 8 x 64 tokens: {counted:,} bytes\n"
      f"GPT-2 small, one sequence of 1,024: {gpt2_cache:,} bytes")  # fmt: skip

# %% tags=["remove-cell"]
# the formula above, as helpers.efficient.kv_cache_bytes (float32: 4 bytes per number)
assert counted == kv_cache_bytes(
    2, 4, 16, 64, batch_size=8, bytes_per_element=4
)
counted_63 = kv_cache_bytes(2, 4, 16, 63, batch_size=8, bytes_per_element=4)
assert counted_after_pass == counted_63
# what is allocated is the capacity, from the first pass on: the formula at T = 64
assert held_after_pass == held_bytes(caches) == counted
assert sum(cache.allocated_bytes() for cache in caches) == counted
glue("ch10_small_cache_kb", round(counted / 1024))
glue("ch10_small_cache_after_pass_kb", round(counted_after_pass / 1024))
glue("ch10_gpt2_cache_mb", round(gpt2_cache / 1e6, 1))
glue("ch10_gpt2_weights_mb", round(gpt2_count * 4 / 1e6))
glue("ch10_gpt2_batch_equal", math.ceil(gpt2_count * 4 / gpt2_cache))

# %% [markdown]
# For our model and 8 sequences of 64 tokens the caches hold
# {glue:text}`ch10_small_cache_kb` KiB, what the formula gives. For GPT-2 small in float32,
# one sequence of 1,024 tokens takes {glue:text}`ch10_gpt2_cache_mb` MB, beside
# {glue:text}`ch10_gpt2_weights_mb` MB of weights: from a batch of
# {glue:text}`ch10_gpt2_batch_equal` sequences on, the cache outweighs the model.
#
# :::{admonition} Going deeper: a preallocated cache
# :class: dropdown
# The caches above were made with room for 64 positions, and hold that much from their
# first use on: right after the pass over 63 tokens, when the filled part counts
# {glue:text}`ch10_small_cache_after_pass_kb` KiB, their storage already takes the
# formula's bytes at 64 positions. `generate` asks for the prompt's length plus the tokens
# to generate, so its caches are allocated once and never move.
# :::

# %% [markdown]
# (ch10-same-as-gpt2)=
# ## The same model as GPT-2
#
# Configured as GPT-2, the class is GPT-2. `load_gpt2` copies a checkpoint of the
# `transformers` library's GPT-2 into it, renaming (`h.0.attn.c_attn` is
# `blocks[0].self_attn.qkv_proj`) and transposing: GPT-2 stores its matrices as (in, out),
# `nn.Linear` as (out, in).
#
# A state dict records shapes, not every choice behind them: a model with 2 or 8 heads fits
# a 4-head checkpoint's tensors exactly. So `load_gpt2` also takes the checkpoint's
# `GPT2Config` and, before copying anything, checks the model against both: from the
# tensors, the layers, width, vocabulary, context, every shape, the biases and a tied head;
# from the configuration, the heads, the activation, the attention's scaling
# (`scale_attn_weights`, `scale_attn_by_inverse_layer_idx`) and `layer_norm_epsilon`.
#
# The reference here is a small GPT-2 with random weights (the book runs offline), drawn
# with standard deviation {glue:text}`ch10_reference_std` rather than 0.02, so that GELU and
# its tanh approximation differ visibly in the logits:

# %%
REFERENCE_STD = 0.2  # GPT2Config's initializer_range; GPT-2's own is 0.02
try:
    with warnings.catch_warnings():  # tqdm's, about Jupyter widgets
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import GPT2Config, GPT2LMHeadModel
except ModuleNotFoundError:  # Colab ships it
    GPT2LMHeadModel = None
    print(
        "This section needs the transformers package: pip install transformers"
    )
if GPT2LMHeadModel is not None:
    torch.manual_seed(0)
    sizes = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=16)
    config = GPT2Config(**sizes, initializer_range=REFERENCE_STD,
                        bos_token_id=0, eos_token_id=None)  # fmt: skip
    reference = GPT2LMHeadModel(config).eval()
    tiny_gpt2 = GPTConfig(
        vocab_size=64, context_length=16, d_model=32, **GPT2_LIKE
    )
    ours = GPT(tiny_gpt2)
    load_gpt2(ours, reference.state_dict(), config=config).eval()
    tokens = torch.randint(64, (4, 16), generator=seeded(0))
    with torch.no_grad():
        gpt2_error = (ours(tokens) - reference(tokens).logits).abs().max()
    print("logits agree within 1e-4:", gpt2_error.item() < 1e-4)

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert gpt2_error < 1e-4
glue("ch10_gpt2_atol", "1e-4")
glue("ch10_reference_std", REFERENCE_STD)

# %% [markdown]
# The logits agree within {glue:text}`ch10_gpt2_atol`, and so do greedy tokens, with and
# without the cache. The agreement can fail: an untransposed square output projection, or
# the exact GELU, moves the logits by more than the tolerance (folded cells).

# %% tags=["hide-input"]
if GPT2LMHeadModel is not None:
    prompt = tokens[:, :4]
    # an explicit mask: else generate() masks prompt tokens equal to the pad id
    everything = torch.ones_like(prompt)
    expected = reference.generate(prompt, attention_mask=everything,
                                  max_new_tokens=12, do_sample=False,
                                  pad_token_id=0)  # fmt: skip
    same_greedy = []
    for use_cache in (True, False):
        ours_tokens = ours.generate(
            prompt, 12, greedy=True, use_cache=use_cache
        )
        same_greedy.append(torch.equal(ours_tokens, expected))
        print(f"greedy tokens equal generate()'s, use_cache={use_cache}:",
              same_greedy[-1])  # fmt: skip

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert all(same_greedy)

# %% tags=["hide-input"]
if GPT2LMHeadModel is not None:
    flipped = GPT(tiny_gpt2).eval()
    load_gpt2(flipped, reference.state_dict(), config=config)
    with torch.no_grad():
        for index, block in enumerate(flipped.blocks):
            # GPT-2's (in, out), as it is
            conv1d = reference.state_dict()[
                f"transformer.h.{index}.attn.c_proj.weight"
            ]
            block.self_attn.out_proj.weight.copy_(conv1d)
        untransposed = (
            (flipped(tokens) - reference(tokens).logits).abs().max().item()
        )
        for block in ours.blocks:  # the exact GELU, not its tanh approximation
            block.ffn.activation = nn.GELU()
        exact_gelu = (
            (ours(tokens) - reference(tokens).logits).abs().max().item()
        )
        for block in ours.blocks:
            block.ffn.activation = nn.GELU(approximate="tanh")  # back
    print("untransposed Conv1D: logits differ by more than 1e-4:",
          untransposed > 1e-4)  # fmt: skip
    print("exact GELU: logits differ by more than 1e-4:", exact_gelu > 1e-4)

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert untransposed > 1e-4 and exact_gelu > 1e-4

# %% [markdown]
# A model built otherwise is refused, with the mismatch named: a 2-head model, which the
# tensors alone cannot tell from 4 heads, and the chapter's own activation, ReLU:

# %%
if GPT2LMHeadModel is not None:
    refused = []
    for wrong in (tiny_gpt2.replace(num_heads=2),
                  tiny_gpt2.replace(activation="relu")):  # fmt: skip
        try:
            load_gpt2(GPT(wrong), reference.state_dict(), config=config)
        except ValueError as error:
            refused.append(wrong)
            print(textwrap.fill(f"refused: {error}", 80))

# %% tags=["remove-cell"]
if GPT2LMHeadModel is not None:
    assert len(refused) == 2
    # without a configuration, a 2-head model is refused too: the head count is required
    two_heads = GPT(tiny_gpt2.replace(num_heads=2))
    with expect_error(TypeError):
        load_gpt2(two_heads, reference.state_dict())
    # the released weights file has no "transformer." prefix: it loads the same
    prefixless = {
        key.removeprefix("transformer."): value
        for key, value in reference.state_dict().items()
        if key != "lm_head.weight"
    }
    again = load_gpt2(GPT(tiny_gpt2), prefixless, config=config).eval()
    with torch.no_grad():
        assert torch.equal(again(tokens), ours(tokens))

# %% [markdown]
# Online, the same lines load the released GPT-2 small and sample from it:
#
# ```python
# from transformers import GPT2LMHeadModel, GPT2TokenizerFast
#
# released = GPT2LMHeadModel.from_pretrained("gpt2")  # downloads the weights
# tokenizer = GPT2TokenizerFast.from_pretrained("gpt2")
# model = GPT(GPT2_SMALL)
# load_gpt2(model, released.state_dict(), config=released.config).eval()
# prompt = torch.tensor([tokenizer.encode("The attention mechanism")])
# text = model.generate(prompt, 40, temperature=0.8, top_k=40,
#                       generator=seeded(0))
# print(tokenizer.decode(text[0]))
# ```
#
# (A source of this chapter gets several details of such a model wrong; see
# [Sources and errata](../book/sources.md).)

# %% tags=["remove-cell"]
vocabulary, width = 65, 32
embeddings = torch.randn(8, width)  # 8 tokens, embedded to n_embd = 32
# the post's query projection, sized by the vocabulary
query_sized_by_vocabulary = nn.Linear(vocabulary, vocabulary, bias=False)
with expect_error(RuntimeError):
    query_sized_by_vocabulary(embeddings)

# %% tags=["remove-cell"]
norms = [m for m in lm.modules() if m.__class__.__name__ == "RMSNorm"]
print(len(norms), "distinct RMSNorm modules for", len(lm.blocks), "blocks")
assert len({id(norm) for norm in norms}) == 2 * len(lm.blocks) + 1

# %% tags=["remove-cell"]
encoder = TransformerEncoder(2, 32, 4, 64).eval()
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
print("GPT's sinusoidal table is a parameter:",
      any(p is sinusoidal.position_embedding.pe for p in sinusoidal.parameters()))  # fmt: skip
with expect_error(RuntimeError):
    torch.randn(5, width) + table  # a 5-token sequence and the 8-row table
five_tokens = torch.zeros(1, 5, dtype=torch.long)
print("GPT reads 5 tokens:", tuple(sinusoidal(five_tokens).shape))

# %% [markdown]
# ## Summary
#
# - A decoder-only model is an embedding, pre-norm blocks with causal attention, a final
#   norm and a tied head; one pass over $T$ tokens trains $T$ predictions. As GPT-2 small
#   it has {glue:text}`ch10_gpt2_count` parameters and, loaded, GPT-2's logits.
# - On balanced brackets it ends {glue:text}`ch10_above_floor` nats above the language's
#   exact entropy, and closes a bracket opened out of an $n$-gram model's sight right
#   {glue:text}`ch10_lm_far` of the time (the $n$-gram model: {glue:text}`ch10_ngram_far`).
# - Temperature and top-$k$ trade diversity for validity; greedy decoding is locally, not
#   globally, most likely.
# - A key/value cache keeps a step's work flat in the context
#   ({glue:text}`ch10_cache_speedup` times faster at {glue:text}`ch10_cache_longest`
#   tokens here), at a memory cost linear in layers, heads, positions and batch.
# - A model this small is launch-bound on a GPU ({glue:text}`ch10_gpu_small_ms` ms per
#   step on an H100, slower than one CPU thread); at GPT-2 small's size the cached step
#   stays at {glue:text}`ch10_gpt2_gpu_ms` ms while recomputation grows.
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
# 2. **The cache of a bigger model.** A model has 32 layers, 32 query heads of width 128 and
#    8 key/value heads, and keeps its cache in bfloat16 (2 bytes). How much cache does one
#    sequence of 4,096 tokens need? And with as many key/value heads as query heads?
#
# :::{admonition} Solution
# :class: dropdown
# $2 \times 32 \times 8 \times 128 \times 4096 \times 2$ bytes $= 536{,}870{,}912$ bytes,
# 512 MiB; with 32 key/value heads four times as much, 2 GiB per sequence.
# `kv_cache_bytes(32, 8, 128, 4096)` computes it (bfloat16 is its default). Grouped-query
# attention (chapter 12) exists because of this line.
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
