"""A GGUF file in a hub repository (``org/name[@rev]:file.gguf``), read in part.

The revision is pinned to a commit (:func:`~.remote.pin`); the GGUF header (metadata and tensor
infos) is fetched from the start of the file as far as :func:`~.gguf_header.check_header` walks
it (bounded by what the format allows and the file's size); then only the attention tensors' ranges are fetched
(:func:`~.remote.fetch_missing`: coalesced, a few at a time, cached by commit). The fetched ranges
are laid into a sparse local file of the GGUF's size (bytes never fetched read as zeros and are
never read), which :class:`~.gguf_reader.GGUFCheckpoint` memory-maps as it would a local file; any
other tensor a command reads (a norm gain, ...) is fetched when first read (:meth:`RemoteGGUF.ensure`),
so no read sees the zeros of a byte range never fetched.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path

from ..errors import IdinspectError
from .local_source import split_gguf_source
from .hub_errors import hub_errors
from .remote import Pinned, fetch_missing, pin

#: Fetched together after the header: the attention projections, the per-head q/k norms of the
#: qk-norm families, and the RoPE factor tensors the synthesised config reads.
_ATTENTION = re.compile(r"^(blk\.\d+\.attn_(q|k|v|qkv|output|q_norm|k_norm)\.(weight|bias)"
                        r"|rope_factors_long\.weight|rope_factors_short\.weight|rope_freqs\.weight)$")


class RemoteGGUF:
    """The sparse local copy of one remote GGUF; ``path`` is what GGUFReader opens."""

    def __init__(self, pinned: Pinned, filename: str, tqdm_class: type | None):
        self.pinned, self.filename = pinned, filename
        file = pinned.files.get(filename)
        if file is None:
            raise IdinspectError(f"{pinned.repo_id}@{pinned.commit[:12]}: no file {filename!r} in the repository "
                                 f"(GGUF files there: {', '.join(sorted(n for n in pinned.files if n.endswith('.gguf'))) or 'none'})")
        self.file = file
        self._tqdm = tqdm_class
        self._dir = tempfile.TemporaryDirectory(prefix="idinspect-gguf-")
        self.path = Path(self._dir.name) / Path(filename).name
        with open(self.path, "wb") as f:
            f.truncate(file.size)
        self._held: list[tuple[int, int]] = []     # byte ranges written into the sparse copy
        self._lock = threading.Lock()
        self.header_bytes = self._header()
        self.attention_bytes = 0

    def _ref(self, fname: str) -> str:
        return f"{self.pinned.repo_id}@{self.pinned.commit[:12]}/{fname}"

    def _fetch(self, ranges: list[tuple[int, int]], desc: str | None) -> None:
        p = self.pinned
        fetch_missing(p.cache, p.fetcher, p.files, {self.filename: ranges}, self._tqdm if desc else None,
                      desc or "", self._ref)
        with open(self.path, "r+b") as out:
            for a, b in ranges:
                buf = bytearray(b - a)
                p.cache.read_into(self.filename, a, memoryview(buf))
                os.pwrite(out.fileno(), buf, a)
        self._held.extend(ranges)

    def ensure(self, start: int, end: int) -> None:
        """Make bytes [start, end) of the sparse copy real, fetching them if no earlier fetch wrote them."""
        with self._lock:
            if end > start and not any(a <= start and end <= b for a, b in self._held):
                self._fetch([(start, end)], f"fetching tensors of {self.pinned.repo_id}")

    def _header(self) -> int:
        """Fetch the header as far as :func:`~.gguf_header.check_header` walks it (in doubling reads,
        never past what its counts allow or the file holds); returns the bytes fetched."""
        from .gguf_header import check_header
        from .gguf_reader import _gguf

        _gguf()

        def read(offset: int, n: int) -> bytes:
            self._fetch([(offset, offset + n)], None)
            with open(self.path, "rb") as f:
                return os.pread(f.fileno(), n, offset)

        return check_header(read, self.file.size, self._ref(self.filename)).bytes_read

    def fetch_attention(self) -> None:
        """Fetch every attention tensor's bytes (blk.N.attn_{q,k,v,qkv,output}) into the sparse copy."""
        from .gguf_reader import _gguf

        reader = _gguf().GGUFReader(str(self.path), "r")
        ranges = [(int(t.data_offset), int(t.data_offset) + int(t.n_bytes)) for t in reader.tensors
                  if _ATTENTION.match(t.name)]
        self.attention_bytes = sum(b - a for a, b in ranges)
        self._fetch(ranges, f"fetching attention tensors of {self.pinned.repo_id}")

    def fetch_summary(self) -> dict:
        f = self.pinned.fetcher
        return {"bytes_fetched": f.bytes_fetched if f is not None else 0, "requests": f.requests if f is not None else 0,
                "checkpoint_bytes": self.file.size, "header_bytes": self.header_bytes,
                "attention_bytes": self.attention_bytes, "commit": self.pinned.commit}

    def close(self) -> None:
        self._dir.cleanup()


def open_remote_gguf(repo_id: str, revision: str | None, filename: str, *, token: str | None,
                     cache_dir, offline: bool) -> RemoteGGUF:
    from ..progress import current_hub_tqdm

    with hub_errors(repo_id, revision, cache_dir, offline):
        pinned = pin(repo_id, revision, token=token, cache_dir=cache_dir, offline=offline)
        remote = RemoteGGUF(pinned, filename, current_hub_tqdm())
        try:
            remote.fetch_attention()
        except BaseException:
            remote.close()
            raise
    return remote


__all__ = ["RemoteGGUF", "open_remote_gguf", "split_gguf_source"]
