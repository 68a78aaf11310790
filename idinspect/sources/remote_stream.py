"""Planned tensors fetched in the background, in the order the analysis reads them.

A :class:`Prefetch` takes the planned tensors in plan order (layer order), coalesces the ranges
that touch in each file, splits them into pieces of at most ``chunk`` bytes and fetches the pieces
``workers`` at a time, earliest layer first, while the analysis runs: a read of a tensor waits only
for the pieces that hold it, so layer i is analysed while later layers are still on the wire. A
piece a read waits for and that has not started yet goes first.

Where the pieces go:

- ``to_disk``: into the range cache (published whole, as every range; a rerun reads them there);
- otherwise into memory, at most ``window`` bytes fetched ahead of the reads; a read copies each
  piece of its tensor as it arrives, and a piece is dropped once every tensor it holds has been
  read, its memory kept for a later piece within the window (:class:`PieceMaps`). A model whose
  attention bytes would take too much of the disk, e.g. a 70B's 24 GB, is read this way; nothing is
  cached. A tensor read again after its pieces were dropped is fetched again.

Workers are daemon threads; :meth:`Prefetch.close` stops them after their current piece. The first
failure of a piece is raised by every read that needs it (and stops further pieces).
"""

from __future__ import annotations

import mmap
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .remote_cache import RangeCache
from .remote_http import RangeFetcher, RemoteFile

#: Largest single range request (bytes); bigger coalesced spans are split.
CHUNK = 16 << 20
#: Range requests in flight at once (8 x 16 MB: twice the bytes a 500 MB/s link with 60 ms per
#: redirected request holds in flight, and the first layer still arrives after 128 MB).
WORKERS = 8
#: Bytes of each shard asked for at once to read its header (the length and the JSON in one request).
HEADER_PROBE = 64 << 10
#: Largest share of the range cache's free disk one run's planned bytes may take; beyond it they are
#: streamed through memory and not cached.
DISK_SHARE = 0.25
#: Bytes fetched ahead of the reads when the planned tensors are streamed through memory.
WINDOW = 64 << 20
_PENDING, _RUNNING, _DONE, _FREED = range(4)
#: The first ``workers`` pieces are ``chunk / RAMP_SPLIT`` bytes, so that the first layer arrives after
#: a few MB rather than after ``workers x chunk`` bytes shared by all connections; later ones are merged
#: back up to ``chunk`` (fewer requests).
RAMP_SPLIT = 4


@dataclass(eq=False)
class _Piece:
    fname: str
    start: int
    end: int
    order: int
    state: int = _PENDING
    data: mmap.mmap | None = None
    readers: set[str] = field(default_factory=set)   # tensors not yet read that overlap it (memory mode)


def _release(buf: mmap.mmap | None) -> None:
    """Give a piece's pages back to the system now. Memory-mode pieces are anonymous maps, not
    ``bytearray`` s: 16 MB blocks freed by 8 fetch threads were kept by glibc's per-thread arenas
    (its mmap threshold rises to the size of the blocks freed; see :mod:`.process_memory`)."""
    if buf is not None:
        try:
            buf.close()
        except BufferError:       # a view is still alive: the map goes when it does
            pass


class PieceMaps:
    """Anonymous maps of fetched pieces, kept for the next pieces instead of returned at once.

    A fresh map's pages are faulted in and zeroed by the kernel as the body is written into them,
    about a quarter of a memory-mode fetch's CPU on a fast link (loopback: 2.5 -> 1.8 CPU-s a GB at 8
    connections). A released map is kept while the maps kept fit in the room the prefetch's window
    leaves beside the bytes it still holds (the resident set stays what the window allows), and taken
    by the next piece that fits in it; the rest are returned to the system (:func:`_release`).
    A kept map's old bytes are never read: a piece is read only once its whole range was written.
    """

    def __init__(self):
        self._kept: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> mmap.mmap:
        """A map of at least ``size`` bytes: the smallest kept one that fits, else a new one (the kept
        maps too small for it, the first pieces' and spans' ends, are returned: they would hold the
        bound against the full-size pieces that follow)."""
        with self._lock:
            fits = [m for m in self._kept if len(m) >= size]
            if fits:
                best = min(fits, key=len)
                self._kept.remove(best)
                return best
            small, self._kept = self._kept, []
        for buf in small:
            _release(buf)
        return mmap.mmap(-1, size)

    def give(self, buf: mmap.mmap | None, room: int) -> None:
        """Keep ``buf`` for a later piece if the maps kept stay within ``room`` bytes, else return it."""
        if buf is None:
            return
        with self._lock:
            if sum(map(len, self._kept)) + len(buf) <= room:
                self._kept.append(buf)
                return
        _release(buf)

    def clear(self) -> None:
        with self._lock:
            kept, self._kept = self._kept, []
        for buf in kept:
            _release(buf)


