"""A hub id's network work started while the command is still importing torch.

Importing torch and the analysis takes 1.5-2.5 s on a small machine, the same order as reading a
1B model's attention bytes over a fast link. :func:`warm` (called by a command before its heavy
imports; torch-free, as every module it imports) starts a daemon thread that does what
:func:`~.remote.open_remote` would do first, in the same order and with the same functions:

1. resolve the revision (:func:`~.remote_pin.pin`);
2. download ``config.json`` and the shard index into the hub cache (:func:`~.remote_pin.download`);
3. read every shard's header into the range cache, one :func:`probe_header` request per shard, all at once;
4. with ``prefetch``: start a :class:`~.remote_stream.Prefetch` of the tensors whose names are the
   attention projections of the Llama-style layout (``[model.]layers.N.self_attn.{q,k,v,o}_proj``),
   in layer order, before the adapter that plans them is even imported.

:func:`~.remote.open_remote` then calls :func:`take`, which waits for steps 1-3 and either re-raises
their failure (so errors are the ones the command would have raised itself, mapped by the same
``hub_errors``) or hands over the pinned commit and the running prefetch, which the reader re-plans
to the adapter's own tensors (:meth:`~.remote_stream.Prefetch.replan`: speculated tensors the
adapter does not plan and that have not started are never fetched).
"""

from __future__ import annotations

import json
import re
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .file_names import CONFIG_FILE, INDEX_FILE, SINGLE_FILE
from .remote_cache import RangeCache
from .remote_http import RangeFetcher, RemoteFile
from .remote_pin import Pinned, download, pin
from .remote_stream import Prefetch, Sink, fits_disk

#: Tensors fetched before the adapter is known: the attention projections of the Llama-style layout.
SPECULATED = re.compile(r"^(?:model\.)?layers\.(\d+)\.self_attn\.([qkvo])_proj\.(weight|bias)$")
_HEADERS_AT_ONCE = 8


@dataclass
class Warm:
    """What the warm-up thread did: the pinned commit, the shards and the prefetch it started."""

    key: tuple
    thread: threading.Thread | None = None
    pinned: Pinned | None = None
    shards: list[str] = field(default_factory=list)
    prefetch: Prefetch | None = None
    error: BaseException | None = None


_WARM: dict[tuple, Warm] = {}
_LOCK = threading.Lock()


def _key(repo_id: str, revision: str | None, token: str | None, cache_dir) -> tuple:
    return repo_id, revision, token, None if cache_dir is None else str(Path(cache_dir))


def warm(source: str, revision: str | None = None, *, token: str | None = None, cache_dir=None,
         prefetch: bool = True) -> None:
    """Start the warm-up of hub id ``source`` (``org/name[@rev]``) in a daemon thread; anything that is
    not a plain online hub id (a path, a GGUF file, offline mode) is left alone."""
    from .hub import is_offline
    from .hub_ids import HUB_ID, looks_like_path, split_revision

    try:
        if looks_like_path(source) or ":" in source or is_offline(False):
            return
        repo_id, rev = split_revision(source)
    except Exception:  # noqa: BLE001 - the command itself reports a bad source
        return
    if not HUB_ID.match(repo_id) or (rev is not None and revision is not None and rev != revision):
        return
    w = Warm(_key(repo_id, rev or revision, token, cache_dir))
    with _LOCK:
        if w.key in _WARM:
            return
        _WARM[w.key] = w
    w.thread = threading.Thread(target=_run, args=(w, prefetch), name="idinspect-warm", daemon=True)
    w.thread.start()


def take(repo_id: str, revision: str | None, token: str | None, cache_dir) -> Warm | None:
    """The warm-up of this hub id, once its pin, downloads and headers are done (None when there was
    none); its failure is raised here, in the caller's thread."""
    with _LOCK:
        w = _WARM.pop(_key(repo_id, revision, token, cache_dir), None)
    if w is None:
        return None
    if w.thread is not None:
        w.thread.join()
    if w.error is not None:
        if w.prefetch is not None:
            w.prefetch.close()
        raise w.error
    return w


def abandon() -> None:
    """Stop every warm-up no reader took (a command that failed before opening that source, such as
    compare's B after A failed): its thread is waited for and its prefetch stopped, so no range is
    written after the command returns."""
    with _LOCK:
        left = list(_WARM.values())
        _WARM.clear()
    for w in left:
        if w.thread is not None:
            w.thread.join()
        if w.prefetch is not None:
            w.prefetch.close()


