"""The Transformer: normalization, the feed-forward network, encoder and decoder
blocks.

Chapter 6 builds the encoder's pieces from scratch, chapter 9 the decoder's
(:class:`DecoderBlock`, :class:`TransformerDecoder`) and the whole
encoder-decoder on tokens (:class:`EncoderDecoderTransformer`); this module is
the canonical version later chapters import. Shapes: ``B`` batch, ``T`` sequence
length, ``D`` model width (``d_model``), ``H`` heads, ``F`` feed-forward width
(``ffn_width``). Masks follow the package convention of
:mod:`helpers.attention`: boolean, ``True`` = may attend, broadcastable to ``(B,
H, T, T)``.

A block has two sublayers, self-attention and a position-wise feed-forward
network, each wrapped in a residual connection and a normalization. Where the
normalization sits is the one design choice that matters most for training:

* post-LN (the 2017 paper): ``x = norm(x + dropout(sublayer(x)))``
* pre-LN (``norm_first=True``, the default): ``x = x +
  dropout(sublayer(norm(x)))``

Dropout only ever touches a sublayer's output, never the residual stream itself.

:class:`TransformerConfig` holds every size and choice of a stack or of the
whole encoder-decoder (one frozen dataclass, as
:class:`helpers.gpt.GPTConfig`); a block is small enough to build by hand with
plain arguments (``EncoderBlock(64, 4, 256)``), and a stack builds its blocks
from the config. :class:`TransformerStack` is what the encoder and decoder
stacks share (the blocks in a row and a final normalization).
:class:`EncoderDecoderTransformer` embeds tokens (entries of ``N(0, 1 /
d_model)``, scaled by ``sqrt(d_model)`` and added to the sinusoidal encoding,
as in Vaswani et al., 2017), runs the two stacks and projects to logits;
``tie_embeddings`` shares one matrix between the source embedding, the target
embedding and the output projection (it needs one vocabulary). Decoding is two
functions of such a model, :func:`greedy_decode` and :func:`beam_search`, which
use only its ``encode``, ``decode`` and ``pad_id``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from helpers import _validate as check
from helpers.attention import MultiHeadAttention
from helpers.masks import causal_padding_mask, token_padding_mask
from helpers.positional import SinusoidalPositionalEncoding

__all__ = [
    "RMSNorm",
    "FeedForward",
    "EncoderBlock",
    "TransformerStack",
    "TransformerEncoder",
    "DecoderBlock",
    "TransformerDecoder",
    "TransformerConfig",
    "EncoderDecoderTransformer",
    "greedy_decode",
    "beam_search",
    "make_norm",
    "make_activation",
]

NORMS = ("layer", "rms")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh")


def _check_norm(d_model: int, eps: float) -> None:
    check.positive_int("d_model", d_model)
    check.positive_number("eps", eps, "1e-5 is usual")


class RMSNorm(nn.Module):
    """Root-mean-square normalization (Zhang and Sennrich, 2019): no centring,
    no bias.

    ``y = x / sqrt(mean(x**2) + eps) * weight`` over the last dimension. It
    equals LayerNorm without bias exactly when every feature vector already has
    zero mean and both use the same gain and the same ``eps``. ``eps`` defaults
    to 1e-5, as LayerNorm's and :func:`make_norm`'s. Shapes: ``(..., D) -> (...,
    D)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        _check_norm(d_model, eps)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check.last_dim(self, x, self.weight.shape[0])
        inverse_rms = torch.rsqrt(
            x.pow(2).mean(dim=-1, keepdim=True) + self.eps
        )
        return x * inverse_rms * self.weight

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def make_norm(
    kind: str, d_model: int, eps: float = 1e-5, bias: bool = True
) -> nn.Module:
    """A normalization layer over the last dimension: ``"layer"`` (LayerNorm) or
    ``"rms"``.

    ``bias`` only concerns LayerNorm (RMSNorm has none).
    """
    _check_norm(d_model, eps)
    check.one_of("norm", kind, NORMS)
    if kind == "layer":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    return RMSNorm(d_model, eps=eps)


