"""A decoder-only language model (GPT): causal self-attention, a key/value cache, sampling.

Chapter 10 builds it on the pieces of chapters 2-6 and trains it; chapter 11 measures the
cost of its attention (grouped-query heads, sliding windows, the cache's memory). Shapes:
``B`` batch, ``T`` sequence length, ``D`` model width (``d_model``), ``H`` query heads,
``H_kv`` key/value heads (``num_kv_heads``), ``d_head = D / H``, ``V`` vocabulary size.

The model reads token ids ``(B, T)`` and returns logits ``(B, T, V)``: position ``t``
predicts token ``t + 1`` from tokens ``0..t`` only (the causal mask of chapter 2). A block is
pre-norm, ``x = x + attention(norm(x)); x = x + ffn(norm(x))``, and the stack ends with one
more norm before the output head, which shares its matrix with the token embedding when
``tie_weights``.

Positions (``positions=``): ``"learned"`` (one trained vector per position, GPT-2),
``"sinusoidal"`` (the fixed table of Vaswani et al.), both added to the token embeddings;
``"rope"`` (queries and keys rotated) and ``"alibi"`` (a distance penalty on the scores),
both applied inside attention; ``"none"`` (the causal mask alone).

Generation runs one position at a time. Without a cache every step re-reads the whole prefix;
with one :class:`KVCache` per layer a step computes the new position's query, key and value
only and reads the earlier keys and values from the cache. With a sliding ``window`` the cache
rolls: it keeps the last ``window`` positions only, so its memory is flat in the length.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers import _validate as check
from helpers.efficient import position_mask
from helpers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rotary,
)
from helpers.transformer import FeedForward, make_norm

__all__ = [
    "POSITIONS",
    "KVCache",
    "CausalSelfAttention",
    "GPTBlock",
    "GPT",
    "next_token_probabilities",
    "language_model_loss",
]

POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")


class KVCache:
    """The keys and values one attention layer has computed so far, for incremental decoding.

    ``keys`` and ``values`` are ``(B, H_kv, T_held, d_head)`` (None while empty); ``append``
    adds the new positions' and returns the keys and values they may read. One cache per
    layer: :meth:`GPT.new_caches` makes them. With grouped-query attention it holds ``H_kv``
    heads, not ``H``: that is where the memory saving is.

    ``window`` (None: keep everything) makes the cache *roll*: a layer whose query ``i``
    reads only keys ``j > i - window`` never needs older ones, so after each append the cache
    keeps the last ``window`` positions only, and its memory stays flat however long the
    sequence grows (Mistral's rolling buffer). ``length`` counts every position appended so far
    (the next one's index: RoPE and ALiBi use these true positions); ``held`` is how many the
    cache holds now, the last ones, from position ``start = length - held`` on.
    """

    def __init__(self, window: int | None = None) -> None:
        self.window = None if window is None else check.positive_int("window", window)
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.length = 0  # positions appended so far

    @property
    def held(self) -> int:
        """How many positions the cache holds now (at most ``window`` after an append)."""
        return 0 if self.keys is None else self.keys.shape[2]

    @property
    def start(self) -> int:
        """The position of the oldest key held."""
        return self.length - self.held

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, H_kv, T_new, d_head)`` keys and values; return those held plus the new.

        The returned keys sit at positions ``start .. length - 1`` (read ``start`` before the
        call); with a ``window``, at most ``window + T_new`` of them.
        """
        check.cache_entries(self, keys, values)
        self.length += keys.shape[2]
        if self.keys is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        if self.window is not None and self.held > self.window:  # roll: drop what no query reads
            # a copy, not a view: a view would keep the whole concatenation alive in memory
            self.keys = keys[:, :, -self.window :].clone()
            self.values = values[:, :, -self.window :].clone()
        return keys, values

    def memory_bytes(self) -> int:
        """Bytes of the keys and values held, counted: ``2 * B * H_kv * T_held * d_head * size``."""
        if self.keys is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values))

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        held = f"held={self.held}, window={self.window}"
        return f"KVCache(length={self.length}, {held}, keys={shape})"


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention with optional grouped-query heads, RoPE or ALiBi.

    ``num_kv_heads`` (default ``num_heads``) key/value heads are each shared by a group of
    ``num_heads / num_kv_heads`` query heads: ``num_heads`` is plain multi-head attention,
    1 is multi-query attention. ``qkv_proj`` stacks ``W_q`` (D rows), ``W_k`` and ``W_v``
    (``H_kv * d_head`` rows each); with ``H_kv = H`` that is :class:`MultiHeadAttention`'s
    layout. ``positions``: ``"rope"`` rotates queries and keys, ``"alibi"`` adds
    ``-m_h * (i - j)`` to the scores, ``"none"`` does neither. ``window``: query ``i`` reads
    keys ``j`` with ``i - window < j <= i`` only (None: every earlier key).

    ``forward(x (B, T, D), cache=None, return_attention=False)`` returns ``(B, T, D)``, or
    ``(output, weights (B, H, T, T_held + T))``. With a :class:`KVCache`, ``x`` holds only
    the new positions, which continue the cached ones (positions counted from ``cache.length``);
    with a rolling cache (``KVCache(window)``), the scores are ``T x (T_held + T)``, not
    ``T x (cache.length + T)``. A windowed layer given more than ``2 * window`` positions
    reads them in chunks of ``window`` (through a rolling cache if it was given none), so it
    never builds ``T x T`` scores either (unless ``return_attention``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = False,
        positions: str = "none",
        window: int | None = None,
    ) -> None:
        super().__init__()
        self.d_head = check.head_width(d_model, num_heads)
        self.num_kv_heads = check.kv_heads(num_heads, num_kv_heads)
        self.positions = check.attention_positions(positions)
        self.window = None if window is None else check.positive_int("window", window)
        self.d_model, self.num_heads = d_model, num_heads
        self.dropout = check.probability("dropout", dropout, check.DROPOUT_HINT)
        kv_width = self.num_kv_heads * self.d_head
        self.qkv_proj = nn.Linear(d_model, d_model + 2 * kv_width, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if self.positions == "alibi":
            self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, x: Tensor, cache: KVCache | None = None, return_attention: bool = False):
        check.self_attention_input(self, x, cache)
        batch, length, _ = x.shape
        if self.window is not None and length > 2 * self.window and not return_attention:
            # chunks of `window` queries through a rolling cache: scores at most w x 2w, not T x T
            cache = KVCache(self.window) if cache is None else cache
            return torch.cat([self(chunk, cache) for chunk in x.split(self.window, dim=1)], dim=1)
        offset = 0 if cache is None else cache.length
        kv_width = self.num_kv_heads * self.d_head
        q, k, v = self.qkv_proj(x).split([self.d_model, kv_width, kv_width], dim=-1)
        q = q.view(batch, length, self.num_heads, self.d_head).transpose(1, 2)  # (B, H, T, dh)
        k = k.view(batch, length, self.num_kv_heads, self.d_head).transpose(1, 2)
        v = v.view(batch, length, self.num_kv_heads, self.d_head).transpose(1, 2)
        if self.positions == "rope":  # rotate by the absolute positions offset .. offset + T - 1
            where = torch.arange(offset, offset + length, device=x.device)
            q, k = apply_rotary(q, where), apply_rotary(k, where)
        first_key = 0 if cache is None else cache.start  # the position of k's first key
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, held + T, dh): all of it, or a window's
        group = self.num_heads // self.num_kv_heads  # query heads per key/value head
        if group > 1:  # (repeat_interleave(1) would copy the whole cache at every step)
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        bias = self._score_bias(length, offset, x, first_key)  # (H or 1, T, held + T) or None
        dropout_p = self.dropout if self.training else 0.0
        if return_attention:  # written out, to return the weights
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
            scores = scores if bias is None else scores + bias
            weights = F.dropout(scores.softmax(dim=-1), dropout_p)
            heads = weights @ v
        else:  # PyTorch's fused kernel
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
        output = self.out_proj(heads.transpose(1, 2).reshape(batch, length, self.d_model))
        return (output, weights) if return_attention else output

    def _score_bias(self, length: int, offset: int, x: Tensor, first_key: int = 0):
        """What is added to the scores: -inf where a key is masked, ALiBi's -m_h * (i - j).

        None when nothing is: a decoding step's single query that may read every key held
        (no window, or all of them inside it), so that step builds no mask at all.
        """
        sees_all = self.window is None or offset - first_key < self.window
        if length == 1 and self.positions != "alibi" and sees_all:
            return None
        # the new queries sit at positions offset .. offset + T - 1, the keys at
        # first_key .. offset + T - 1 (first_key = 0 unless a rolling cache dropped the oldest)
        query_positions = torch.arange(offset, offset + length, device=x.device)
        key_positions = torch.arange(first_key, offset + length, device=x.device)
        allowed = position_mask(query_positions, key_positions, window=self.window)  # (T, Tk)
        bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)[None]
        if self.positions == "alibi":
            distance = query_positions[:, None] - key_positions[None, :]
            bias = -self.slopes.to(x.dtype)[:, None, None] * distance.to(x.dtype)  # (H, T, Tk)
        return bias.masked_fill(~allowed, -math.inf)


