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

:class:`TransformerStack` is what the encoder and decoder stacks share (the
blocks in a row and a final normalization); :class:`Seq2SeqInference` gives
:class:`EncoderDecoderTransformer` its generation (greedy, beam search) and
attention maps. That model's arguments: ``ffn_width`` defaults to ``4 *
d_model``; embeddings start from ``N(0, 1 / d_model)``, are scaled by
``sqrt(d_model)`` and added to the sinusoidal encoding, as in Vaswani et al.
(2017); ``tie_embeddings`` shares one matrix between the source embedding, the
target embedding and the output projection (it needs one vocabulary,
``source_vocab == target_vocab``); ``max_len`` bounds both sequences.
"""

from __future__ import annotations

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
    "Seq2SeqInference",
    "EncoderDecoderTransformer",
    "make_norm",
    "make_activation",
]

NORMS = ("layer", "rms")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh")


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
        check.positive_number("eps", eps, "1e-5 is usual")
        check.positive_int("d_model", d_model)
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
    check.positive_int("d_model", d_model)
    check.positive_number("eps", eps, "1e-5 is usual")
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
        check.sequence("x", x, self.d_model, "EncoderBlock")
        check.module_dtype("x", x, self)
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


class TransformerStack(nn.Module):
    """``num_blocks`` blocks of one kind (the class attribute ``block``) and a
    final norm.

    The body of :class:`TransformerEncoder` and :class:`TransformerDecoder`:
    block ``i + 1`` reads block ``i``'s output, and every block gets the same
    extra inputs (``*context``: a mask, or the memory and two masks). The other
    arguments are those of the block. A pre-LN stack adds the residual outputs
    of every block without normalizing them, so it ends with one more
    normalization (``final_norm``, on by default exactly when ``norm_first``),
    as ``torch.nn.TransformerEncoder(..., norm=LayerNorm)`` and GPT-2 do.
    """

    block: type[nn.Module]

    def __init__(
        self,
        num_blocks: int,
        d_model: int,
        num_heads: int,
        ffn_width: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        *,
        bias: bool = True,
        norm: str = "layer",
        eps: float = 1e-5,
        final_norm: bool | None = None,
    ) -> None:
        super().__init__()
        check.positive_int("num_blocks", num_blocks)
        self.blocks = nn.ModuleList(
            self.block(
                d_model,
                num_heads,
                ffn_width,
                dropout,
                norm_first,
                bias=bias,
                norm=norm,
                eps=eps,
            )
            for _ in range(num_blocks)
        )
        final_norm = norm_first if final_norm is None else final_norm
        self.final_norm = (
            make_norm(norm, d_model, eps, bias) if final_norm else nn.Identity()
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
    """A stack of ``num_blocks`` :class:`EncoderBlock`\\ s, ``(B, T, D) -> (B,
    T, D)``.

    Built as :class:`TransformerStack` (the arguments of :class:`EncoderBlock`,
    and ``final_norm``). ``forward(x, mask=None)``; ``get_attention_maps(x,
    mask=None)`` returns a list of ``(B, H, T, T)`` weights, one per block.
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
        check.decoder_inputs(self, target, memory, target_mask, memory_mask)
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
    """A stack of ``num_blocks`` :class:`DecoderBlock`\\ s reading one shared
    ``memory``.

    ``forward(target (B, Tt, D), memory (B, Ts, D), target_mask=None,
    memory_mask=None)`` returns ``(B, Tt, D)``. Every block attends to the same
    encoder output. The other arguments, and ``final_norm``, are those of
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


class Seq2SeqInference:
    """What a trained :class:`EncoderDecoderTransformer` does besides its
    forward pass: generation (greedy decoding and beam search) and its attention
    maps.

    A mixin of the model class, which keeps the model's own computation
    (embeddings, the two stacks, the masks, the logits) short enough to read in
    one screen; it uses the model's ``encode``, ``decode``, ``_embed``,
    ``encoder``, ``decoder`` and ``pad_id``.
    """

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

        ``beam_size=1`` is greedy decoding: one step at a time, the decoder
        re-reads the whole prefix it has written so far (no cache) and appends
        the arg-max of the last position's logits. ``beam_size=k > 1`` is beam
        search (:meth:`_beam_search`). With ``end_id``, a sequence that has
        written ``end_id`` stops: its later positions hold ``pad_id``.
        ``num_steps`` is at most the model's ``max_len`` (checked first).
        """
        check.seq2seq_generation(
            self, start_id, num_steps, end_id, beam_size, length_penalty
        )
        memory, source_mask = self.encode(source)
        if beam_size > 1:
            return self._beam_search(
                memory,
                source_mask,
                start_id,
                num_steps,
                end_id,
                beam_size,
                length_penalty,
            )
        tokens = torch.full(
            (source.shape[0], 1), start_id, device=source.device
        )
        done = torch.zeros(
            source.shape[0], dtype=torch.bool, device=source.device
        )
        for _ in range(num_steps):
            logits = self.decode(tokens, memory, source_mask)
            next_token = logits[:, -1].argmax(dim=-1)
            if end_id is not None:  # finished sequences write padding
                next_token = next_token.masked_fill(done, self.pad_id)
                done = done | (next_token == end_id)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        return tokens

    def _beam_search(
        self, memory, source_mask, start_id, num_steps, end_id, beam_size, alpha
    ):
        """Keep the ``beam_size`` prefixes of highest total log-prob at each
        step.

        A finished hypothesis (it wrote ``end_id``) goes on with ``pad_id`` at
        no cost, so it competes with the live ones on its final score. The
        returned one has the highest ``total log-prob / length**alpha``
        (``length``: tokens written, ``end_id`` included; ``alpha =
        length_penalty``: 0 ranks by the total, larger values favour longer
        ones).
        """
        (batch, _, _), k, vocab = memory.shape, beam_size, self.target_vocab
        # (B * k, Ts, D): row b * k + j
        memory = memory.repeat_interleave(k, dim=0)
        if source_mask is not None:
            source_mask = source_mask.repeat_interleave(k, dim=0)
        tokens = torch.full((batch * k, 1), start_id, device=memory.device)
        scores = torch.full((batch, k), -torch.inf, device=memory.device)
        scores[:, 0] = (
            0.0  # one live hypothesis at the start, not k copies of it
        )
        done = torch.zeros(batch * k, dtype=torch.bool, device=memory.device)
        lengths = torch.zeros(batch * k, device=memory.device)
        first_row = torch.arange(batch, device=memory.device)[:, None] * k
        for _ in range(num_steps):
            log_probs = self.decode(tokens, memory, source_mask)[
                :, -1
            ].log_softmax(dim=-1)
            # (B * k, V): a finished hypothesis can only pad, for free
            if end_id is not None:
                log_probs[done] = -torch.inf
                log_probs[done, self.pad_id] = 0.0
            total = (scores.reshape(-1, 1) + log_probs).reshape(
                batch, k * vocab
            )
            # the k best extensions of all k prefixes
            scores, index = total.topk(k, dim=-1)
            parent = (first_row + index // vocab).flatten()
            next_token = (index % vocab).flatten()
            tokens = torch.cat([tokens[parent], next_token[:, None]], dim=1)
            lengths = lengths[parent] + (~done[parent]).float()
            done = done[parent] | (end_id is not None and next_token == end_id)
        best = (scores / lengths.reshape(batch, k) ** alpha).argmax(dim=-1)
        return tokens.reshape(batch, k, -1)[torch.arange(batch), best]

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


class EncoderDecoderTransformer(Seq2SeqInference, nn.Module):
    """The encoder-decoder on tokens: embeddings, positions, two stacks, logits.

    ``forward(source (B, Ts), target (B, Tt))``: int64 token ids (``target``:
    the decoder's input, the shifted target) -> logits
    ``(B, Tt, target_vocab)``; ``pad_id`` is never a key.
    """

    def __init__(
        self,
        source_vocab: int,
        target_vocab: int,
        d_model: int,
        num_heads: int,
        num_encoder_blocks: int,
        num_decoder_blocks: int,
        ffn_width: int | None = None,
        dropout: float = 0.0,
        norm_first: bool = True,
        *,
        pad_id: int | None = None,
        tie_embeddings: bool = False,
        max_len: int = 512,
    ) -> None:
        super().__init__()
        check.seq2seq_arguments(
            source_vocab, target_vocab, pad_id, tie_embeddings, ffn_width
        )
        self.source_vocab, self.target_vocab, self.pad_id = (
            source_vocab,
            target_vocab,
            pad_id,
        )
        self.d_model = d_model
        sizes = (
            d_model,
            num_heads,
            ffn_width or 4 * d_model,
            dropout,
            norm_first,
        )
        self.source_embedding = nn.Embedding(source_vocab, d_model)
        self.target_embedding = (
            self.source_embedding
            if tie_embeddings
            else nn.Embedding(target_vocab, d_model)
        )
        self.positional = SinusoidalPositionalEncoding(d_model, max_len)
        self.dropout = nn.Dropout(dropout)
        self.encoder = TransformerEncoder(num_encoder_blocks, *sizes)
        self.decoder = TransformerDecoder(num_decoder_blocks, *sizes)
        self.output = nn.Linear(d_model, target_vocab)
        _init_embeddings(self.source_embedding, self.target_embedding)
        # one (vocab, D) matrix reads tokens in and writes logits out
        if tie_embeddings:
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
def _init_embeddings(*embeddings: nn.Embedding) -> None:
    """Entries of ``N(0, 1 / D)``: of size 1 after the ``sqrt(D)`` scaling, like
    the positional encoding's. A tied embedding, passed twice, is drawn once."""
    for embedding in dict.fromkeys(embeddings):
        nn.init.normal_(embedding.weight, std=embedding.embedding_dim**-0.5)