def _run(w: Warm, prefetch: bool) -> None:
    repo_id, revision, token, cache_dir = w.key
    try:
        p = pin(repo_id, revision, token=token, cache_dir=cache_dir, offline=False)
        w.pinned = p
        if CONFIG_FILE not in p.files:
            return
        download(p, CONFIG_FILE, token, cache_dir, False)
        if SINGLE_FILE in p.files:
            shards = [SINGLE_FILE]
        elif INDEX_FILE in p.files:
            index = json.loads(download(p, INDEX_FILE, token, cache_dir, False).read_text())
            shards = sorted({v for v in index["weight_map"].values() if v in p.files})
        else:
            return
        w.shards = shards
        with ThreadPoolExecutor(max_workers=max(1, min(_HEADERS_AT_ONCE, len(shards)))) as pool:
            headers = dict(zip(shards, pool.map(lambda f: _header(p, f), shards)))
        if prefetch and p.fetcher is not None:
            w.prefetch = _speculate(p, headers)
    except BaseException as exc:  # noqa: BLE001 - raised again by take(), in the command's thread
        w.error = exc


def _header(p: Pinned, fname: str) -> tuple[int, dict] | None:
    """(8 + header length, JSON header) of one shard, fetched into the range cache (None when it does
    not read: the reader opening the checkpoint says why)."""
    from . import remote_stream

    file = p.files[fname]
    if p.fetcher is None or not p.cache.missing(fname, 0, 8):
        return None
    n = probe_header(p.cache, p.fetcher, file, remote_stream.HEADER_PROBE)
    if n is None or n > 100_000_000 or n > file.size:
        return None
    for a, b in p.cache.missing(fname, 0, n):
        buf = bytearray(b - a)
        p.fetcher.fetch(file, a, b, Sink(buf))
        with p.cache.writer(fname, a, b) as out:
            out.write(buf)
    try:
        raw = bytearray(n - 8)
        p.cache.read_into(fname, 8, memoryview(raw))
        header = json.loads(raw)
    except (KeyError, OSError, ValueError, RecursionError):
        return None
    return (n, header) if isinstance(header, dict) else None


def probe_header(cache: RangeCache, fetcher: RangeFetcher, file: RemoteFile, probe: int) -> int | None:
    """One request for the first ``probe`` bytes of a safetensors file, cached as its header part and
    the tensor bytes after it (the header/data boundary is never inside one cached range). Returns
    8 + the header length, or None when the file is too small (or its size unknown) to probe."""
    end = min(probe, file.size)
    if end < 8:
        return None
    buf = bytearray(end)
    fetcher.fetch(file, 0, end, Sink(buf))
    n = 8 + struct.unpack("<Q", bytes(buf[:8]))[0]
    for a, b in ((0, min(n, end)), (n, end)):
        if a < b:
            with cache.writer(file.name, a, b) as out:
                out.write(buf[a:b])
    return n


def _speculate(p: Pinned, headers: dict[str, tuple[int, dict] | None]) -> Prefetch | None:
    """A prefetch of the Llama-style attention projections named in ``headers``, in layer order."""
    from . import remote_stream as rs

    found = []
    for fname, read in headers.items():
        base, header = read if read is not None else (0, {})
        for name, entry in header.items():
            m = SPECULATED.match(name)
            offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
            if m is None or not (isinstance(offsets, list) and len(offsets) == 2
                                 and all(isinstance(x, int) and x >= 0 for x in offsets)
                                 and base + offsets[1] <= p.files[fname].size):
                continue
            found.append(((int(m.group(1)), "qkvo".index(m.group(2)), m.group(3)), name,
                          (fname, base + offsets[0], base + offsets[1])))
    if not found:
        return None
    found.sort()
    tensors = {name: span for _, name, span in found}
    total = sum(b - a for _, a, b in tensors.values())
    return Prefetch(p.cache, p.fetcher, p.files, tensors, to_disk=fits_disk(p.cache, total), window=rs.WINDOW,
                    workers=rs.WORKERS, chunk=rs.CHUNK)


__all__ = ["SPECULATED", "Warm", "abandon", "probe_header", "take", "warm"]