class GPTBlock(nn.Module):
    """One pre-norm decoder-only block: ``x + attn(norm1(x))``, then ``x + ffn(norm2(x))``.

    Two norms, one per sublayer (each with its own gain); ``activation`` is the feed-forward
    network's (``"relu"``, ``"gelu"`` or ``"gelu_tanh"``). The submodules carry the names of
    :class:`helpers.transformer.EncoderBlock`'s (``self_attn``, ``ffn``, ``norm1``, ``norm2``),
    so with ``H_kv = H`` an encoder block's ``state_dict`` loads into it unchanged.
    ``forward(x (B, T, D), cache=None) -> (B, T, D)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_width: int,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = False,
        positions: str = "none",
        window: int | None = None,
        norm: str = "rms",
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.self_attn = CausalSelfAttention(
            d_model, num_heads, num_kv_heads, dropout, bias, positions, window
        )
        self.ffn = FeedForward(d_model, ffn_width, dropout, bias, activation=activation)
        self.norm1 = make_norm(norm, d_model, bias=bias)
        self.norm2 = make_norm(norm, d_model, bias=bias)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        x = x + self.dropout1(self.self_attn(self.norm1(x), cache))
        return x + self.dropout2(self.ffn(self.norm2(x)))


class GPT(nn.Module):
    """A decoder-only Transformer language model: token ids ``(B, T)`` -> logits ``(B, T, V)``.

    ``context_length`` is the longest sequence it reads (with a cache: the cached positions
    plus the new ones). ``ffn_width`` defaults to ``4 * d_model``. ``positions`` is one of
    :data:`POSITIONS`. ``tie_weights`` makes the output head reuse the token embedding
    matrix. ``norm`` is ``"rms"`` (RMSNorm, the default) or ``"layer"`` (LayerNorm, as GPT-2;
    with ``bias=True`` it has a bias too). ``activation`` is the feed-forward network's:
    ``"relu"`` (the default), ``"gelu"`` or ``"gelu_tanh"`` (GPT-2's tanh approximation).

    Weights start from ``N(0, 0.02^2)``, biases at 0, as in GPT-2. ``residual_init="gpt2"``
    also follows GPT-2 for the two projections per block that write into the residual stream
    (attention's ``out_proj``, the feed-forward network's ``linear2``): standard deviation
    ``0.02 / sqrt(2 * num_layers)``. The residual stream is a sum of ``2 * num_layers`` such
    writes; independent terms add their variances, so scaling each by ``1/sqrt(2L)`` keeps the
    stream's scale at initialization the same however deep the model is. The default
    (``None``) draws them at 0.02 like every other weight. GPT-2, for
    :func:`helpers.interop.load_gpt2`: ``norm="layer", bias=True, activation="gelu_tanh"``
    with learned positions and a tied head (the defaults).
    """

    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        num_kv_heads: int | None = None,
        ffn_width: int | None = None,
        positions: str = "learned",
        tie_weights: bool = True,
        dropout: float = 0.0,
        bias: bool = False,
        window: int | None = None,
        *,
        norm: str = "rms",
        activation: str = "relu",
        residual_init: str | None = None,
    ) -> None:
        super().__init__()
        check.gpt_arguments(vocab_size, context_length, num_layers, positions, tie_weights)
        self.vocab_size, self.context_length = vocab_size, context_length
        self.positions, self.activation = positions, activation
        self.residual_init = check.residual_init(residual_init)
        ffn_width = 4 * d_model if ffn_width is None else ffn_width
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding: nn.Module | None = None  # "rope", "alibi": inside attention
        if positions == "learned":
            self.position_embedding = LearnedPositionalEmbedding(d_model, context_length)
        elif positions == "sinusoidal":
            self.position_embedding = SinusoidalPositionalEncoding(d_model, context_length)
        inside = positions if positions in ("rope", "alibi") else "none"
        self.dropout = nn.Dropout(dropout)
        sizes = (d_model, num_heads, ffn_width, num_kv_heads, dropout, bias, inside, window)
        self.blocks = nn.ModuleList(GPTBlock(*sizes, norm, activation) for _ in range(num_layers))
        self.final_norm = make_norm(norm, d_model, bias=bias)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(self._init_weights)
        if residual_init == "gpt2":  # the 2L writes into the residual stream, scaled down
            for block in self.blocks:
                for layer in (block.self_attn.out_proj, block.ffn.linear2):
                    nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * num_layers))
        if tie_weights:  # one (V, D) matrix reads tokens in and writes logits out
            self.head.weight = self.token_embedding.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        offset = check.gpt_input(self, tokens, caches)
        x = self.token_embedding(tokens)  # (B, T, D)
        # positions offset .. offset + T - 1: with a cache, the new tokens follow the cached ones
        x = self.dropout(x + self._position_rows(offset, tokens.shape[1], x.dtype))
        for index, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[index])
        return self.head(self.final_norm(x))  # (B, T, V)

    def _position_rows(self, offset: int, length: int, dtype: torch.dtype) -> Tensor | float:
        """Rows offset .. offset + length - 1 of the added position table (0 if none)."""
        table = getattr(self.position_embedding, "weight", None)  # learned
        table = getattr(self.position_embedding, "pe", table)  # sinusoidal
        return 0.0 if table is None else table[offset : offset + length].to(dtype)

    def new_caches(self, batch_size: int) -> list[KVCache]:
        """One empty :class:`KVCache` per layer (``batch_size`` is checked on first use).

        A model built with a ``window`` gets rolling caches (``KVCache(window)``): each holds
        the last ``window`` positions only.
        """
        check.positive_int("batch_size", batch_size)
        return [KVCache(block.self_attn.window) for block in self.blocks]

    @torch.no_grad()
    def generate(
        self,
        prompt: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        greedy: bool = False,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        end_id: int | None = None,
        pad_id: int | None = None,
    ) -> Tensor:
        """Continue ``prompt (B, T0)`` by ``max_new_tokens``: returns ``(B, T0 + max_new_tokens)``.

        Each step turns the last position's logits into a distribution
        (:func:`next_token_probabilities`: ``temperature``, ``top_k``) and samples from it with
        ``generator``, or takes its arg-max if ``greedy``. ``use_cache=False`` re-reads the
        whole sequence at every step (same tokens, more work). Runs in ``eval()`` mode and
        gives the model back in the mode it was in.

        ``end_id``: a sequence that emits this token stops there; its later positions hold
        ``pad_id`` (default ``end_id``), and generation stops once every sequence has ended.
        Every sequence draws from ``generator`` at every step, ended or not, so the tokens up to
        each end are the ones generated without ``end_id``.
        """
        check.generation(self, prompt, max_new_tokens, greedy, use_cache)
        end_id, pad_id = check.end_and_pad(self.vocab_size, end_id, pad_id)
        was_training = self.training
        self.eval()
        tokens = prompt
        caches = self.new_caches(prompt.shape[0]) if use_cache else None
        step_input = prompt
        ended = torch.zeros(prompt.shape[0], 1, dtype=torch.bool, device=prompt.device)
        for _ in range(max_new_tokens):
            logits = self(step_input, caches)[:, -1]  # (B, V)
            if greedy:
                next_token = logits.argmax(dim=-1, keepdim=True)
            else:
                probabilities = next_token_probabilities(logits, temperature, top_k)
                next_token = torch.multinomial(probabilities, 1, generator=generator)
            if end_id is not None:
                next_token = next_token.masked_fill(ended, pad_id)
                ended = ended | (next_token == end_id)
            tokens = torch.cat([tokens, next_token], dim=1)
            step_input = next_token if use_cache else tokens
            if end_id is not None and ended.all():
                break
        self.train(was_training)
        missing = prompt.shape[1] + max_new_tokens - tokens.shape[1]
        return F.pad(tokens, (0, missing), value=0 if pad_id is None else pad_id)


def next_token_probabilities(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None
) -> Tensor:
    """The sampling distribution ``softmax(logits / temperature)``, over the ``top_k`` best only.

    ``logits (..., V)``; returns probabilities of the same shape. A temperature below 1
    sharpens the distribution (towards the arg-max), above 1 flattens it (towards uniform);
    ``top_k`` keeps the k most likely tokens and renormalizes (ties at the k-th are kept).
    """
    temperature, top_k = check.sampling(logits, temperature, top_k)
    scaled = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth_best = scaled.topk(top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth_best, -math.inf)
    return scaled.softmax(dim=-1)


def language_model_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of next-token prediction: logits ``(B, T, V)``, targets ``(B, T)``.

    ``targets[b, t]`` is the token that follows position ``t``; the ones equal to -100
    (PyTorch's ``ignore_index``) do not count.
    """
    check.logits_targets(logits, targets)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
