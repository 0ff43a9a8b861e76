"""A decoder-only language model (GPT): causal self-attention, a key/value
cache, sampling.

Chapter 10 builds it on the pieces of chapters 2-6 and trains it; chapter 11
caches its keys and values; chapter 13 measures the cost of its attention
(grouped-query heads, sliding windows, the cache's memory). Shapes: ``B``
batch, ``T`` sequence length, ``D`` model width (``d_model``), ``H`` query
heads, ``H_kv`` key/value heads (``num_kv_heads``), ``d_head = D / H``, ``V``
vocabulary size.

Every size and choice of a model is one :class:`GPTConfig`, checked once when it
is made; ``GPT(config)`` hands the same config to each block and each attention
layer (nanoGPT's layout), which read the fields they need.

The model reads token ids ``(B, T)`` and returns logits ``(B, T, V)``: position
``t`` predicts token ``t + 1`` from tokens ``0..t`` only (the causal mask of
chapter 2). A block is pre-norm, ``x = x + attention(norm(x)); x = x +
ffn(norm(x))``, and the stack ends with one more norm before the output head,
which shares its matrix with the token embedding when ``tie_weights``.

Positions (``positions=``): ``"learned"`` (one trained vector per position,
GPT-2), ``"sinusoidal"`` (the fixed table of Vaswani et al.), both added to the
token embeddings; ``"rope"`` (queries and keys rotated) and ``"alibi"`` (a
distance penalty on the scores), both applied inside attention; ``"none"`` (the
causal mask alone).

Generation runs one position at a time. Without a cache every step re-reads the
whole prefix; with one :class:`helpers.kv_cache.KVCache` per layer a step
computes the new position's query, key and value only, writes the key and
value into the cache's preallocated buffers and reads the earlier ones from
there: apart from
attention's reading of the cache, a step's work (the operators it dispatches,
the elements it writes) is the same at every length, and the loop reads no value
back to the host (:class:`helpers.analysis.DispatchCounter` counts all three).
With a sliding ``window`` the cache rolls: it keeps the last ``window``
positions only, so its memory is flat in the length. A model with a window and
relative positions (``"rope"``, ``"alibi"``, or ``"none"``) *streams*: nothing
in it depends on how far a position is from the start, so it reads and generates
past ``context_length``, its rolling caches stepping on at a flat cost
(Mistral's rolling buffer); models with a table of absolute positions stop at
``context_length``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from helpers import _validate as check
from helpers.attention import attend_heads, merge_heads, split_heads
from helpers.kv_cache import KVCache
from helpers.masks import position_mask
from helpers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rotary,
)
from helpers.transformer import ACTIVATIONS, NORMS, FeedForward, make_norm

__all__ = [
    "POSITIONS",
    "GPTConfig",
    "CausalSelfAttention",
    "score_bias",
    "GPTBlock",
    "GPT",
    "top_k_filter",
    "next_token_probabilities",
]

POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")
# what a model with a window may read past its context (GPTConfig.streams)
STREAMING_POSITIONS = ("rope", "alibi", "none")


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Every size and choice of a :class:`GPT` (nanoGPT's ``GPTConfig``),
    checked once, here.

    ``vocab_size`` tokens; ``context_length``, the longest sequence the model
    reads (with a cache: the cached positions plus the new ones). ``num_heads``
    query heads share ``num_kv_heads`` key/value heads (None: as many; 1:
    multi-query attention). ``ffn_width``: the feed-forward network's hidden
    width (None: ``4 * d_model``). ``positions``: one of :data:`POSITIONS`.
    ``window``: query ``i`` reads keys ``i - window < j <= i`` only (None: every
    earlier key). ``tie_weights``: the output head reuses the token embedding
    matrix. ``norm``: ``"rms"`` (RMSNorm) or ``"layer"`` (LayerNorm, with a bias
    when ``bias``). ``activation``: ``"relu"``, ``"gelu"`` or ``"gelu_tanh"``
    (GPT-2's tanh approximation). ``residual_init``: None or ``"gpt2"`` (see
    :class:`GPT`). GPT-2 small: ``GPTConfig(vocab_size=50_257,
    context_length=1024, d_model=768, num_layers=12, num_heads=12, bias=True,
    norm="layer", activation="gelu_tanh", residual_init="gpt2")``. Fields are
    keywords; ``config.replace(window=4)`` is a copy with some of them changed.
    A model with a ``window`` and relative positions (``"rope"``, ``"alibi"``,
    ``"none"``) :attr:`streams`: it reads sequences longer than
    ``context_length``.
    """

    vocab_size: int
    context_length: int
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int | None = None
    ffn_width: int | None = None
    positions: str = "learned"
    window: int | None = None
    dropout: float = 0.0
    bias: bool = False
    tie_weights: bool = True
    norm: str = "rms"
    activation: str = "relu"
    residual_init: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "context_length",
            "d_model",
            "num_layers",
            "num_heads",
        ):
            check.positive_int(name, getattr(self, name))
        for name in ("ffn_width", "window"):
            if getattr(self, name) is not None:
                check.positive_int(name, getattr(self, name))
        check.head_width(self.d_model, self.num_heads)
        _check_kv_heads(self.num_heads, self.num_kv_heads)
        _check_model_positions(self.positions, POSITIONS)
        check.probability("dropout", self.dropout, check.DROPOUT_HINT)
        check.boolean("bias", self.bias)
        check.boolean("tie_weights", self.tie_weights)
        _check_norm(self.norm, NORMS)
        check.activation(self.activation, ACTIVATIONS)
        _check_residual_init(self.residual_init)

    @property
    def streams(self) -> bool:
        """Whether the model reads past ``context_length``: with a ``window``
        and relative positions, a query reads the last ``window`` keys by their
        distance alone, so no position is too far from the start (Mistral's
        rolling buffer). A table of absolute positions (``"learned"``,
        ``"sinusoidal"``) has ``context_length`` rows; without a window, the
        cache and the cost of a step would grow without bound."""
        return self.window is not None and self.positions in STREAMING_POSITIONS

    def replace(self, **changes) -> GPTConfig:
        """A copy with some fields changed, e.g.
        ``config.replace(num_kv_heads=1)``."""
        return dataclasses.replace(self, **changes)


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention with optional grouped-query heads, RoPE
    or ALiBi.

    Built from a :class:`GPTConfig`. Its ``H_kv`` key/value heads are each
    shared by a group of ``H / H_kv`` query heads, read in place, never copied
    per query head (:func:`helpers.attention.attend_heads`, the package's one
    attention kernel); ``qkv_proj`` stacks ``W_q`` (D rows),
    ``W_k`` and ``W_v`` (``H_kv * d_head`` rows each),
    :class:`MultiHeadAttention`'s layout when ``H_kv = H``. ``"rope"`` rotates
    queries and keys, ``"alibi"`` adds ``-m_h * (i - j)`` to the scores
    (:func:`score_bias`, which also masks); other positions are the embeddings'
    business.

    ``forward(x (B, T, D), cache=None, return_attention=False)`` returns ``(B,
    T, D)``, or ``(output, weights (B, H, T, T_held + T))``. With a
    :class:`KVCache`, ``x`` holds only the new positions, which continue the
    cached ones. A windowed layer reads more than ``2 * window`` positions in
    chunks of ``window`` queries through a rolling cache: never ``T x T``
    scores.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.d_model, self.num_heads = config.d_model, config.num_heads
        self.num_kv_heads = config.num_kv_heads or config.num_heads
        self.d_head = config.d_model // config.num_heads
        self.positions, self.window, self.dropout = (
            config.positions,
            config.window,
            config.dropout,
        )
        kv_width = self.num_kv_heads * self.d_head
        self.qkv_proj = nn.Linear(
            config.d_model, config.d_model + 2 * kv_width, bias=config.bias
        )
        self.out_proj = nn.Linear(
            config.d_model, config.d_model, bias=config.bias
        )
        slopes = (
            alibi_slopes(config.num_heads)
            if config.positions == "alibi"
            else None
        )
        self.register_buffer("slopes", slopes, persistent=False)  # (H,) or None

    def forward(
        self,
        x: Tensor,
        cache: KVCache | None = None,
        return_attention: bool = False,
    ):
        _check_self_attention_input(self, x, cache, KVCache)
        long = self.window is not None and x.shape[1] > 2 * self.window
        if not long or return_attention:
            return self._attend(x, cache, return_attention)
        # chunks of `window` queries, each reading the last `window` keys of a
        # rolling cache and its own: scores at most w x 2w, never T x T
        if cache is None:  # in training, out of place: backward reads them all
            cache = KVCache(self.window, differentiable=torch.is_grad_enabled())
        chunks = x.split(self.window, dim=1)
        return torch.cat([self._attend(c, cache) for c in chunks], dim=1)

    def _attend(
        self, x: Tensor, cache: KVCache | None, return_attention: bool = False
    ):
        """``forward`` on ``x (B, T, D)``, whose positions continue the
        cache's."""
        length = x.shape[1]
        # the position of x's first token
        offset = 0 if cache is None else cache.length
        kv_width = self.num_kv_heads * self.d_head
        q, k, v = self.qkv_proj(x).split(
            [self.d_model, kv_width, kv_width], dim=-1
        )
        q = split_heads(q, self.num_heads)  # (B, H, T, dh)
        k = split_heads(k, self.num_kv_heads)  # (B, H_kv, T, dh)
        v = split_heads(v, self.num_kv_heads)
        # rotate by the absolute positions offset .. offset + T - 1
        if self.positions == "rope":
            where = torch.arange(offset, offset + length, device=x.device)
            q, k = apply_rotary(q, where), apply_rotary(k, where)
        # the position of k's first key
        first_key = 0 if cache is None else cache.start
        if cache is not None:
            # (B, H_kv, held + T, dh): all of it, or a window's
            k, v = cache.append(k, v)
        # (1 or H, T, T_k), or None
        bias = score_bias(
            offset, length, first_key, self.window, self.slopes, x
        )
        dropout_p = self.dropout if self.training else 0.0
        # each key/value head serves its group of query heads, uncopied
        heads, weights = attend_heads(
            q,
            k,
            v,
            bias=bias,
            dropout_p=dropout_p,
            need_weights=return_attention,
        )
        output = self.out_proj(merge_heads(heads))  # (B, T, D)
        return (output, weights) if return_attention else output


