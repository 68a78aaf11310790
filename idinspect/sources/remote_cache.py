"""On-disk cache of byte ranges of hub files, keyed by commit.

Layout, inside the repository's folder of the huggingface_hub cache (``--cache-dir`` or
``HF_HUB_CACHE``), beside the library's own ``blobs/``, ``refs/`` and ``snapshots/`` (which
``hf cache scan`` reads and this never touches; ``hf cache delete`` of the repo removes it too)::

    models--org--name/idinspect-ranges/
        refs/<revision>                 commit sha the revision last resolved to (for --offline)
        <commit>/files.json             the commit's files: name -> size, ETag
        <commit>/<file>/<start>-<end>   bytes [start, end) of <file> at <commit>

A commit names immutable content, so a cached range is never stale; a branch or tag is resolved
online on every run before the cache is read (a cache hit never hides a moved revision), and only
``--offline`` reads ``refs/``. Every file is written under a temporary name in the same folder and
renamed when complete, so a crash or a failed download never leaves a partial range behind. A
temporary file still being written when the process exits (a background fetch's daemon thread, after
the command failed) is removed at exit (:func:`_remove_unfinished`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .remote_http import RemoteFile

FOLDER = "idinspect-ranges"
_RANGE = re.compile(r"^(\d+)-(\d+)$")
#: Temporary files being written (removed when published or abandoned; any left at exit: :func:`_remove_unfinished`).
_UNFINISHED: set[str] = set()
_UNFINISHED_LOCK = threading.Lock()
_EXITING = threading.Event()


@contextlib.contextmanager
def _temporary(folder: Path) -> Iterator[tuple[int, str]]:
    """(fd, path) of a new ``.part-`` file in ``folder``, registered until the block ends (then removed
    unless the block renamed it)."""
    with _UNFINISHED_LOCK:      # created and registered as one step, or refused once exit has begun
        if _EXITING.is_set():
            raise OSError("idinspect is exiting: no new range is written")
        fd, tmp = tempfile.mkstemp(prefix=".part-", dir=folder)
        _UNFINISHED.add(tmp)
    try:
        yield fd, tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        with _UNFINISHED_LOCK:
            _UNFINISHED.discard(tmp)


@atexit.register
def _remove_unfinished() -> None:
    """At exit, before daemon threads are frozen: no new temporary file, and those still being written
    (a background fetch cut short by the command's end) removed."""
    with _UNFINISHED_LOCK:
        _EXITING.set()
        left = list(_UNFINISHED)
    for tmp in left:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def repo_folder(hub_cache: str | Path | None, repo_id: str) -> Path:
    """``<hub cache>/models--org--name/idinspect-ranges``."""
    from huggingface_hub import constants

    root = Path(hub_cache) if hub_cache is not None else Path(constants.HF_HUB_CACHE)
    return root / ("models--" + repo_id.replace("/", "--")) / FOLDER


class RangeCache:
    """Cached ranges of the files of one commit."""

    def __init__(self, folder: Path, commit: str):
        self.folder = folder
        self.commit = commit
        self.root = folder / commit
        self._spans: dict[str, list[tuple[int, int]]] = {}
        # a listing is kept only if no range of its file was published while it was being read
        self._generation: dict[str, int] = {}
        self._memo_lock = threading.Lock()

    # refs and file lists ---------------------------------------------------------------
    @staticmethod
    def read_ref(folder: Path, revision: str) -> str | None:
        try:
            text = (folder / "refs" / revision).read_text().strip()
        except (OSError, ValueError):
            return None
        return text or None

    def write_ref(self, revision: str) -> None:
        atomic_write(self.folder / "refs" / revision, self.commit.encode())

    def read_files(self) -> dict[str, RemoteFile] | None:
        try:
            data = json.loads((self.root / "files.json").read_text())
            return {n: RemoteFile(n, int(v["size"]), v.get("etag")) for n, v in data.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def write_files(self, files: dict[str, RemoteFile]) -> None:
        data = {f.name: {"size": f.size, "etag": f.etag} for f in files.values()}
        atomic_write(self.root / "files.json", json.dumps(data, sort_keys=True).encode())

    # ranges ------------------------------------------------------------------------------
    def spans(self, filename: str) -> list[tuple[int, int]]:
        """Cached ``[start, end)`` ranges of ``filename``, sorted."""
        spans = self._spans.get(filename)
        if spans is None:
            with self._memo_lock:
                generation = self._generation.get(filename, 0)
            found = []
            with contextlib.suppress(OSError):
                for entry in os.scandir(self._dir(filename)):
                    m = _RANGE.match(entry.name)
                    if m and entry.is_file() and entry.stat().st_size == int(m.group(2)) - int(m.group(1)):
                        found.append((int(m.group(1)), int(m.group(2))))
            spans = sorted(found)
            with self._memo_lock:
                if self._generation.get(filename, 0) == generation:
                    self._spans[filename] = spans
        return spans

    def missing(self, filename: str, start: int, end: int) -> list[tuple[int, int]]:
        """Parts of ``[start, end)`` not in the cache."""
        gaps, pos = [], start
        for a, b in self.spans(filename):
            if b <= pos or a >= end:
                continue
            if a > pos:
                gaps.append((pos, a))
            pos = max(pos, b)
            if pos >= end:
                break
        if pos < end:
            gaps.append((pos, end))
        return gaps

    @contextlib.contextmanager
    def writer(self, filename: str, start: int, end: int) -> Iterator[BinaryIO]:
        """A file to write bytes ``[start, end)`` into; published only if the block ends without error
        and the byte count is right."""
        folder = self._dir(filename)
        folder.mkdir(parents=True, exist_ok=True)
        with _temporary(folder) as (fd, tmp):
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                size = f.tell()
            if size != end - start:
                raise OSError(f"{filename}: wrote {size} bytes for range {start}-{end}")
            os.replace(tmp, folder / f"{start}-{end}")
        self._forget(filename)

    def read_into(self, filename: str, start: int, buf: memoryview) -> None:
        """Fill ``buf`` with bytes ``[start, start + len(buf))`` from cached ranges (KeyError if any is missing)."""
        pos, end = start, start + len(buf)
        for a, b in self.spans(filename):
            if b <= pos or a > pos:
                continue
            take = min(b, end) - pos
            with open(self._dir(filename) / f"{a}-{b}", "rb", buffering=0) as f:
                done = 0
                while done < take:
                    got = os.preadv(f.fileno(), [buf[pos - start + done:pos - start + take]], pos - a + done)
                    if got <= 0:
                        raise KeyError(filename)
                    done += got
            pos += take
            if pos >= end:
                return
        if pos < end:
            raise KeyError(filename)

    def drop(self, filename: str, spans: list[tuple[int, int]] | None = None) -> None:
        """Remove cached ranges of ``filename`` (all of them by default): they failed a check, and the
        next read asks the server again."""
        for a, b in self.spans(filename) if spans is None else spans:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._dir(filename) / f"{a}-{b}")
        self._forget(filename)

    def _forget(self, filename: str) -> None:
        """Ranges of ``filename`` changed: its listing is read again (and one being read is not kept)."""
        with self._memo_lock:
            self._generation[filename] = self._generation.get(filename, 0) + 1
            self._spans.pop(filename, None)

    def drop_outside(self, filename: str, data_start: int, size: int) -> None:
        """Drop cached ranges that the file's safetensors header rules out: past the file's end
        ``size``, or across the boundary ``data_start`` between the header and the tensor data."""
        bad = [(a, b) for a, b in self.spans(filename) if b > size or a < data_start < b]
        if bad:
            self.drop(filename, bad)

    def _dir(self, filename: str) -> Path:
        return self.root / filename


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _temporary(path.parent) as (fd, tmp):
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)


__all__ = ["FOLDER", "RangeCache", "atomic_write", "repo_folder"]
