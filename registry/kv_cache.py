"""The keys and values an attention layer keeps while decoding (:class:`KVCache`), kept apart from the
attention axis (registry/attention.py, which re-exports it) so that the axis's file holds its variants."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of one attention layer, each (B, kv_heads, T, d_head) as seen by attention.

    Self-attention caches grow by :meth:`append` each step, into buffers with spare positions
    (doubled when full): a step writes one position instead of copying the whole history, and a beam
    reorder copies only the filled part. Cross-attention caches are created holding the encoder
    output's K/V and never grow; their rows may be shared by ``group`` consecutive query rows (the
    beams of one sentence), so the source side is stored and read once per sentence, not per beam.
    """

    def __init__(self, k: Tensor | None = None, v: Tensor | None = None, group: int = 1) -> None:
        self._k: Tensor | None = None  # (B, heads, capacity, d_head); positions [0, length) hold data
        self._v: Tensor | None = None
        self._length = 0
        self.group = group
        if k is not None and v is not None:
            self.fill(k, v)

    @property
    def k(self) -> Tensor | None:
        return None if self._k is None else self._k[:, :, : self._length]

    @property
    def v(self) -> Tensor | None:
        return None if self._v is None else self._v[:, :, : self._length]

    @property
    def length(self) -> int:
        return self._length

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values held (the filled positions), what decoding must keep per layer."""
        k, v = self.k, self.v
        return 0 if k is None or v is None else k.numel() * k.element_size() + v.numel() * v.element_size()

    def fill(self, k: Tensor, v: Tensor) -> None:
        """Hold ``k``, ``v`` as they are (a cross-attention cache: the source side, set once)."""
        self._k, self._v, self._length = k, v, k.size(2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        end = self._length + k.size(2)
        if self._k is None or self._v is None or end > self._k.size(2):
            capacity = max(16, 2 * end)
            self._k, self._v = self._resized(self._k, k, capacity), self._resized(self._v, v, capacity)
        self._k[:, :, self._length : end] = k
        self._v[:, :, self._length : end] = v
        self._length = end
        return self._k[:, :, :end], self._v[:, :, :end]

    def _resized(self, old: Tensor | None, like: Tensor, capacity: int) -> Tensor:
        B, heads, _, d_head = like.shape
        buf = like.new_empty(B, heads, capacity, d_head)
        if old is not None and self._length:
            buf[:, :, : self._length] = old[:, :, : self._length]
        return buf

    def index_select(self, index: Tensor) -> None:
        """Keep/reorder rows (hypotheses) of the batch dimension in place."""
        if self._k is None or self._v is None:
            return
        self._k, self._v = self._selected(self._k, index), self._selected(self._v, index)

    def _selected(self, old: Tensor, index: Tensor) -> Tensor:
        buf = old.new_empty(index.numel(), *old.shape[1:])
        # straight into the filled part of the new buffer: one copy, spare positions kept
        torch.index_select(old[:, :, : self._length], 0, index, out=buf[:, :, : self._length])
        return buf