def score_bias(
    offset: int,
    length: int,
    first_key: int = 0,
    window: int | None = None,
    slopes: Tensor | None = None,
    like: Tensor | None = None,
) -> Tensor | None:
    """What causal attention adds to its scores: -inf where a key is masked,
    ALiBi's penalty.

    The queries sit at positions ``offset .. offset + length - 1``, the keys at
    ``first_key .. offset + length - 1`` (``first_key = 0`` unless a rolling
    cache dropped the oldest); a query reads the keys
    :func:`helpers.masks.position_mask` allows (causal, within ``window``). With
    ALiBi ``slopes (H,)`` the bias is ``-m_h * (i - j)`` on the allowed keys,
    ``(H, T, T_k)``, else ``(1, T, T_k)``, in ``like``'s dtype and device. None
    when nothing is added: a decoding step's single query that may read every
    key held (no window, or all of them inside it), so that step builds no mask
    at all.
    """
    sees_all = window is None or offset - first_key < window
    if length == 1 and slopes is None and sees_all:
        return None
    dtype, device = (
        (torch.float32, None) if like is None else (like.dtype, like.device)
    )
    query_positions = torch.arange(offset, offset + length, device=device)
    key_positions = torch.arange(first_key, offset + length, device=device)
    # (T, Tk)
    allowed = position_mask(query_positions, key_positions, window=window)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device)[None]
    if slopes is not None:
        distance = query_positions[:, None] - key_positions[None, :]
        # (H, T, Tk)
        bias = -slopes.to(dtype)[:, None, None] * distance.to(dtype)
    return bias.masked_fill(~allowed, -math.inf)


