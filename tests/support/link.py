"""A network link for the local hub: a bandwidth shared by every connection, and a latency per answer.

:class:`Link` paces the body bytes of every response of a :class:`~tests.support.hub_server.LocalHub`
(hub and CDN alike) through one token bucket, and waits ``latency`` seconds before each answer's
status line (API, resolve, config, header and range requests all pay it), as a client far from
the hub sees them. ``Link()`` (no rate, no latency) is the unthrottled loopback.
"""

from __future__ import annotations

import threading
import time
from typing import BinaryIO

#: Bytes written per pacing step (at 500 MB/s, 0.5 ms of the link).
SLICE = 256 << 10


class Link:
    """``rate`` bytes per second shared by all connections (None: unlimited) and ``latency`` seconds
    before every answer's first byte. ``burst``: bytes the bucket may hold when the link was idle."""

    def __init__(self, rate: float | None = None, latency: float = 0.0, burst: int = 1 << 20):
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be positive, not {rate}")
        self.rate, self.latency, self.burst = rate, max(0.0, latency), burst
        self._lock = threading.Lock()
        self._free_at = 0.0           # when the bytes granted so far have all crossed the link
        self.bytes_sent = 0

    def wait_first_byte(self) -> None:
        """The latency of one answer (each connection waits on its own: answers overlap)."""
        if self.latency > 0:
            time.sleep(self.latency)

    def _take(self, n: int) -> float:
        """Reserve the link for ``n`` bytes; returns the time by which they have crossed it."""
        with self._lock:
            self.bytes_sent += n
            if self.rate is None:
                return 0.0
            now = time.monotonic()
            start = max(self._free_at, now - self.burst / self.rate)
            self._free_at = start + n / self.rate
            return self._free_at

    def write(self, out: BinaryIO, body: bytes) -> None:
        """Write ``body`` to ``out`` at the link's pace, slice by slice."""
        view = memoryview(body)
        for a in range(0, len(view), SLICE):
            piece = view[a:a + SLICE]
            delay = self._take(len(piece)) - time.monotonic()
            if delay > 0:            # the slice is sent when the link has carried it: never ahead of the rate
                time.sleep(delay)
            out.write(piece)
        out.flush()


__all__ = ["SLICE", "Link"]
