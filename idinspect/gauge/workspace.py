"""Reusable float64 buffers for computing one layer after another.

Every layer of a model has the same shapes, and a fresh factor-sized float64 tensor (32 MiB for a
Llama-1B W_Q) costs more in page faults than the arithmetic that fills it: the allocator maps
buffers that large anew each time. A :class:`Workspace` keeps one buffer per role and hands it out
again while shape, memory layout and dtype match. Whatever a caller got from it is overwritten by
the next computation that uses the same workspace.
"""

from __future__ import annotations

import torch


class Workspace:
    """Buffers by key, reused across calls."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def like(self, key: str, t: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """An uninitialised tensor with ``t``'s shape and memory layout (strides) in ``dtype``."""
        buf = self._buffers.get(key)
        if buf is None or buf.shape != t.shape or buf.stride() != t.stride() or buf.dtype != dtype:
            buf = self._buffers[key] = torch.empty_like(t, dtype=dtype)
        return buf

    def widen(self, key: str, t: torch.Tensor) -> torch.Tensor:
        """``t`` converted to float64 in a reused buffer of its layout."""
        return self.like(key, t).copy_(t)