class GPTBlock(nn.Module):
    """One pre-norm decoder-only block: ``x + attn(norm1(x))``, then ``x +
    ffn(norm2(x))``.

    Two norms, one per sublayer (each with its own gain). The submodules carry
    the names of :class:`helpers.transformer.EncoderBlock`'s (``self_attn``,
    ``ffn``, ``norm1``, ``norm2``), so with ``H_kv = H`` an encoder block's
    ``state_dict`` loads into it unchanged. ``forward(x (B, T, D), cache=None)
    -> (B, T, D)``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        width, dropout, bias = config.d_model, config.dropout, config.bias
        self.self_attn = CausalSelfAttention(config)
        ffn_width = config.ffn_width or 4 * width
        self.ffn = FeedForward(
            width, ffn_width, dropout, bias, activation=config.activation
        )
        self.norm1 = make_norm(config.norm, width, bias=bias)
        self.norm2 = make_norm(config.norm, width, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        x = x + self.dropout1(self.self_attn(self.norm1(x), cache))
        return x + self.dropout2(self.ffn(self.norm2(x)))


class GPT(nn.Module):
    """A decoder-only Transformer language model: token ids ``(B, T)`` -> logits
    ``(B, T, V)``.

    ``GPT(config)``, one :class:`GPTConfig` holding every size and choice.
    Weights start from ``N(0, 0.02^2)``, biases at 0, as in GPT-2.
    ``residual_init="gpt2"`` also follows GPT-2 for the two projections per
    block that write into the residual stream (attention's ``out_proj``, the
    feed-forward network's ``linear2``): standard deviation ``0.02 / sqrt(2 *
    num_layers)``. The residual stream is a sum of ``2 * num_layers`` such
    writes; independent terms add their variances, so scaling each by
    ``1/sqrt(2L)`` keeps the stream's scale at initialization the same however
    deep the model is. The default (``None``) draws them at 0.02 like every
    other weight.
    """

    END_CHECK_EVERY = 16  # generate's steps between two end checks off the CPU

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        _check_gpt_config(config)
        self.config = config
        self.vocab_size = config.vocab_size
        self.context_length = config.context_length
        width = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, width)
        # a table added to the embeddings; "rope" and "alibi" act in attention
        self.position_embedding = None
        if config.positions == "learned":
            self.position_embedding = LearnedPositionalEmbedding(
                width, self.context_length
            )
        elif config.positions == "sinusoidal":
            self.position_embedding = SinusoidalPositionalEncoding(
                width, self.context_length
            )
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            GPTBlock(config) for _ in range(config.num_layers)
        )
        self.final_norm = make_norm(config.norm, width, bias=config.bias)
        self.head = nn.Linear(width, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        # the 2L writes into the residual stream, scaled down
        if config.residual_init == "gpt2":
            for block in self.blocks:
                for layer in (block.self_attn.out_proj, block.ffn.linear2):
                    nn.init.normal_(
                        layer.weight,
                        std=0.02 / math.sqrt(2 * config.num_layers),
                    )
        # one (V, D) matrix reads tokens in and writes logits out
        if config.tie_weights:
            self.head.weight = self.token_embedding.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        tokens: Tensor,
        caches: list[KVCache] | None = None,
        validate: bool = True,
    ) -> Tensor:
        """Logits ``(B, T, V)`` for token ids ``(B, T)``.

        With ``caches`` (one :class:`KVCache` per layer), the tokens continue
        the cached ones. ``validate=False`` skips the check of the tokens, which
        reads their values back (``generate`` checks its prompt once).
        """
        if validate:
            _check_gpt_input(self, tokens, caches)
        # the position of the first token: the caches hold the ones before it
        offset = 0 if caches is None else caches[0].length
        x = self.token_embedding(tokens)  # (B, T, D)
        if self.position_embedding is not None:  # rows offset .. offset + T - 1
            x = self.position_embedding(x, offset)
        x = self.dropout(x)
        for index, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[index])
        # the head's weight is the token embedding's when tied
        return self.head(self.final_norm(x))  # (B, T, V)

    def new_caches(
        self, batch_size: int, capacity: int | None = None
    ) -> list[KVCache]:
        """One empty :class:`KVCache` per layer (``batch_size`` is checked on
        first use).

        ``capacity``: the positions each cache allocates room for on its first
        use (None: as many as that use brings, then doubling). A model built
        with a ``window`` gets rolling caches (``KVCache(window)``): each holds
        the last ``window`` positions only.
        """
        check.positive_int("batch_size", batch_size)
        return [
            KVCache(block.self_attn.window, capacity) for block in self.blocks
        ]

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
        """Continue ``prompt (B, T0)`` by ``max_new_tokens``: returns ``(B, T0 +
        max_new_tokens)``.

        Each step turns the last position's logits into a distribution
        (:func:`next_token_probabilities`: ``temperature``, ``top_k``) and
        samples from it with ``generator``, or takes its arg-max if ``greedy``.
        ``use_cache=False`` re-reads the whole sequence at every step (same
        tokens, more work). Runs in ``eval()`` mode and gives the model back in
        the mode it was in.

        Past the context: a model that :attr:`~GPTConfig.streams` (a sliding
        window and relative positions) steps on with its rolling caches, each
        step at the same cost as inside the context, and reads a prompt of any
        length. Any other model reads at most ``context_length`` tokens, so a
        step whose text is longer reads only the last ``context_length`` of it,
        afresh and without the cache (nanoGPT's crop): the text may be as long
        as you like, each such step costs a whole context's forward pass, and
        tokens further back are forgotten; a prompt longer than the context is
        cropped the same way. So is every step of ``use_cache=False``, which
        for a streaming model gives the stream's logits as long as its
        receptive field, ``num_layers * (window - 1) + 1`` tokens, fits in the
        context.

        ``end_id``: a sequence that emits this token stops there; its later
        positions hold ``pad_id`` (default ``end_id``), and generation stops
        once every sequence has ended. Every sequence draws from ``generator``
        at every step, ended or not, so the tokens up to each end are the ones
        generated without ``end_id``.

        The loop never reads a tensor's value back into Python, which on a GPU
        would make the host wait for the device at every step instead of queuing
        the next step's work: the prompt is checked once, before it (generated
        tokens are in the vocabulary by construction); the output and the caches
        are allocated once, for ``T0 + max_new_tokens`` positions, and each step
        writes one position into them. The one exception is the test "has every
        sequence ended?" with ``end_id``: on the CPU, where operators run one
        after the other anyway, it costs nothing and runs every step; elsewhere
        it runs every :attr:`END_CHECK_EVERY` steps, so a batch that has ended
        runs at most that many steps more than it must, steps whose tokens are
        padding either way: the output is the same.
        """
        _check_generation(self, prompt, max_new_tokens, greedy, use_cache)
        if not greedy:  # greedy decoding reads neither
            _check_sampling_options(temperature, top_k)
        _check_generator(generator)
        _check_end_and_pad(self.vocab_size, end_id, pad_id)
        if pad_id is None:  # the end token also pads what follows it
            pad_id = end_id
        was_training = self.training
        self.eval()
        batch, prompt_length = prompt.shape
        total = prompt_length + max_new_tokens
        tokens = prompt.new_full(
            (batch, total), 0 if pad_id is None else pad_id
        )
        tokens[:, :prompt_length] = prompt
        context = self.context_length
        # with a window and relative positions the caches roll on past it
        crop = not (use_cache and self.config.streams)
        caches = (
            self.new_caches(batch, capacity=min(total, context))
            if use_cache
            else None
        )
        check_every = 1 if prompt.device.type == "cpu" else self.END_CHECK_EVERY
        step_input = prompt
        ended = torch.zeros(batch, 1, dtype=torch.bool, device=prompt.device)
        for step, position in enumerate(range(prompt_length, total), start=1):
            if crop and position > context:  # the last context, afresh
                step_input = tokens[:, position - context : position]
                caches = None
            # the last position's logits (B, V); the prompt was checked above
            logits = self(step_input, caches, validate=False)[:, -1]
            if greedy:
                next_token = logits.argmax(dim=-1, keepdim=True)
            else:
                # next_token_probabilities, unchecked: no value read back
                probabilities = top_k_filter(
                    logits / temperature, top_k
                ).softmax(dim=-1)
                next_token = torch.multinomial(
                    probabilities, 1, generator=generator
                )
            if end_id is not None:
                next_token = next_token.masked_fill(ended, pad_id)
                ended = ended | (next_token == end_id)
            tokens[:, position : position + 1] = next_token
            # with a cache, the new token alone: the cache holds the rest
            step_input = (
                next_token if caches is not None else tokens[:, : position + 1]
            )
            if end_id is not None and step % check_every == 0 and ended.all():
                break  # the rest of `tokens` is padding already
        self.train(was_training)
        return tokens


def _check_top_k(logits: Tensor, k: int | None) -> None:
    check.tensor("logits", logits, floating=True, min_ndim=1)
    if k is not None:
        check.positive_int("k", k)


def top_k_filter(logits: Tensor, k: int | None) -> Tensor:
    """``logits (..., V)`` with all but the ``k`` largest of each row set to
    ``-inf``.

    Ties at the k-th largest are kept; a softmax afterwards renormalizes over
    what is left. ``k`` None (or at least ``V``) keeps every logit.
    """
    _check_top_k(logits, k)
    if k is None or k >= logits.shape[-1]:
        return logits
    kth_best = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth_best, -math.inf)


def next_token_probabilities(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None
) -> Tensor:
    """The sampling distribution ``softmax(logits / temperature)``, over the
    ``top_k`` best only.

    ``logits (..., V)``; returns probabilities of the same shape. A temperature
    below 1 sharpens the distribution (towards the arg-max), above 1 flattens it
    (towards uniform); ``top_k`` keeps the k most likely tokens and renormalizes
    (:func:`top_k_filter`).
    """
    _check_sampling(logits, temperature, top_k)
    return top_k_filter(logits / temperature, top_k).softmax(dim=-1)


# ------------------------------------------------------------ this module's checks
# Each has one caller, above; the generic checks are in helpers._validate.


def _check_kv_heads(num_heads: int, num_kv_heads) -> None:
    """The number of key/value heads: None (as many as ``num_heads``) or a
    divisor of ``num_heads``."""
    if num_kv_heads is None:
        return
    check.positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        divisors = [h for h in range(1, num_heads + 1) if num_heads % h == 0]
        raise ValueError(
            f"num_heads={num_heads} is not divisible by "
            f"num_kv_heads={num_kv_heads}: each key/value head serves a group "
            "of num_heads / num_kv_heads query heads, so pick num_kv_heads "
            f"among {divisors} (1 is multi-query attention, {num_heads} plain "
            "multi-head attention)"
        )


def _check_self_attention_input(
    layer: nn.Module, x, cache, cache_type: type
) -> None:
    """A causal self-attention layer's ``x (B, T, D)`` and its optional
    ``cache_type`` cache."""
    check.sequence("x", x, layer.d_model, type(layer).__name__)
    check.module_dtype("x", x, layer)
    if cache is not None and not isinstance(cache, cache_type):
        raise TypeError(
            f"cache must be a {cache_type.__module__}.{cache_type.__name__} or "
            f"None, got {type(cache).__name__}; make one per layer with "
            "model.new_caches(batch_size)"
        )
    if cache is not None:
        check.cache_window(cache, layer.window, type(layer).__name__)
    # read without slicing the buffers
    held = None if cache is None else cache.entry_shape
    if held is not None and held[0] != x.shape[0]:
        raise ValueError(
            f"the cache holds {held[0]} sequences but x has {x.shape[0]}; "
            "use one cache per batch (model.new_caches(batch_size))"
        )


RESIDUAL_INITS = (None, "gpt2")


def _check_residual_init(value) -> None:
    """How a GPT initializes the projections that write into the residual
    stream."""
    if value not in RESIDUAL_INITS:
        raise ValueError(
            "residual_init must be None (every weight from N(0, 0.02^2)) or "
            "'gpt2' (the residual projections at std 0.02 / sqrt(2 * "
            f"num_layers)), got {value!r}"
        )


def _check_model_positions(positions, choices: tuple) -> None:
    """How a decoder-only model knows positions: one of ``choices``."""
    hint = (
        "'learned' and 'sinusoidal' are added to the token embeddings, 'rope' "
        "and 'alibi' act inside attention, 'none' leaves only the causal mask"
    )
    check.one_of("positions", positions, choices, hint)


def _check_norm(kind, choices: tuple) -> None:
    """A normalization layer's name: one of ``choices``."""
    hint = "'rms' (RMSNorm, the book's default) or 'layer' (LayerNorm, GPT-2's)"
    check.one_of("norm", kind, choices, hint)