def make_activation(kind: str) -> nn.Module:
    """The feed-forward network's nonlinearity, one of :data:`ACTIVATIONS`.

    ``"relu"``: ``max(0, x)`` (the 2017 Transformer); ``"gelu"``: ``x *
    Phi(x)``, ``Phi`` the standard normal's distribution function (BERT);
    ``"gelu_tanh"``: GELU's tanh approximation ``x/2 * (1 + tanh(sqrt(2/pi) * (x
    + 0.044715 x^3)))`` (GPT-2, ``gelu_new`` in ``transformers``).
    """
    check.activation(kind, ACTIVATIONS)
    if kind == "relu":
        return nn.ReLU()
    return nn.GELU(approximate="tanh" if kind == "gelu_tanh" else "none")


class FeedForward(nn.Module):
    """The position-wise feed-forward network
    ``linear2(dropout(act(linear1(x))))``.

    Applied to every position independently: ``(B, T, D) -> (B, T, F) -> (B, T,
    D)``. ``F = ffn_width`` is usually 2 to 4 times ``D``: the wide hidden layer
    is where most of a block's parameters and per-token computation live.
    ``activation`` is ReLU unless given (one of :data:`ACTIVATIONS`, see
    :func:`make_activation`).
    """

    def __init__(
        self,
        d_model: int,
        ffn_width: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        activation: str = "relu",
    ):
        super().__init__()
        check.positive_int("d_model", d_model)
        check.positive_int("ffn_width", ffn_width)
        self.d_model = d_model
        self.linear1 = nn.Linear(d_model, ffn_width, bias=bias)
        self.activation = make_activation(activation)
        check.probability("dropout", dropout)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ffn_width, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check.last_dim(self, x, self.d_model)
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


def _attend(attention: nn.Module, query, memory, mask, return_attention: bool):
    """``attention(query, memory, memory)`` and its weights ``(B, H, Tq, Tk)``,
    or None for the weights unless ``return_attention``: the attention sublayer
    of every block."""
    if return_attention:
        return attention(
            query, memory, memory, mask=mask, return_attention=True
        )
    return attention(query, memory, memory, mask=mask), None


def _check_block_input(block: nn.Module, x: torch.Tensor) -> None:
    check.sequence("x", x, block.d_model, type(block).__name__)
    check.module_dtype("x", x, block)


