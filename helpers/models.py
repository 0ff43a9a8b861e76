"""Small complete models that chapters train and compare.

Chapter 8 (triangles and boxes) compares three ways of mixing information along a 1-D signal
of shape ``[B, C, T]`` (``B`` batch, ``C`` channels, ``T`` positions, the ``Conv1d`` layout):

- :func:`make_shapes_cnn`: five convolutions; each output sees only 21 neighbouring inputs;
- :func:`make_shapes_attention_model`: the same with the middle convolution replaced by
  :class:`ConvSelfAttention`, which lets every position look at every other one;
- :class:`ShapesLSTM`: a bidirectional LSTM that reads the signal one position at a time.

:class:`BatchAxisLSTM` reproduces the recurrent model of source 004, which runs its LSTM along
the *batch*; it is here only so that the chapter can show that mistake, and its tests pin it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "ConvSelfAttention",
    "make_shapes_cnn",
    "make_shapes_attention_model",
    "ShapesLSTM",
    "BatchAxisLSTM",
    "count_parameters",
]


def _check_positive_ints(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_signal(x: torch.Tensor, channels: int, who: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who} expects a tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[1] != channels:
        raise ValueError(
            f"{who} expects input of shape [B, {channels}, T] (Conv1d layout), got "
            f"{tuple(x.shape)}; add the channel axis with x.unsqueeze(1) if it is missing"
        )


def count_parameters(model: nn.Module) -> int:
    """The number of trainable parameters (those with ``requires_grad``)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class ConvSelfAttention(nn.Module):
    """Single-head self-attention on a ``[B, C, T]`` signal, with 1x1 convolutions as Q/K/V.

    A ``Conv1d`` with ``kernel_size=1`` is a linear map applied at every position, so queries
    and keys are ``[B, key_channels, T]`` and values ``[B, out_channels, T]``. The weights
    ``softmax(Q^T K / sqrt(key_channels))`` are ``[B, T, T]``, one row per query position,
    summing to 1 over key positions; ``scaled=False`` drops the ``1/sqrt(key_channels)``, as
    source 004 does. No mask: every position may attend to every position.
    """

    def __init__(self, in_channels: int, out_channels: int, key_channels: int, scaled: bool = True):
        super().__init__()
        _check_positive_ints(
            in_channels=in_channels, out_channels=out_channels, key_channels=key_channels
        )
        if not isinstance(scaled, bool):
            raise TypeError(f"scaled must be a bool, got {type(scaled).__name__}")
        self.query = nn.Conv1d(in_channels, key_channels, kernel_size=1, bias=False)
        self.key = nn.Conv1d(in_channels, key_channels, kernel_size=1, bias=False)
        self.value = nn.Conv1d(in_channels, out_channels, kernel_size=1, bias=False)
        self.scaled = scaled

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The attention weights ``[B, T_query, T_key]`` for a ``[B, C_in, T]`` input."""
        _check_signal(x, self.query.in_channels, type(self).__name__)
        queries, keys = self.query(x), self.key(x)  # [B, key_channels, T]
        scores = queries.transpose(1, 2) @ keys  # [B, T, T]: scores[b, i, j] = q_i . k_j
        if self.scaled:
            scores = scores / math.sqrt(self.query.out_channels)
        return scores.softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self.attention(x)  # [B, T, T]
        values = self.value(x)  # [B, out_channels, T]
        # Output position i is the weighted mean of the values: sum_j weights[b, i, j] v_j.
        return values @ weights.transpose(1, 2)  # [B, out_channels, T]

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.query.in_channels}, out_channels={self.value.out_channels}, "
            f"key_channels={self.query.out_channels}, scaled={self.scaled}"
        )


def _conv(in_channels: int, out_channels: int, kernel_size: int) -> nn.Conv1d:
    return nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)


def _check_kernel(kernel_size: int) -> None:
    if kernel_size % 2 == 0:
        raise ValueError(
            f"kernel_size must be odd so that padding keeps the length, got {kernel_size}"
        )


def make_shapes_cnn(channels: int = 64, kernel_size: int = 5) -> nn.Sequential:
    """Five ``Conv1d`` layers with ReLUs: ``[B, 1, T] -> [B, 1, T]`` (62,337 parameters).

    Each output position depends on ``5 * (kernel_size - 1) + 1`` input positions (21).
    """
    _check_positive_ints(channels=channels, kernel_size=kernel_size)
    _check_kernel(kernel_size)
    return nn.Sequential(
        _conv(1, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, 1, kernel_size),
    )


def make_shapes_attention_model(
    channels: int = 64, kernel_size: int = 5, key_channels: int = 96, scaled: bool = True
) -> nn.Sequential:
    """:func:`make_shapes_cnn` with the middle convolution replaced by self-attention.

    ``[B, 1, T] -> [B, 1, T]``, 58,177 parameters with the defaults. Index 4 of the returned
    ``nn.Sequential`` is the :class:`ConvSelfAttention` layer and ``model[:4]`` computes its
    input, so ``model[4].attention(model[:4](x))`` gives the attention weights.
    """
    _check_positive_ints(channels=channels, kernel_size=kernel_size, key_channels=key_channels)
    _check_kernel(kernel_size)
    return nn.Sequential(
        _conv(1, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        ConvSelfAttention(channels, channels, key_channels, scaled=scaled),
        nn.ReLU(),
        _conv(channels, channels, kernel_size),
        nn.ReLU(),
        _conv(channels, 1, kernel_size),
    )


class ShapesLSTM(nn.Module):
    """A bidirectional LSTM over the ``T`` positions of a ``[B, 1, T]`` signal.

    Every position is one time step with one input feature; a linear layer maps the two
    directions' hidden states to the output value. ``[B, 1, T] -> [B, 1, T]``; with the
    defaults (hidden_size=44, num_layers=2) it has 63,801 parameters, close to the CNN's.
    Samples are independent: no state is carried from one batch or sample to the next.
    """

    def __init__(self, hidden_size: int = 44, num_layers: int = 2):
        super().__init__()
        _check_positive_ints(hidden_size=hidden_size, num_layers=num_layers)
        self.lstm = nn.LSTM(
            input_size=1,
            hidden_size=hidden_size,
            num_layers=num_layers,
            batch_first=True,  # [B, T, features]; the default is [T, B, features]
            bidirectional=True,
        )
        self.head = nn.Linear(2 * hidden_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_signal(x, 1, type(self).__name__)
        hidden, _ = self.lstm(x.transpose(1, 2))  # [B, T, 1] -> [B, T, 2 * hidden_size]
        return self.head(hidden).transpose(1, 2)  # [B, T, 1] -> [B, 1, T]


class BatchAxisLSTM(nn.Module):
    """Source 004's LSTM, kept to show its mistake. Do not use it as a baseline.

    It feeds ``[B, 1, T]`` to ``nn.LSTM(T, hidden_size)`` without ``batch_first``, and
    ``nn.LSTM`` reads that as ``[seq_len=B, batch=1, features=T]``: the recurrence runs along
    the *batch*, each sample is a single step of ``T`` features, and the state flows from one
    sample into the next. It also keeps the final state (detached) for the next call, as the
    source does, so a prediction depends on every sample seen before it. ``reset()`` clears it.
    """

    def __init__(self, seq_len: int = 100, hidden_size: int = 128):
        super().__init__()
        _check_positive_ints(seq_len=seq_len, hidden_size=hidden_size)
        self.lstm = nn.LSTM(seq_len, hidden_size)
        self.head = nn.Linear(hidden_size, seq_len)
        self.state: tuple[torch.Tensor, torch.Tensor] | None = None

    def reset(self) -> None:
        self.state = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_signal(x, 1, type(self).__name__)
        hidden, state = self.lstm(x, self.state)  # x read as [seq_len=B, batch=1, T]
        self.state = tuple(s.detach() for s in state)
        return self.head(hidden)  # [B, 1, T]
