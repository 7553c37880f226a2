"""A key/value cache that is allocated once per decode instead of growing every token.

transformers' ``DynamicLayer`` concatenates each new token's keys and values onto the cached ones, so a
T-token decode copies the whole cache T times. :class:`PreallocatedLayer` keeps the same interface (its
``keys`` / ``values`` are the filled part) but writes each step into buffers sized for the prompt plus the
response budget. Dropping finished rows moves the rows that stay down, in place, within the same buffers
(filled part only): no new allocation, so no fresh pages to fault in. The values are the same numbers in
the same order, so the sampled tokens do not change (tests/test_decode_cache.py).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in [batch, heads, capacity, head_dim] buffers, filled in place."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length, self.rows = capacity, 0, 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if self._k is None or end > self._k.shape[-2]:  # first write, or a decode past the planned size
            self._reallocate(key_states.shape[0], max(self.capacity, end), key_states, value_states)
        self._k[: self.rows, :, start:end].copy_(key_states)
        self._v[: self.rows, :, start:end].copy_(value_states)
        self.length = end
        self._expose()
        return self.keys, self.values

    def _expose(self) -> None:
        self.keys, self.values = (
            self._k[: self.rows, :, : self.length],
            self._v[: self.rows, :, : self.length],
        )

    def _reallocate(self, rows: int, capacity: int, key_like, value_like, index=None) -> None:
        """New buffers of ``capacity`` positions holding the filled part (of the rows ``index``, if given)."""
        new_k = key_like.new_empty(rows, key_like.shape[1], capacity, key_like.shape[-1])
        new_v = value_like.new_empty(rows, value_like.shape[1], capacity, value_like.shape[-1])
        if self._k is not None and self.length:
            old_k, old_v = self._k[: self.rows, :, : self.length], self._v[: self.rows, :, : self.length]
            if index is not None:
                old_k, old_v = old_k[index], old_v[index]
            new_k[..., : self.length, :].copy_(old_k)
            new_v[..., : self.length, :].copy_(old_v)
        self._k, self._v, self.rows = new_k, new_v, rows

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._k is None:
            return
        keep = indices.tolist()
        if keep != sorted(set(keep)) or len(keep) > self.rows:  # repeats or reorders (shared prefills)
            self._reallocate(len(keep), self._k.shape[-2], self._k, self._v, index=indices)
        else:  # finished rows dropped: move each later row down; a row's source is never overwritten first
            n = self.length
            for dst, src in enumerate(keep):
                if src != dst:
                    self._k[dst, :, :n].copy_(self._k[src, :, :n])
                    self._v[dst, :, :n].copy_(self._v[src, :, :n])
            self.rows = len(keep)
        self._expose()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self._k is None:
            return
        index = torch.arange(self.rows, device=self._k.device).repeat_interleave(repeats)
        self.batch_select_indices(index)

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self.length = self.get_seq_length()

    def reorder_cache(self, beam_idx) -> None:
        self.batch_select_indices(beam_idx.to(self._k.device) if self._k is not None else beam_idx)

    def reset(self) -> None:
        super().reset()
        self._k = self._v = None
        self.length = self.rows = 0


def preallocated_cache(model, capacity: int) -> DynamicCache:
    """A ``DynamicCache`` for ``model`` whose full-attention layers hold ``capacity`` positions up front
    (sliding-window and other special layers keep transformers' own)."""
    cache = DynamicCache(config=model.config)
    cache.layers = [
        PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    return cache