class EncoderBlock(nn.Module):
    """One encoder block: self-attention and a feed-forward network, each with a
    residual.

    ``norm_first=True`` is the pre-LN block, ``False`` the post-LN block of the
    2017 paper; both match ``torch.nn.TransformerEncoderLayer`` with the same
    settings (activation ReLU, ``batch_first=True``). ``bias`` switches the
    biases of every linear layer and LayerNorm, as torch's ``bias`` does.
    ``dropout`` is used for the attention weights, inside the feed-forward
    network and on each sublayer's output before it joins the residual stream.
    ``norm="rms"`` swaps LayerNorm for :class:`RMSNorm`.

    ``forward(x, mask=None, return_attention=False)``: ``x`` is ``(B, T, D)``;
    ``mask`` is boolean, True = may attend, broadcastable to ``(B, H, T, T)``.
    Returns ``(B, T, D)``, or ``(output, weights)`` with ``weights`` of shape
    ``(B, H, T, T)`` if ``return_attention``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_width: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        *,
        bias: bool = True,
        norm: str = "layer",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check.boolean("norm_first", norm_first)
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout, bias=bias
        )
        self.ffn = FeedForward(d_model, ffn_width, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps, bias)
        self.norm2 = make_norm(norm, d_model, eps, bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None, return_attention=False):
        _check_block_input(self, x)
        if self.norm_first:
            h = self.norm1(x)
            attended, weights = _attend(
                self.self_attn, h, h, mask, return_attention
            )
            x = x + self.dropout1(attended)
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            attended, weights = _attend(
                self.self_attn, x, x, mask, return_attention
            )
            x = self.norm1(x + self.dropout1(attended))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return (x, weights) if return_attention else x


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """Every size and choice of an encoder, a decoder or the encoder-decoder on
    tokens, checked once, here (as :class:`helpers.gpt.GPTConfig`).

    The stacks (:class:`TransformerEncoder`, :class:`TransformerDecoder`) read
    ``num_layers`` blocks of width ``d_model`` with ``num_heads`` heads, a
    feed-forward network of width ``ffn_width`` (None: ``4 * d_model``),
    ``dropout``, the norm placement ``norm_first`` (pre-LN) or not (post-LN),
    ``bias`` on every linear layer and LayerNorm, ``norm`` (``"layer"`` or
    ``"rms"``) with its ``eps``, and ``final_norm`` (None: exactly when
    ``norm_first``). :class:`EncoderDecoderTransformer` also reads the rest:
    ``source_vocab`` and ``target_vocab`` (required there), ``pad_id`` (never a
    key; None: no padding), ``tie_embeddings`` and ``max_len``; it builds an
    encoder and a decoder of ``num_layers`` blocks each. Fields are keywords;
    ``config.replace(norm_first=False)`` is a copy with some of them changed.
    """

    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    ffn_width: int | None = None
    dropout: float = 0.0
    norm_first: bool = True
    bias: bool = True
    norm: str = "layer"
    eps: float = 1e-5
    final_norm: bool | None = None
    source_vocab: int | None = None
    target_vocab: int | None = None
    pad_id: int | None = None
    tie_embeddings: bool = False
    max_len: int = 512

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "num_layers", "max_len"):
            check.positive_int(name, getattr(self, name))
        if self.ffn_width is not None:
            check.positive_int("ffn_width", self.ffn_width)
        check.head_width(self.d_model, self.num_heads)
        check.probability("dropout", self.dropout)
        for name in ("norm_first", "bias", "tie_embeddings"):
            check.boolean(name, getattr(self, name))
        if self.final_norm is not None:
            check.boolean("final_norm", self.final_norm)
        check.one_of("norm", self.norm, NORMS)
        check.positive_number("eps", self.eps, "1e-5 is usual")
        _check_seq2seq_vocabularies(
            self.source_vocab, self.target_vocab, self.pad_id,
            self.tie_embeddings,
        )  # fmt: skip

    def replace(self, **changes) -> TransformerConfig:
        """A copy with some fields changed, e.g.
        ``config.replace(num_layers=6)``."""
        return dataclasses.replace(self, **changes)


class TransformerStack(nn.Module):
    """``config.num_layers`` blocks of one kind (the class attribute ``block``)
    and a final norm.

    The body of :class:`TransformerEncoder` and :class:`TransformerDecoder`:
    block ``i + 1`` reads block ``i``'s output, and every block gets the same
    extra inputs (``*context``: a mask, or the memory and two masks). Every
    block is built from the one :class:`TransformerConfig`. A pre-LN stack adds
    the residual outputs of every block without normalizing them, so it ends
    with one more normalization (``config.final_norm``, on by default exactly
    when ``norm_first``), as ``torch.nn.TransformerEncoder(...,
    norm=LayerNorm)`` and GPT-2 do.
    """

    block: type[nn.Module]

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        check.instance("config", config, TransformerConfig)
        self.config = config
        self.blocks = nn.ModuleList(
            self.block(
                d_model=config.d_model,
                num_heads=config.num_heads,
                ffn_width=config.ffn_width or 4 * config.d_model,
                dropout=config.dropout,
                norm_first=config.norm_first,
                bias=config.bias,
                norm=config.norm,
                eps=config.eps,
            )
            for _ in range(config.num_layers)
        )
        final_norm = (
            config.norm_first
            if config.final_norm is None
            else config.final_norm
        )
        self.final_norm = (
            make_norm(config.norm, config.d_model, config.eps, config.bias)
            if final_norm
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor, *context) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, *context)
        return self.final_norm(x)

    @torch.no_grad()
    def get_attention_maps(self, x: torch.Tensor, *context) -> list:
        """The attention weights each block uses on input ``x``, block by block.

        The weights come from the blocks' own forward pass, so a pre-LN block
        reports the attention of its *normalized* input, the one it really
        computes. Call ``.eval()`` first to see the weights without dropout's
        randomness in the residual stream.
        """
        maps = []
        for block in self.blocks:
            x, weights = block(x, *context, return_attention=True)
            maps.append(weights)
        return maps


class TransformerEncoder(TransformerStack):
    """A stack of ``config.num_layers`` :class:`EncoderBlock`\\ s, ``(B, T, D)
    -> (B, T, D)``.

    ``TransformerEncoder(config)``, a :class:`TransformerConfig` (see
    :class:`TransformerStack`). ``forward(x, mask=None)``;
    ``get_attention_maps(x, mask=None)`` returns a list of ``(B, H, T, T)``
    weights, one per block.
    """

    block = EncoderBlock

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return super().forward(x, mask)

    def get_attention_maps(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> list:
        """The weights ``(B, H, T, T)`` of each block (see
        :class:`TransformerStack`)."""
        return super().get_attention_maps(x, mask)


# ------------------------------------------------------------- the decoder side


class DecoderBlock(nn.Module):
    """A decoder block: masked self-attention, cross-attention, feed-forward.

    The arguments are those of :class:`EncoderBlock`; both norm placements
    match ``torch.nn.TransformerDecoderLayer`` (ReLU, ``batch_first=True``).
    The second sublayer is *cross*-attention: queries from the target stream,
    keys and values from the encoder's output ``memory``.

    ``forward(target, memory, target_mask=None, memory_mask=None,
    return_attention=False)``: ``target`` is ``(B, Tt, D)``, ``memory`` is
    ``(B, Ts, D)``. Masks are boolean, True = may attend: ``target_mask``
    broadcastable to ``(B, H, Tt, Tt)`` (usually ``causal_mask(Tt)``),
    ``memory_mask`` to ``(B, H, Tt, Ts)`` (usually a source padding mask).
    Returns ``(B, Tt, D)``, or ``(output, (self_weights, cross_weights))`` with
    weights ``(B, H, Tt, Tt)`` and ``(B, H, Tt, Ts)`` if ``return_attention``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_width: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        *,
        bias: bool = True,
        norm: str = "layer",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check.boolean("norm_first", norm_first)
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout, bias=bias
        )
        self.cross_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout, bias=bias
        )
        self.ffn = FeedForward(d_model, ffn_width, dropout=dropout, bias=bias)
        self.norm1 = make_norm(norm, d_model, eps, bias)
        self.norm2 = make_norm(norm, d_model, eps, bias)
        self.norm3 = make_norm(norm, d_model, eps, bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        target,
        memory,
        target_mask=None,
        memory_mask=None,
        return_attention=False,
    ):
        _check_decoder_inputs(self, target, memory, target_mask, memory_mask)
        x, want = target, return_attention
        if self.norm_first:
            h = self.norm1(x)
            attended, self_weights = _attend(
                self.self_attn, h, h, target_mask, want
            )
            x = x + self.dropout1(attended)
            h = self.norm2(x)
            attended, cross_weights = _attend(
                self.cross_attn, h, memory, memory_mask, want
            )
            x = x + self.dropout2(attended)
            x = x + self.dropout3(self.ffn(self.norm3(x)))
        else:
            attended, self_weights = _attend(
                self.self_attn, x, x, target_mask, want
            )
            x = self.norm1(x + self.dropout1(attended))
            attended, cross_weights = _attend(
                self.cross_attn, x, memory, memory_mask, want
            )
            x = self.norm2(x + self.dropout2(attended))
            x = self.norm3(x + self.dropout3(self.ffn(x)))
        return (x, (self_weights, cross_weights)) if return_attention else x