def _check_gpt_config(config) -> None:
    if not isinstance(config, GPTConfig):
        raise TypeError(
            f"GPT takes one GPTConfig, got {type(config).__name__}; "
            "build it as GPT(GPTConfig(vocab_size=..., context_length=..., "
            "d_model=..., ...))"
        )


def _check_gpt_input(model, tokens_in, caches) -> None:
    """Token ids ``(B, T)`` for a GPT, and its caches (one per layer, all of
    the same length), which with the new tokens fit the model's context."""
    check.tokens(tokens_in, model.vocab_size)
    cached = 0
    if caches is not None:
        if not isinstance(caches, (list, tuple)) or len(caches) != len(
            model.blocks
        ):
            raise ValueError(
                "caches must be a list of one KVCache per layer "
                f"({len(model.blocks)}), got "
                f"{type(caches).__name__}; make them with "
                "model.new_caches(batch_size)"
            )
        if len({id(cache) for cache in caches}) != len(caches):
            raise ValueError(
                "caches holds the same KVCache object more than once (as "
                "[KVCache()] * num_layers makes): every layer would write its "
                "keys into one cache; make one per layer with "
                "model.new_caches(batch_size) or [KVCache() for _ in "
                "range(num_layers)]"
            )
        for index, (cache, block) in enumerate(
            zip(caches, model.blocks, strict=True)
        ):
            if hasattr(cache, "window"):  # (a wrong type: the layer names it)
                check.cache_window(
                    cache, block.self_attn.window, f"layer {index}"
                )
        lengths = {cache.length for cache in caches}
        if len(lengths) != 1:
            raise ValueError(
                f"the caches hold different lengths {sorted(lengths)}; they "
                "must advance together: start again from "
                "model.new_caches(batch_size)"
            )
        cached = lengths.pop()
    length = cached + tokens_in.shape[1]
    # a window and relative positions: any length (GPTConfig.streams)
    if length > model.context_length and not model.config.streams:
        held = f" ({cached} cached + {length - cached} new)" if cached else ""
        why = (
            f"its {model.config.positions!r} positions have no row past it"
            if model.config.positions in ("learned", "sinusoidal")
            else "without a window its cost would grow without bound"
        )
        raise ValueError(
            f"the sequence has {length} tokens{held}, more than the model's "
            f"context_length={model.context_length} ({why}); cut it to its "
            f"last {model.context_length} tokens, or build the model with "
            f"context_length >= {length} (a model with a window and 'rope', "
            "'alibi' or 'none' positions reads past its context)"
        )


