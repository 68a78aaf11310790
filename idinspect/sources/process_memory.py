"""Large blocks straight from the system, so that freed ones go back to it (glibc only).

glibc serves a ``malloc`` of 128 KiB or more with its own ``mmap`` and returns it on ``free`` -
until such a block is freed: the threshold then rises to that block's size (up to 32 MiB), and
later blocks of that size come from the heap of the thread's arena, where freed memory stays with
the process. A process streaming a 70B checkpoint allocates and frees tensors and buffers of a few
to 32 MiB in several threads (fetch pieces, k/v projections, float64 chunks) for minutes: its
resident set grew with depth (`bench.remote_compare`: 1.15 GB at 4 layers, 1.75 GB at 16, 2.9 GB at
80 layers of both models) and stayed under 1 GB at 16 layers with the threshold fixed at 1 MiB.
"""

from __future__ import annotations

import ctypes
import threading

#: ``mallopt`` parameter number of ``M_MMAP_THRESHOLD`` in glibc's malloc.h.
_M_MMAP_THRESHOLD = -3
_done = threading.Event()


def return_large_blocks(threshold: int = 1 << 20) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for the rest of the process (which also stops
    its dynamic rise); True when set. A no-op elsewhere (no ``mallopt``: macOS, Windows)."""
    if _done.is_set():
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, int(threshold)) != 1:
        return False
    _done.set()
    return True


__all__ = ["return_large_blocks"]