class TransformerDecoder(TransformerStack):
    """A stack of ``config.num_layers`` :class:`DecoderBlock`\\ s reading one
    shared ``memory``.

    ``forward(target (B, Tt, D), memory (B, Ts, D), target_mask=None,
    memory_mask=None)`` returns ``(B, Tt, D)``. Every block attends to the same
    encoder output. ``TransformerDecoder(config)``, as
    :class:`TransformerEncoder`.
    """

    block = DecoderBlock

    def forward(self, target, memory, target_mask=None, memory_mask=None):
        return super().forward(target, memory, target_mask, memory_mask)

    def get_attention_maps(
        self, target, memory, target_mask=None, memory_mask=None
    ):
        """Each block's ``(self_weights (B, H, Tt, Tt), cross_weights (B, H, Tt,
        Ts))``."""
        return super().get_attention_maps(
            target, memory, target_mask, memory_mask
        )


class EncoderDecoderTransformer(nn.Module):
    """The encoder-decoder on tokens: embeddings, positions, two stacks, logits.

    ``EncoderDecoderTransformer(config)``, one :class:`TransformerConfig`
    holding every size and choice (``source_vocab`` and ``target_vocab``
    required). ``forward(source (B, Ts), target (B, Tt))``: int64 token ids
    (``target``: the decoder's input, the shifted target) -> logits
    ``(B, Tt, target_vocab)``; ``pad_id`` is never a key. ``encode`` and
    ``decode`` are the two halves; :func:`greedy_decode` and
    :func:`beam_search` write with them (``generate`` calls one or the other).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        check.instance("config", config, TransformerConfig)
        _check_seq2seq_model(config)
        self.config = config
        self.source_vocab, self.target_vocab, self.pad_id = (
            config.source_vocab,
            config.target_vocab,
            config.pad_id,
        )
        self.d_model = width = config.d_model
        self.source_embedding = nn.Embedding(config.source_vocab, width)
        self.target_embedding = (
            self.source_embedding
            if config.tie_embeddings
            else nn.Embedding(config.target_vocab, width)
        )
        self.positional = SinusoidalPositionalEncoding(width, config.max_len)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = TransformerEncoder(config)
        self.decoder = TransformerDecoder(config)
        self.output = nn.Linear(width, config.target_vocab)
        _init_embeddings(self.source_embedding, self.target_embedding)
        # one (vocab, D) matrix reads tokens in and writes logits out
        if config.tie_embeddings:
            self.output.weight = self.source_embedding.weight

    def _embed(
        self, embedding: nn.Embedding, tokens: torch.Tensor
    ) -> torch.Tensor:
        check.tokens(tokens, embedding.num_embeddings, self.positional.max_len)
        return self.dropout(
            self.positional(embedding(tokens) * self.d_model**0.5)
        )

    def encode(
        self, source: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The encoder's output ``memory (B, Ts, D)``, the source key mask."""
        x = self._embed(self.source_embedding, source)
        # (B, 1, 1, Ts) or None
        source_mask = token_padding_mask(source, self.pad_id)
        return self.encoder(x, source_mask), source_mask

    def decode(self, target, memory, source_mask=None) -> torch.Tensor:
        """Logits ``(B, Tt, target_vocab)`` for the decoder input ``target``.

        ``memory`` is the encoder's output, ``source_mask`` its key mask.
        """
        x = self._embed(self.target_embedding, target)
        # causal, no padding key
        target_mask = causal_padding_mask(target, self.pad_id)
        return self.output(self.decoder(x, memory, target_mask, source_mask))

    def forward(
        self, source: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        memory, source_mask = self.encode(source)
        return self.decode(target, memory, source_mask)

    @torch.no_grad()
    def generate(
        self,
        source: torch.Tensor,
        start_id: int,
        num_steps: int,
        *,
        end_id: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.0,
    ) -> torch.Tensor:
        """``(B, 1 + num_steps)`` tokens: ``start_id``, then the decoded ones.

        ``beam_size=1`` is :func:`greedy_decode`, ``beam_size=k > 1``
        :func:`beam_search` with ``k`` hypotheses and ``length_penalty``.
        """
        check.seq2seq_generation(
            self, start_id, num_steps, end_id, beam_size, length_penalty
        )
        if beam_size == 1:
            return greedy_decode(
                self, source, start_id, num_steps, end_id=end_id
            )
        return beam_search(
            self,
            source,
            start_id,
            num_steps,
            beam_size=beam_size,
            end_id=end_id,
            length_penalty=length_penalty,
        )

    @torch.no_grad()
    def get_attention_maps(
        self, source: torch.Tensor, target: torch.Tensor
    ) -> dict:
        """Per block, the weights of ``"encoder"`` self-, ``"decoder"`` self-
        and ``"cross"`` attention: lists of ``(B, H, Ts, Ts)``, ``(B, H, Tt,
        Tt)`` and ``(B, H, Tt, Ts)``."""
        x = self._embed(self.source_embedding, source)
        source_mask = token_padding_mask(source, self.pad_id)
        encoder_maps = self.encoder.get_attention_maps(x, source_mask)
        memory, _ = self.encode(source)
        y = self._embed(self.target_embedding, target)
        target_mask = causal_padding_mask(target, self.pad_id)
        decoder_maps = self.decoder.get_attention_maps(
            y, memory, target_mask, source_mask
        )
        return {
            "encoder": encoder_maps,
            "decoder": [weights for weights, _ in decoder_maps],
            "cross": [weights for _, weights in decoder_maps],
        }


# ---------------------------------------------------------------- decoding


@torch.no_grad()
def greedy_decode(
    model: EncoderDecoderTransformer,
    source: torch.Tensor,
    start_id: int,
    num_steps: int,
    *,
    end_id: int | None = None,
) -> torch.Tensor:
    """``(B, 1 + num_steps)`` tokens: ``start_id``, then the arg-max at each
    step.

    One step at a time, the decoder re-reads the whole prefix it has written so
    far (no cache) and appends the arg-max of the last position's logits. With
    ``end_id``, a sequence that has written ``end_id`` stops: its later
    positions hold the model's ``pad_id``. Uses only ``model.encode``,
    ``model.decode`` and ``model.pad_id``.
    """
    check.seq2seq_generation(model, start_id, num_steps, end_id, 1, 0.0)
    memory, source_mask = model.encode(source)
    batch, device = source.shape[0], source.device
    tokens = torch.full((batch, 1), start_id, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    for _ in range(num_steps):
        logits = model.decode(tokens, memory, source_mask)
        next_token = logits[:, -1].argmax(dim=-1)
        if end_id is not None:  # finished sequences write padding
            next_token = next_token.masked_fill(done, model.pad_id)
            done = done | (next_token == end_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    return tokens


@torch.no_grad()
def beam_search(
    model: EncoderDecoderTransformer,
    source: torch.Tensor,
    start_id: int,
    num_steps: int,
    *,
    beam_size: int,
    end_id: int | None = None,
    length_penalty: float = 0.0,
) -> torch.Tensor:
    """``(B, 1 + num_steps)`` tokens: at each step, keep the ``beam_size``
    prefixes of highest total log-prob.

    A finished hypothesis (it wrote ``end_id``) goes on with the model's
    ``pad_id`` at no cost, so it competes with the live ones on its final
    score. The returned one has the highest ``total log-prob / length**alpha``
    (``length``: tokens written, ``end_id`` included; ``alpha =
    length_penalty``: 0 ranks by the total, larger values favour longer ones).
    Uses only ``model.encode``, ``model.decode`` and ``model.pad_id``.
    """
    check.seq2seq_generation(
        model, start_id, num_steps, end_id, beam_size, length_penalty
    )
    memory, source_mask = model.encode(source)
    (batch, _, _), k, device = memory.shape, beam_size, memory.device
    # (B * k, Ts, D): row b * k + j
    memory = memory.repeat_interleave(k, dim=0)
    if source_mask is not None:
        source_mask = source_mask.repeat_interleave(k, dim=0)
    tokens = torch.full((batch * k, 1), start_id, device=device)
    scores = torch.full((batch, k), -torch.inf, device=device)
    scores[:, 0] = 0.0  # one live hypothesis at the start, not k copies of it
    done = torch.zeros(batch * k, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * k, device=device)
    first_row = torch.arange(batch, device=device)[:, None] * k
    for _ in range(num_steps):
        # (B * k, V)
        logits = model.decode(tokens, memory, source_mask)[:, -1]
        log_probs, vocab = logits.log_softmax(dim=-1), logits.shape[-1]
        if end_id is not None:  # a finished hypothesis can only pad, for free
            log_probs[done] = -torch.inf
            log_probs[done, model.pad_id] = 0.0
        total = (scores.reshape(-1, 1) + log_probs).reshape(batch, k * vocab)
        # the k best extensions of all k prefixes
        scores, index = total.topk(k, dim=-1)
        parent = (first_row + index // vocab).flatten()
        next_token = (index % vocab).flatten()
        tokens = torch.cat([tokens[parent], next_token[:, None]], dim=1)
        lengths = lengths[parent] + (~done[parent]).float()
        done = done[parent] | (end_id is not None and next_token == end_id)
    normalized = scores / lengths.reshape(batch, k) ** length_penalty
    best = normalized.argmax(dim=-1)
    return tokens.reshape(batch, k, -1)[torch.arange(batch), best]


@torch.no_grad()
def _init_embeddings(*embeddings: nn.Embedding) -> None:
    """Entries of ``N(0, 1 / D)``: of size 1 after the ``sqrt(D)`` scaling, like
    the positional encoding's. A tied embedding, passed twice, is drawn once."""
    for embedding in dict.fromkeys(embeddings):
        nn.init.normal_(embedding.weight, std=embedding.embedding_dim**-0.5)


# ------------------------------------------------------------ this module's checks
# Each has one caller, above; the generic checks are in helpers._validate.


def _check_decoder_inputs(
    block: nn.Module, target, memory, target_mask, memory_mask
) -> None:
    """A decoder's ``target (B, Tt, D)``, ``memory (B, Ts, D)`` and its two
    boolean masks."""
    who = type(block).__name__
    check.sequence("target", target, block.d_model, who)
    if (
        isinstance(memory, torch.Tensor)
        and memory.ndim == 3
        and memory.shape[-1] != block.d_model
    ):
        raise ValueError(
            f"{who} was built for d_model={block.d_model} but memory (the "
            f"encoder's output) has width {memory.shape[-1]} (shape "
            f"{tuple(memory.shape)}); the encoder and the decoder must share "
            f"d_model, or project memory to {block.d_model} features first"
        )
    check.sequence("memory", memory, block.d_model, who)
    check.same_dtype(target=target, memory=memory)
    check.module_dtype("target", target, block)
    if target.shape[0] != memory.shape[0]:
        raise ValueError(
            "target and memory must hold the same batch of B sequences, got "
            f"target {tuple(target.shape)} and memory {tuple(memory.shape)}"
        )
    target_len, source_len = target.shape[1], memory.shape[1]
    _check_decoder_mask(
        "target_mask", target_mask, (target_len,) * 2, (source_len,) * 2, who
    )
    _check_decoder_mask(
        "memory_mask",
        memory_mask,
        (target_len, source_len),
        (source_len, target_len),
        who,
    )


def _check_decoder_mask(
    name: str, mask, fits: tuple, swapped: tuple, who: str
) -> None:
    """A boolean mask whose last two dimensions fit ``fits = (Tq, Tk)`` (size 1
    broadcasts).

    ``swapped`` is the ``(Tq, Tk)`` the mask would fit if target and memory were
    swapped.
    """
    if mask is None:
        return
    _check_named_bool_mask(name, mask)
    if mask.ndim < 2:
        raise ValueError(
            f"{who}'s {name} must have at least 2 dimensions (..., Tq, Tk), "
            f"got shape {tuple(mask.shape)}"
        )
    if _mask_fits(mask, *fits):
        return
    queries, keys = fits
    hint = ""
    if fits != swapped and _mask_fits(mask, *swapped):
        hint = (
            " It fits the sequences the other way round: did you swap target "
            "and memory? The decoder takes forward(target, memory, ...): "
            "target is the sequence it writes, memory the encoder's output."
        )
    expected = (
        f"(Tt, Tt) = ({queries}, {queries}); build it with "
        f"causal_mask({queries})"
        if name == "target_mask"
        else f"(..., Tt, Ts) = (..., {queries}, {keys}), or a padding mask (B, 1, 1, {keys})"
    )
    raise ValueError(
        f"{who}'s {name} has shape {tuple(mask.shape)}, whose last two "
        "dimensions do not fit "
        f"the target's {queries} queries and {keys} keys: expected "
        f"{expected}.{hint}"
    )


def _mask_fits(mask: torch.Tensor, queries: int, keys: int) -> bool:
    rows, columns = mask.shape[-2:]
    return rows in (1, queries) and columns in (1, keys)


def _check_seq2seq_vocabularies(
    source_vocab, target_vocab, pad_id, tie_embeddings
) -> None:
    """The vocabulary sizes (ints, or None where a config builds only stacks),
    padding token and tying choice of a ``TransformerConfig``."""
    for name, value in (
        ("source_vocab", source_vocab),
        ("target_vocab", target_vocab),
    ):
        if value is not None:
            check.positive_int(name, value)
    if tie_embeddings and source_vocab != target_vocab:
        raise ValueError(
            "tie_embeddings=True shares one embedding matrix, so it needs one "
            f"vocabulary; got source_vocab={source_vocab} and "
            f"target_vocab={target_vocab}. Build a shared vocabulary (as "
            "Vaswani et al. do with byte-pair encoding) or set "
            "tie_embeddings=False"
        )
    if pad_id is not None:
        check.non_negative_int("pad_id", pad_id)
        vocabularies = [
            v for v in (source_vocab, target_vocab) if v is not None
        ]
        if vocabularies and pad_id >= min(vocabularies):
            raise ValueError(
                f"pad_id={pad_id} must be a token of both vocabularies (< "
                f"{min(vocabularies)}), or None for no padding"
            )


def _check_seq2seq_model(config) -> None:
    """A config an encoder-decoder on tokens can be built from: both
    vocabulary sizes given."""
    for name in ("source_vocab", "target_vocab"):
        if getattr(config, name) is None:
            raise TypeError(
                f"EncoderDecoderTransformer reads and writes tokens: its config "
                f"needs {name}, got None; build it with e.g. "
                "TransformerConfig(source_vocab=13, target_vocab=13, ...)"
            )


def _check_named_bool_mask(name: str, value) -> None:
    try:
        check.bool_mask(value)
    except TypeError as error:
        raise TypeError(
            str(error).replace("mask must", f"{name} must", 1)
        ) from None