def _check_generation(model, prompt, max_new_tokens, greedy, use_cache) -> None:
    """A prompt ``(B, T0)`` of the model's tokens and a positive number of new
    tokens."""
    check.tokens(prompt, model.vocab_size)
    if prompt.shape[1] == 0:
        raise ValueError(
            "the prompt is empty; start from at least one token "
            "(e.g. a BOS token)"
        )
    check.positive_int("max_new_tokens", max_new_tokens)
    check.boolean("greedy", greedy)
    check.boolean("use_cache", use_cache)


def _check_end_and_pad(vocab_size: int, end_id, pad_id) -> None:
    """``end_id`` and ``pad_id`` of generation: token ids or None, ``pad_id``
    only with ``end_id``."""
    for name, value in (("end_id", end_id), ("pad_id", pad_id)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral)
        ):
            raise TypeError(
                f"{name} must be an int token id or None, got {check.describe(value)}"
            )
        if value is not None and not 0 <= value < vocab_size:
            raise ValueError(
                f"{name}={value} is not a token of the model's vocabulary; "
                f"use an id in 0 .. {vocab_size - 1}"
            )
    if pad_id is not None and end_id is None:
        raise ValueError(
            f"pad_id={pad_id} without end_id: padding fills the positions "
            "after a sequence's "
            "end token; pass end_id too"
        )


