"""The key/value cache of incremental decoding: what one attention layer has
computed so far.

Chapter 10's GPT uses it to generate; chapter 11 builds a cache from scratch,
then shows :meth:`KVCache.append`; chapter 13 rolls it over a sliding window.
Shapes: ``B`` batch, ``H_kv`` key/value heads, ``T`` positions, ``d_head`` the
width of a head.
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers import _validate as check

__all__ = ["KVCache"]


class KVCache:
    """The keys and values one attention layer has computed so far, for
    incremental decoding.

    ``keys`` and ``values`` are ``(B, H_kv, T_held, d_head)`` (None while
    empty); ``append`` writes the new positions' and returns the keys and values
    they may read. One cache per layer: :meth:`GPT.new_caches` makes them
    (``[KVCache()] * num_layers`` would be one cache for every layer, and is
    refused). With grouped-query attention it holds ``H_kv`` heads, not ``H``:
    that is where the memory saving is, and a step reads them without copying.

    The cache is *preallocated*: its first ``append`` allocates two buffers of
    ``capacity`` positions (at least as many as it is given), each ``append``
    copies the new positions into the next free slice of them, and
    ``keys``/``values`` are views of the filled part. A decoding step therefore
    writes one position per layer, whatever the cache's length; a cache grown by
    concatenation (``torch.cat([cached, new])``) would copy all of it at every
    step. :meth:`GPT.generate` asks for the prompt's length plus
    ``max_new_tokens``, so it never grows; without a ``capacity`` (or beyond it)
    the buffers grow by doubling, a copy whose cost spreads over as many steps
    as the cache already held. ``memory_bytes`` counts the positions held,
    ``allocated_bytes`` the buffers.

    ``window`` (None: keep everything) makes the cache *roll*: a layer whose
    query ``i`` reads only keys ``j > i - window`` never needs older ones, so
    after each append the cache keeps the last ``window`` positions only, and
    its memory stays flat however long the sequence grows (Mistral's rolling
    buffer): buffers of about ``2 * window`` positions, and when the next
    positions do not fit after the held ones, the held ones move to the front (a
    copy of ``window`` positions at most once every ``window`` steps). The
    cache has no end of its own: a model whose positions are relative
    (:attr:`GPTConfig.streams`) steps it past ``context_length``; a model with
    absolute positions stops there.
    ``length`` counts every position appended so far (the next one's index: RoPE
    and ALiBi use these true positions); ``held`` is how many the cache holds
    now, the last ones, from position ``start = length - held`` on.

    Under autograd the buffers cannot be written in place: backward needs the
    keys and values that each step's attention read, and the next ``append``
    would overwrite them. ``differentiable`` says how the cache grows:
    ``True``, out of place, every ``append`` concatenating the new positions to
    the held ones (a copy of the cache per append, through which gradients
    flow: a windowed layer's chunks use such a cache in training); ``False``,
    in place, an ``append`` that autograd records being an error; ``None``
    (the default), out of place exactly for an ``append`` that autograd
    records (gradients enabled, keys or values that require them), in place
    otherwise, as in decoding under ``torch.no_grad()``.
    """

    def __init__(
        self,
        window: int | None = None,
        capacity: int | None = None,
        *,
        differentiable: bool | None = None,
    ) -> None:
        if window is not None:
            check.positive_int("window", window)
        if capacity is not None:
            check.positive_int("capacity", capacity)
        if differentiable is not None:
            check.boolean("differentiable", differentiable)
        self.window, self.requested = window, capacity
        self.differentiable = differentiable
        self._keys: Tensor | None = None  # (B, H_kv, capacity, d_head) buffers
        self._values: Tensor | None = None
        # the held positions are buffer slots first .. end - 1
        self._first = self._end = 0
        self.length = 0  # positions appended so far

    @property
    def keys(self) -> Tensor | None:
        """The keys held, ``(B, H_kv, T_held, d_head)``: a view of the buffer
        (None if empty)."""
        return (
            None
            if self._keys is None
            else self._keys[:, :, self._first : self._end]
        )

    @property
    def values(self) -> Tensor | None:
        """The values held, ``(B, H_kv, T_held, d_head)``: a view of the buffer
        (None if empty)."""
        return (
            None
            if self._values is None
            else self._values[:, :, self._first : self._end]
        )

    @property
    def entry_shape(self) -> tuple[int, int, int, int] | None:
        """``keys.shape`` (None while empty), read without making the view
        ``keys`` is."""
        if self._keys is None:
            return None
        batch, heads, _, width = self._keys.shape
        return batch, heads, self.held, width

    @property
    def held(self) -> int:
        """How many positions the cache holds now (at most ``window`` after an
        append)."""
        return self._end - self._first

    @property
    def capacity(self) -> int:
        """How many positions the buffers have room for (0 before the first
        append)."""
        return 0 if self._keys is None else self._keys.shape[2]

    @property
    def start(self) -> int:
        """The position of the oldest key held."""
        return self.length - self.held

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, H_kv, T_new, d_head)`` keys and values; return those held
        plus the new.

        The returned keys sit at positions ``start .. length - 1`` (read
        ``start`` before the call); with a ``window``, at most ``window +
        T_new`` of them. They are views of the cache's buffers, valid until the
        next ``append``.
        """
        _check_cache_entries(self, keys, values)
        recorded = torch.is_grad_enabled() and (
            keys.requires_grad or values.requires_grad
        )
        if self.differentiable or (self.differentiable is None and recorded):
            return self._concatenate(keys, values)
        new = keys.shape[2]
        if self._end + new > self.capacity:
            self._make_room(keys, values, new)
        first, end = self._first, self._end + new
        # one slice written: no copy of the rest
        self._keys[:, :, self._end : end].copy_(keys)
        self._values[:, :, self._end : end].copy_(values)
        self._end, self.length = end, self.length + new
        # roll: what no later query reads is no longer held
        if self.window is not None:
            self._first = max(first, end - self.window)
        return self._keys[:, :, first:end], self._values[:, :, first:end]

    def _concatenate(
        self, keys: Tensor, values: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``append`` out of place (see ``differentiable``): the held
        positions and the new ones, concatenated into new tensors."""
        self.length += keys.shape[2]
        if self._keys is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        # buffers exactly full: the next write grows
        self._keys, self._values = (
            keys,
            values,
        )
        self._first, self._end = 0, keys.shape[2]
        if self.window is not None:
            self._first = max(0, self._end - self.window)
        return keys, values

    def _make_room(self, keys: Tensor, values: Tensor, new: int) -> None:
        """Buffers with ``new`` free slots after the held positions (rare: not
        in a step)."""
        held, needed = self.held, self.held + new
        # roll: move to the front
        if self.window is not None and needed <= self.capacity:
            for buffer in (self._keys, self._values):
                buffer[:, :, :held] = buffer[
                    :, :, self._first : self._end
                ].clone()
            self._first, self._end = 0, held
            return
        size = max(needed, self.requested or 0, 2 * self.capacity)
        # about two windows: a roll every `window` steps at most
        if self.window is not None:
            size = max(needed, min(size, 2 * self.window))
        shape = (keys.shape[0], keys.shape[1], size, keys.shape[3])
        buffers = []
        for old, like in ((self._keys, keys), (self._values, values)):
            buffer = like.new_empty(shape)
            if held:
                buffer[:, :, :held] = old[:, :, self._first : self._end]
            buffers.append(buffer)
        self._keys, self._values = buffers
        self._first, self._end = 0, held

    def memory_bytes(self) -> int:
        """Bytes of the keys and values held, counted: ``2 * B * H_kv * T_held *
        d_head * size``."""
        if self._keys is None:
            return 0
        return sum(
            t.numel() * t.element_size() for t in (self.keys, self.values)
        )

    def allocated_bytes(self) -> int:
        """Bytes of the two buffers: ``memory_bytes`` with ``capacity`` in place
        of ``T_held``."""
        if self._keys is None:
            return 0
        return sum(
            t.numel() * t.element_size() for t in (self._keys, self._values)
        )

    def __repr__(self) -> str:
        shape = None if self._keys is None else tuple(self.keys.shape)
        held = (
            f"held={self.held}, capacity={self.capacity}, window={self.window}"
        )
        return f"KVCache(length={self.length}, {held}, keys={shape})"


# ------------------------------------------------------------ this module's checks
# Each has one caller, above; the generic checks are in helpers._validate.


def _check_cache_entries(cache, keys, values) -> None:
    """New keys and values ``(B, H_kv, T, d_head)`` that fit those already in
    ``cache``, and that autograd records only if the cache can grow out of
    place."""
    for name, x in (("keys", keys), ("values", values)):
        check.tensor(name, x, floating=True)
        if x.ndim != 4:
            raise ValueError(
                f"a KVCache holds {name} of shape (B, H_kv, T, d_head), "
                f"got {tuple(x.shape)}"
            )
    if keys.shape != values.shape:
        raise ValueError(
            "keys and values must have the same shape, got "
            f"{tuple(keys.shape)} and "
            f"{tuple(values.shape)}"
        )
    # (B, H_kv, T_held, d_head) or None, without slicing the buffers
    held = cache.entry_shape
    if held is not None and tuple(held[:2] + held[3:]) != tuple(
        keys.shape[:2] + keys.shape[3:]
    ):
        raise ValueError(
            f"the cache holds keys of shape {tuple(held)} (B, H_kv, T, "
            f"d_head), the new ones are {tuple(keys.shape)}: batch, heads and "
            "width must match; use a fresh cache "
            "(model.new_caches(batch_size)) for another batch"
        )
    recorded = torch.is_grad_enabled() and (
        keys.requires_grad or values.requires_grad
    )
    if cache.differentiable is False and recorded:
        raise ValueError(
            "this KVCache(differentiable=False) writes in place, but autograd "
            "records these keys and values (they require grad): backward needs "
            "the ones each step read, which the next append would overwrite. "
            "Decode under torch.no_grad(), or build the cache with "
            "differentiable=True (or None, the default)"
        )
