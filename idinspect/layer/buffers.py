"""Reusable float64 buffers for computing one layer after another (one pool per thread).

Every layer of a model has the same shapes, and a fresh factor-sized float64 tensor (32 MiB for a
Llama-1B W_Q) costs more in page faults than the arithmetic that fills it: the allocator maps
buffers that large anew each time. A :class:`Float64Buffers` keeps one buffer per key and hands it
out again while shape, memory layout and device match. Whatever a caller got from it is
overwritten by the next computation that asks for the same key. The analyzer casts a few heads at
a time into it (:func:`idinspect.forms.per_head.spectra.gram_float64`); export keeps the float64 layer
and the gauge-fixed factors in it (:mod:`idinspect.exporting.layers`).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch


class Float64Buffers:
    """Float64 buffers by key (float32 ones where asked), reused across calls; not shared between threads."""

    def __init__(self) -> None:
        self._buffers: dict[Hashable, torch.Tensor] = {}

    def empty(self, key: Hashable, shape: tuple[int, ...], strides: tuple[int, ...],
              device: torch.device | str = "cpu", dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """An uninitialised tensor of ``shape``, ``strides`` and ``dtype`` (float64 unless told) on ``device``."""
        buf = self._buffers.get(key)
        if (buf is None or tuple(buf.shape) != tuple(shape) or buf.stride() != tuple(strides)
                or buf.device != torch.device(device) or buf.dtype != dtype):
            buf = self._buffers[key] = torch.empty_strided(shape, strides, dtype=dtype, device=device)
        return buf

    def like(self, key: Hashable, t: torch.Tensor) -> torch.Tensor:
        """An uninitialised float64 tensor with ``t``'s shape, memory layout (strides) and device."""
        return self.empty(key, tuple(t.shape), t.stride(), t.device)

    def widen(self, key: Hashable, t: torch.Tensor) -> torch.Tensor:
        """``t`` converted to float64 in a reused buffer of its layout."""
        return self.like(key, t).copy_(t)


__all__ = ["Float64Buffers"]
