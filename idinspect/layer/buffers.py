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

    def widen(self, key: Hashable, t: torch.Tensor, strides: tuple[int, ...] | None = None) -> torch.Tensor:
        """``t`` converted to float64 in a reused buffer of its layout (or of ``strides``, e.g.
        :func:`head_blocked_strides`)."""
        buf = self.like(key, t) if strides is None else self.empty(key, tuple(t.shape), strides, t.device)
        return buf.copy_(t)


def dense_strides(t: torch.Tensor) -> tuple[int, ...]:
    """Strides of a dense tensor of ``t``'s shape with ``t``'s order of dimensions in memory (``t``'s
    own strides where ``t`` is dense; a sliced view, e.g. W_Q inside a fused QKV weight, loses its gaps)."""
    order = sorted(range(t.dim()), key=lambda i: (-t.stride(i), i))        # outermost first
    strides, size = [0] * t.dim(), 1
    for i in reversed(order):
        strides[i], size = size, size * t.shape[i]
    return tuple(strides)


def head_blocked_strides(t: torch.Tensor) -> tuple[int, ...]:
    """For a per-head factor [H, a, b]: dense strides with each head's [a, b] block contiguous, its two
    dims in ``t``'s memory order; other tensors: :func:`dense_strides`.

    A head of W_O [H, d_v, d] read from o_proj [d, H d_v] is d rows of d_v entries, d 4 KiB pages
    apart: products over all heads of that layout touch a page per row and ran 2-3x slower than over
    heads gathered into blocks (Llama-1B W_O's float64 Gram, one core: 32 ms against 9-16 ms; the
    gather itself copies d_v entries at a time, ~3-6 ms, where a transposing copy took 32 ms)."""
    if t.dim() != 3:
        return dense_strides(t)
    _, a, b = t.shape
    return (a * b, 1, a) if t.stride(1) < t.stride(2) else (a * b, b, 1)


__all__ = ["Float64Buffers", "dense_strides", "head_blocked_strides"]