def _check_sampling(logits, temperature, top_k) -> None:
    """Logits ``(..., V)`` whose every row has a finite value to sample, a
    temperature > 0 and an optional ``top_k`` >= 1."""
    check.tensor("logits", logits, floating=True, min_ndim=1)
    _check_sampling_options(temperature, top_k)
    # softmax of a row of -inf (every token masked), or with NaN or +inf: NaN
    finite = logits.isfinite()
    empty = ~finite.any(dim=-1)
    if empty.any() or logits.isnan().any() or (logits == math.inf).any():
        rows = int(empty.sum())
        raise ValueError(
            f"logits of shape {tuple(logits.shape)} hold {rows} row(s) with no "
            f"finite value and {int(logits.isnan().sum())} NaN and "
            f"{int((logits == math.inf).sum())} +inf values: softmax would "
            "give NaN probabilities. Every row needs a finite logit (a mask "
            "that removes every token leaves none), and no NaN or +inf"
        )


def _check_sampling_options(temperature, top_k) -> None:
    """A temperature > 0 and an optional ``top_k`` >= 1."""
    check.positive_number(
        "temperature",
        temperature,
        "use greedy decoding (argmax) for the limit temperature -> 0",
    )
    if top_k is not None:
        check.positive_int("top_k", top_k)


def _check_generator(generator) -> None:
    """None or a ``torch.Generator`` (``torch.multinomial`` takes no seed)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            "generator must be a torch.Generator or None, got "
            f"{check.describe(generator)}; for a seeded draw pass "
            "generator=torch.Generator().manual_seed(0), not the seed itself"
        )