class Sink:
    """A file-like ``write`` into a bytearray or map, in order (the fetcher writes a range sequentially)."""

    def __init__(self, buf: bytearray | mmap.mmap):
        self.view, self.pos = memoryview(buf), 0

    def write(self, chunk: bytes) -> int:
        n = len(chunk)
        self.view[self.pos:self.pos + n] = chunk
        self.pos += n
        return n


class Prefetch:
    """Background fetch of ``tensors`` (name -> (file, start, end), in plan order); see the module."""

    def __init__(self, cache: RangeCache, fetcher: RangeFetcher, files: dict[str, RemoteFile],
                 tensors: dict[str, tuple[str, int, int]], *, to_disk: bool, window: int, workers: int, chunk: int,
                 on_bytes: Callable[[int], None] | None = None):
        self.cache, self.fetcher, self.files = cache, fetcher, files
        self.to_disk, self.window = to_disk, window
        from .process_memory import return_large_blocks

        return_large_blocks()        # a resident set flat over the depth of a long remote read
        #: called with the byte count of each piece fetched (from the worker threads)
        self.on_bytes = on_bytes
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._closed = False
        self._held = 0                       # bytes of pieces in memory or in flight (memory mode)
        self._workers, self._chunk, self._active = workers, chunk, 0
        self._of: dict[str, list[_Piece]] = {}
        self._queue: deque[_Piece] = deque()
        self._urgent: deque[_Piece] = deque()
        self._threads: list[threading.Thread] = []
        self._maps = PieceMaps()
        self.pending_bytes = 0
        self.replan(tensors)

    def replan(self, tensors: dict[str, tuple[str, int, int]]) -> None:
        """Fetch ``tensors`` (in this order) from now on: pieces of tensors no longer planned are
        skipped if not started (and dropped from memory if fetched), tensors not yet planned are
        added, and the pieces not started are put in the new order."""
        with self._cond:
            for name in [n for n in self._of if n not in tensors]:
                for p in self._of.pop(name):
                    p.readers.discard(name)
                    if not p.readers and p.state in (_PENDING, _DONE):
                        self._drop(p)
            new = {n: v for n, v in tensors.items() if n not in self._of}
            order = {name: i for i, name in enumerate(tensors)}
            pieces = self._pieces(new, order)
            for piece in pieces:
                for n in piece.readers:
                    self._of.setdefault(n, []).append(piece)
            waiting = [p for p in self._queue if p.state == _PENDING] + pieces
            for p in waiting:
                p.order = min(order[n] for n in p.readers)
            waiting.sort(key=lambda p: (p.order, p.fname, p.start))
            self._queue = deque(waiting)
            self.pending_bytes = sum(p.end - p.start for p in waiting)
            for _ in range(min(self._workers, len(waiting)) - self._active):
                self._active += 1
                t = threading.Thread(target=self._work, name="idinspect-fetch", daemon=True)
                self._threads.append(t)
                t.start()
            self._cond.notify_all()

    def _pieces(self, tensors: dict[str, tuple[str, int, int]], order: dict[str, int]) -> list[_Piece]:
        """Pieces of the missing bytes of ``tensors``: small ones first (the ramp), then up to a chunk."""
        by_file: dict[str, list[tuple[int, int, str]]] = {}
        for name, (fname, a, b) in tensors.items():
            if b > a:
                by_file.setdefault(fname, []).append((a, b, name))
        unit = max(1, self._chunk // RAMP_SPLIT)
        pieces: list[_Piece] = []
        for fname, spans in by_file.items():
            spans.sort()
            for a, b in coalesce([(x, y) for x, y, _ in spans]):
                for ga, gb in (self.cache.missing(fname, a, b) if self.to_disk else [(a, b)]):
                    pieces += [_Piece(fname, s, min(s + unit, gb), 0) for s in range(ga, gb, unit)]
        for piece in pieces:
            piece.readers = {n for x, y, n in by_file[piece.fname] if x < piece.end and y > piece.start}
            piece.order = min(order[n] for n in piece.readers)
        pieces.sort(key=lambda p: (p.order, p.fname, p.start))
        return _merge_after(pieces, self._workers * unit, self._chunk)

    def set_window(self, window: int) -> None:
        """Fetch up to ``window`` bytes ahead of the reads from now on (memory mode)."""
        with self._cond:
            self.window = window
            self._cond.notify_all()

    # reads -------------------------------------------------------------------------------
    def covers(self, name: str) -> bool:
        """Whether ``name`` is one of the tensors this prefetch fetches (and has not dropped)."""
        return name in self._of

    def read(self, name: str, fname: str, start: int, out: memoryview) -> bool:
        """Fill ``out`` with the bytes of ``name`` (waiting for its pieces). False when they are not held
        here (the caller reads the range cache, or fetches the tensor itself)."""
        pieces = self._of.get(name)
        if pieces is None:
            return False
        end = start + len(out)
        with self._cond:
            for p in pieces:
                if p.state == _PENDING and p not in self._urgent:
                    self._urgent.append(p)
            self._cond.notify_all()
            if self.to_disk:        # in the range cache once fetched: the caller reads it there
                while self._error is None and any(p.state in (_PENDING, _RUNNING) for p in pieces):
                    self._cond.wait()
                if self._error is not None:
                    raise self._error
                return False
            left = list(pieces)
            while left:
                if self._error is not None:
                    raise self._error
                if any(p.state == _FREED for p in left):
                    return False    # dropped (a tensor read again): the caller fetches it
                arrived = [p for p in left if p.state == _DONE]
                if not arrived:
                    self._cond.wait()
                    continue
                for p in arrived:   # copied and dropped as each arrives: a large tensor is never held twice
                    a, b = max(p.start, start), min(p.end, end)
                    with memoryview(p.data) as view:
                        out[a - start:b - start] = view[a - p.start:b - p.start]
                    p.readers.discard(name)
                    if not p.readers:
                        self._drop(p)
                    left.remove(p)
                self._cond.notify_all()
            del self._of[name]
        return True

    def _drop(self, p: _Piece) -> None:
        """``p`` is read by every tensor it holds, or no longer planned: a fetched piece's bytes leave
        the held count (memory mode) and its map goes to :class:`PieceMaps`. Called with the lock held."""
        if p.state == _DONE and not self.to_disk:
            self._held -= p.end - p.start
        p.state, p.data = _FREED, self._maps.give(p.data, self.window - self._held)

    # workers ---------------------------------------------------------------------------------
    def _next(self) -> _Piece | None:
        """The next piece to fetch (urgent ones first), within the window; None when there is none left
        or the prefetch is closed. Called with the lock held."""
        while True:
            if self._closed or self._error is not None:
                self._active -= 1
                return None
            while self._urgent and self._urgent[0].state != _PENDING:
                self._urgent.popleft()
            while self._queue and self._queue[0].state != _PENDING:
                self._queue.popleft()
            if self._urgent:
                piece = self._urgent.popleft()
            elif self._queue:
                piece = self._queue[0]
                size = piece.end - piece.start
                if not self.to_disk and self._held > 0 and self._held + size > self.window:
                    self._cond.wait()
                    continue
                self._queue.popleft()
            else:
                self._active -= 1
                return None
            piece.state = _RUNNING
            if not self.to_disk:
                self._held += piece.end - piece.start
            return piece

    def _work(self) -> None:
        while True:
            with self._cond:
                piece = self._next()
            if piece is None:
                return
            try:
                if self.to_disk:
                    fetch_range(self.cache, self.fetcher, self.files[piece.fname], piece.start, piece.end)
                else:
                    buf = self._maps.take(piece.end - piece.start)
                    sink = Sink(buf)
                    try:
                        self.fetcher.fetch(self.files[piece.fname], piece.start, piece.end, sink)
                    finally:
                        sink.view.release()
                    piece.data = buf
            except BaseException as exc:  # noqa: BLE001 - handed to every read that waits (IdinspectError mostly)
                with self._cond:
                    if self._error is None:
                        self._error = exc
                    self._active -= 1
                    self._cond.notify_all()
                return
            with self._cond:
                piece.state = _DONE
                if not piece.readers:          # planned out while in flight
                    self._drop(piece)
                self._cond.notify_all()
            if self.on_bytes is not None:
                self.on_bytes(piece.end - piece.start)

    def close(self) -> None:
        """Stop the workers after the pieces they are fetching."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        self._maps.clear()


def _merge_after(pieces: list[_Piece], ramp: int, chunk: int) -> list[_Piece]:
    """``pieces`` (in fetch order) with those after the first ``ramp`` bytes merged with their
    predecessor where contiguous in the same file and at most ``chunk`` bytes together."""
    out: list[_Piece] = []
    seen, kept = 0, 0          # kept: pieces of the ramp, never merged into
    for p in pieces:
        last = out[-1] if len(out) > kept else None
        if seen < ramp:
            kept += 1
        if (seen >= ramp and last is not None and last.fname == p.fname and last.end == p.start
                and p.end - last.start <= chunk):
            last.end = p.end
            last.readers |= p.readers
            last.order = min(last.order, p.order)
        else:
            out.append(p)
        seen += p.end - p.start
    return out


def fits_disk(cache: RangeCache, planned: int) -> bool:
    """Whether ``planned`` bytes may go to the range cache: at most :data:`DISK_SHARE` of the free
    space of the disk it is on."""
    import shutil

    folder = cache.root
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return True
    return planned <= DISK_SHARE * free


def fetch_range(cache: RangeCache, fetcher: RangeFetcher, file: RemoteFile, start: int, end: int) -> None:
    """Bytes ``[start, end)`` of ``file`` into the cache (published only when complete)."""
    with cache.writer(file.name, start, end) as out:
        fetcher.fetch(file, start, end, out)


def coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ``[start, end)`` ranges with touching or overlapping ones merged."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


__all__ = ["CHUNK", "DISK_SHARE", "HEADER_PROBE", "WINDOW", "WORKERS", "Prefetch", "Sink", "coalesce", "fetch_range",
           "fits_disk"]
