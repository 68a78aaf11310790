"""A stored tensor's bytes viewed in place: the file's pages mapped read-only, nothing copied.

For passes that only look at every byte once, as verify's comparison of two checkpoints' untouched
tensors: reading them into buffers first (:mod:`.pread`) copies every byte through the kernel, about
twice the CPU time of comparing them where the page cache holds them (the 1B shape's 4.3 GB of
non-attention tensors, both sides: 2.0 CPU-s read and compared, 0.9 CPU-s mapped and compared). The
mapping lives as long as the tensor (and its views): dropping the last one unmaps it. The file must
not shrink while a view is alive (as with any mapping, reading past its new end faults), so such
views are for checkpoints idinspect only reads, held for one comparison each.
"""

from __future__ import annotations

import mmap
import warnings

import numpy as np
import torch


def map_tensor(fd: int, start: int, end: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor stored in bytes [start, end) of the open file ``fd``, a read-only view of its mapped
    pages (never write to it); ValueError where the file is shorter than ``end``."""
    n = end - start
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    offset = start - start % mmap.ALLOCATIONGRANULARITY
    pages = mmap.mmap(fd, end - offset, offset=offset, access=mmap.ACCESS_READ)
    raw = np.frombuffer(pages, dtype=np.uint8, count=n, offset=start - offset)
    with warnings.catch_warnings():      # torch warns that the buffer is not writable: it is never written
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.from_numpy(raw)
    return flat.view(dtype).reshape(shape)


__all__ = ["map_tensor"]
