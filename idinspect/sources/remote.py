"""A hub checkpoint read in part: config.json, safetensors headers and the attention tensors' bytes.

:func:`open_remote` resolves the revision to a commit (``HfApi.model_info``), pins every later
request to it, downloads ``config.json`` (and the shard index) with ``hf_hub_download`` into the
hub cache, and reads each shard's header with one speculative range request for its first
:data:`HEADER_PROBE` bytes (the 8-byte length and, nearly always, the whole JSON; a longer header
costs one more request), all shards at once. :class:`RemoteCheckpoint` then serves tensors from
the byte ranges in :mod:`.remote_cache`; the tensors the model registers with
:meth:`RemoteCheckpoint.plan` (every layer's attention tensors, in layer order) are fetched in the
background from the first read on (:class:`~.remote_stream.Prefetch`: coalesced, split into
:data:`CHUNK` pieces, :data:`WORKERS` in flight, earliest layer first), so a read waits only for
its own tensor's pieces and layer i is analysed while later layers are still in flight. When the
planned bytes would take more than :data:`DISK_SHARE` of the cache's free disk, they are held in
memory instead (:data:`WINDOW` bytes ahead of the reads, or what the reader's pass leaves of its
memory budget: :meth:`RemoteCheckpoint.read_ahead`) and not cached.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import torch

from ..errors import IdinspectError
from . import remote_stream
from .checkpoint import TensorReader, check_weight_map, shard_of_each_tensor
from .file_names import (
    CONFIG_FILE,
    INDEX_FILE,
    PICKLE_SUFFIXES,
    SAFETENSORS_SUFFIX,
    SINGLE_FILE,
)
from .hub_errors import hub_errors
from .remote_cache import RangeCache
from .remote_http import RangeFetcher, RemoteFile
from .remote_pin import Pinned, download, pin
from .remote_stream import (
    CHUNK,
    DISK_SHARE,
    HEADER_PROBE,
    WINDOW,
    WORKERS,
    Prefetch,
    coalesce,
    fetch_range,
    fits_disk,
)
from .remote_warm import probe_header, take
from .safetensors_format import DTYPES_BY_CODE, header_length, tensor_entries

_MAX_HEADER = 100_000_000


class RemoteCheckpoint(TensorReader):
    """Tensors of one commit's safetensors, read through the range cache (fetching what is missing)."""

    def __init__(self, repo_id: str, commit: str, files: dict[str, RemoteFile], cache: RangeCache,
                 fetcher: RangeFetcher | None, shard_files: list[str], weight_map: dict[str, str] | None,
                 tqdm_class: type | None = None, adopt: Prefetch | None = None):
        self.repo_id, self.commit, self.cache, self.fetcher = repo_id, commit, cache, fetcher
        self.files = files
        self.shard_files = shard_files
        self._tqdm = tqdm_class
        self._planned: dict[str, None] = {}      # in plan (layer) order
        self._prefetch: Prefetch | None = None
        self._adopt = adopt        # a prefetch started by remote_warm, taken over on the first read
        self._window = remote_stream.WINDOW
        self._bar = None
        self._lock = threading.Lock()
        self._bar_lock = threading.Lock()
        self._bar_left = 0
        with ThreadPoolExecutor(max_workers=max(1, min(remote_stream.WORKERS, len(shard_files)))) as pool:   # headers of shards in parallel
            read = dict(zip(shard_files, pool.map(self._header, shard_files)))
        self.header_bytes = sum(length for length, _ in read.values())
        headers = {fname: header for fname, (_, header) in read.items()}
        self._where: dict[str, str] = shard_of_each_tensor(headers, self._ref)
        #: name -> (dtype code, shape, first byte, end byte)
        self._meta: dict[str, tuple[str, tuple[int, ...], int, int]] = {
            name: headers[fname][name] for name, fname in self._where.items()}
        if weight_map is not None:
            check_weight_map(self._where, weight_map, self._ref(INDEX_FILE))

    # TensorReader ----------------------------------------------------------------------
    def keys(self) -> list[str]:
        return sorted(self._where)

    def _entry(self, name: str):
        try:
            return self._meta[name]
        except KeyError:
            raise IdinspectError(f"{self.repo_id}@{self.commit}: no tensor named {name}") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name)[1]

    def dtype(self, name: str) -> torch.dtype:
        code = self._entry(name)[0]
        if code not in DTYPES_BY_CODE:
            raise IdinspectError(f"{self._ref(self._where[name])}: tensor {name} has dtype {code}, which idinspect cannot "
                                 f"read (readable: {', '.join(DTYPES_BY_CODE)})")
        return DTYPES_BY_CODE[code]

    def file_of(self, name: str) -> str | None:
        return self._where.get(name)

    def get(self, name: str) -> torch.Tensor:
        """Read ``name`` from the range cache, first fetching every planned range not yet cached."""
        _, shape, start, end = self._entry(name)
        fname = self._where[name]
        out = torch.empty(shape, dtype=self.dtype(name))
        if end - start != out.numel() * out.element_size():
            raise IdinspectError(f"{self._ref(fname)}: tensor {name} spans {end - start} bytes but its shape and dtype "
                                 f"need {out.numel() * out.element_size()}; the file is corrupt")
        if end == start:
            return out
        buf = memoryview(out.reshape(-1).view(torch.uint8).numpy())
        prefetch = self._start_prefetch()
        if prefetch is not None and prefetch.read(name, fname, start, buf):
            return out
        with self._lock:
            if self.cache.missing(fname, start, end):
                self._fetch({name} if prefetch is not None else set(self._planned) | {name})
        try:
            self.cache.read_into(fname, start, buf)
        except (KeyError, OSError):
            raise IdinspectError(f"{self._ref(fname)}: cached bytes of tensor {name} vanished during the run "
                                 f"({self.cache.root}); rerun") from None
        return out

    # planning and fetching ----------------------------------------------------------------
    def plan(self, names) -> None:
        """Tensors to fetch in the background, in this order, from the first read on."""
        for n in names:
            if n in self._meta:
                self._planned[n] = None

    def _start_prefetch(self) -> Prefetch | None:
        """The background fetch of the planned tensors, started on the first call (None offline or
        with nothing planned)."""
        with self._lock:
            if self._prefetch is None and self.fetcher is not None and self._planned:
                tensors = {n: (self._where[n], self._meta[n][2], self._meta[n][3]) for n in self._planned}
                total = self.planned_bytes()
                self._bar = _bar(self._tqdm, total, f"fetching attention tensors of {self.repo_id}")
                self._bar_left = total
                rs = remote_stream
                if self._adopt is not None:                  # started before the adapter was known: re-planned
                    self._prefetch, self._adopt = self._adopt, None
                    self._prefetch.replan(tensors)
                    self._prefetch.set_window(self._window)
                    self._prefetch.on_bytes = self._progress
                else:
                    self._prefetch = Prefetch(self.cache, self.fetcher, self.files, tensors,
                                              to_disk=fits_disk(self.cache, total), window=self._window,
                                              workers=rs.WORKERS, chunk=rs.CHUNK, on_bytes=self._progress)
                self._progress(total - self._prefetch.pending_bytes)
            return self._prefetch

    def read_ahead(self, budget: int) -> None:
        """Let the planned tensors streamed through memory (not the range cache) be fetched up to
        ``budget`` bytes ahead of the reads, at least :data:`~.remote_stream.WINDOW`: a reader whose
        memory plan leaves room keeps the link busy while it works on a layer larger than the window."""
        with self._lock:
            self._window = max(remote_stream.WINDOW, int(budget))
            if self._prefetch is not None:
                self._prefetch.set_window(self._window)

    def _progress(self, n: int) -> None:
        """``n`` more planned bytes arrived: the byte bar moves (and closes at the last byte)."""
        with self._bar_lock:
            self._bar_left -= n
            bar = self._bar
            if bar is not None and n:
                bar.update(n)
                if self._bar_left <= 0:
                    bar.close()
                    self._bar = None

    def close(self) -> None:
        """Stop the background fetch (after the pieces in flight)."""
        for prefetch in (self._prefetch, self._adopt):
            if prefetch is not None:
                prefetch.close()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def planned_bytes(self) -> int:
        return sum(self._meta[n][3] - self._meta[n][2] for n in self._planned)

    def total_bytes(self) -> int:
        """Size of every weight file of the checkpoint (what a full download would fetch)."""
        return sum(max(self.files[f].size, 0) for f in self.shard_files if f in self.files)

    def fetch_summary(self) -> dict:
        """The ``fetch`` object of the JSON report's ``model``."""
        return {"bytes_fetched": self.fetcher.bytes_fetched if self.fetcher is not None else 0,
                "requests": self.fetcher.requests if self.fetcher is not None else 0,
                "checkpoint_bytes": self.total_bytes(), "header_bytes": self.header_bytes,
                "attention_bytes": self.planned_bytes(), "commit": self.commit}

    def _fetch(self, names: set[str]) -> None:
        spans: dict[str, list[tuple[int, int]]] = {}
        for n in names:
            _, _, a, b = self._meta[n]
            spans.setdefault(self._where[n], []).append((a, b))
        fetch_missing(self.cache, self.fetcher, self.files, spans, self._tqdm,
                      f"fetching attention tensors of {self.repo_id}", self._ref)

    def _fetch_range(self, fname: str, start: int, end: int) -> None:
        fetch_range(self.cache, self.fetcher, self.files[fname], start, end)

    # headers ------------------------------------------------------------------------------
    def _bytes(self, fname: str, start: int, end: int) -> bytes:
        """Bytes of one shard's header (each shard is read by one thread only)."""
        buf = bytearray(end - start)
        if self.cache.missing(fname, start, end):
            if self.fetcher is None:
                raise IdinspectError(f"{self._ref(fname)}: its safetensors header is not in the range cache "
                                     f"({self.cache.root}) and offline mode is on (HF_HUB_OFFLINE or --offline); "
                                     "run once online")
            self._fetch_range(fname, start, end)
        self.cache.read_into(fname, start, memoryview(buf))
        return bytes(buf)

    def _header(self, fname: str) -> tuple[int, dict[str, tuple[str, tuple[int, ...], int, int]]]:
        """:meth:`_read_header`, with the range cache checked against it: a cached header that does not
        read (a poisoned or damaged range) is dropped and fetched again once, and cached ranges that
        the header puts outside the file or across its header/data boundary are dropped."""
        cached = not self.cache.missing(fname, 0, 8)
        try:
            length, entries = self._read_header(fname)
        except IdinspectError as exc:
            if not cached:
                raise
            self.cache.drop(fname)
            if self.fetcher is None:
                raise IdinspectError(f"{exc} (read from the range cache, which held bad bytes and has dropped them; "
                                     "run once online to fetch them again)") from None
            length, entries = self._read_header(fname)
        size = self.files[fname].size if fname in self.files else -1
        end = size if size >= 0 else max((e[3] for e in entries.values()), default=length)
        self.cache.drop_outside(fname, length, end)
        return length, entries

    def _read_header(self, fname: str) -> tuple[int, dict[str, tuple[str, tuple[int, ...], int, int]]]:
        """(8 + header length, name -> (dtype code, shape, first byte, end byte)) of one shard, read as
        huggingface_hub's safetensors-metadata helper does: the 8-byte length, then the JSON."""
        size = self.files[fname].size if fname in self.files else -1
        if 0 <= size < 8:
            raise IdinspectError(f"{self._ref(fname)}: {size} bytes, too small to be a safetensors file")
        if self.fetcher is not None and fname in self.files and self.cache.missing(fname, 0, 8):
            probe_header(self.cache, self.fetcher, self.files[fname], remote_stream.HEADER_PROBE)
        n = header_length(self._bytes(fname, 0, 8))
        if n > _MAX_HEADER or (size >= 0 and 8 + n > size):
            raise IdinspectError(f"{self._ref(fname)}: not a safetensors file (header length {n} of a {size}-byte file)")
        try:
            header = json.loads(self._bytes(fname, 8, 8 + n))
            return 8 + n, tensor_entries(header, 8 + n, size if size >= 0 else None)
        except RecursionError:
            raise IdinspectError(f"{self._ref(fname)}: not a readable safetensors header (JSON nested too deeply)") from None
        except ValueError as exc:  # JSON errors and HeaderError
            raise IdinspectError(f"{self._ref(fname)}: not a readable safetensors header ({exc})") from None

    def _ref(self, fname: str) -> str:
        return f"{self.repo_id}@{self.commit[:12]}/{fname}"


def fetch_missing(cache: RangeCache, fetcher: RangeFetcher | None, files: dict[str, RemoteFile],
                  spans: dict[str, list[tuple[int, int]]], tqdm_class: type | None, desc: str, ref) -> None:
    """Fetch the parts of ``spans`` (file -> ranges) the cache lacks: coalesced, split into
    :data:`CHUNK` requests, :data:`WORKERS` at a time, with a byte bar when ``tqdm_class`` is set."""
    jobs = []
    for fname, ranges in spans.items():
        for a, b in coalesce(ranges):
            for ga, gb in cache.missing(fname, a, b):
                jobs += [(fname, s, min(s + CHUNK, gb)) for s in range(ga, gb, CHUNK)]
    if not jobs:
        return
    if fetcher is None:
        fname, a, b = jobs[0]
        raise IdinspectError(f"{ref(fname)}: bytes {a}-{b - 1} are not in the range cache ({cache.root}) and "
                             "offline mode is on (HF_HUB_OFFLINE or --offline); run once online")
    bar = _bar(tqdm_class, sum(b - a for _, a, b in jobs), desc)
    try:
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(jobs))) as pool:
            futures = {pool.submit(fetch_range, cache, fetcher, files[f], a, b): (f, a, b) for f, a, b in jobs}
            try:
                for future in as_completed(futures):
                    future.result()
                    if bar is not None:
                        _, a, b = futures[future]
                        bar.update(b - a)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    finally:
        if bar is not None:
            bar.close()


def _bar(tqdm_class: type | None, total: int, desc: str):
    if tqdm_class is None:
        return None
    try:
        return tqdm_class(total=total, unit="B", desc=desc)
    except Exception:  # noqa: BLE001 - progress must never break a read
        return None


def open_remote(repo_id: str, revision: str | None, *, token: str | None = None, cache_dir: str | Path | None = None,
                offline: bool = False) -> tuple[Path, RemoteCheckpoint]:
    """Resolve (:func:`pin`), read config and headers; returns (folder holding config.json, reader)."""
    from ..progress import current_hub_tqdm

    with hub_errors(repo_id, revision, cache_dir, offline):
        warm = None if offline else take(repo_id, revision, token, cache_dir)   # its failure is raised here
        speculated = warm.prefetch if warm is not None else None
        try:
            p = warm.pinned if warm is not None and warm.pinned is not None else pin(
                repo_id, revision, token=token, cache_dir=cache_dir, offline=offline)
            if p.files and CONFIG_FILE not in p.files:
                ggufs = sorted(n for n in p.files if n.lower().endswith(".gguf"))
                hint = (f"; it holds GGUF files: inspect one as {repo_id}:{ggufs[0]}" if ggufs else
                        "; not a transformers checkpoint")
                raise IdinspectError(f"{repo_id}@{p.commit[:12]}: no {CONFIG_FILE} in the repository{hint}")
            config_path = download(p, CONFIG_FILE, token, cache_dir, offline)
            shard_files, weight_map = _weights(p, token, cache_dir, offline)
            reader = RemoteCheckpoint(repo_id, p.commit, p.files, p.cache, p.fetcher, shard_files, weight_map,
                                      current_hub_tqdm(), adopt=speculated)
        except BaseException:
            # the warm-up's fetch has no reader to stop it: stopped here, so no write outlives the call
            if speculated is not None:
                speculated.close()
            raise
    return config_path.parent, reader


def _weights(p: Pinned, token, cache_dir, offline: bool) -> tuple[list[str], dict[str, str] | None]:
    """(shard files, index weight map or None) of the commit."""
    from .checkpoint import _read_index

    repo_id, commit, files = p.repo_id, p.commit, p.files
    if SINGLE_FILE in files:
        return [SINGLE_FILE], None
    if INDEX_FILE in files:
        weight_map, _ = _read_index(download(p, INDEX_FILE, token, cache_dir, offline))
        shards = sorted(set(weight_map.values()))
        absent = [s for s in shards if s not in files]
        if absent:
            raise IdinspectError(f"{repo_id}@{commit[:12]}/{INDEX_FILE}: names shard {absent[0]}, which the repository "
                                 "does not hold; the checkpoint is incomplete")
        return shards, weight_map
    pickles = sorted(n for n in files if n.endswith(PICKLE_SUFFIXES))
    others = sorted(n for n in files if n.endswith(SAFETENSORS_SUFFIX))
    if others:
        raise IdinspectError(f"{repo_id}@{commit[:12]}: safetensors files {others[:3]} but neither {SINGLE_FILE} nor "
                             f"{INDEX_FILE} (not a transformers checkpoint layout)")
    if pickles:
        raise IdinspectError(f"{repo_id}@{commit[:12]}: only pickle weights ({', '.join(pickles[:3])}) and no safetensors; "
                             "idinspect never unpickles (loading a pickle can run arbitrary code)")
    raise IdinspectError(f"{repo_id}@{commit[:12]}: no {SINGLE_FILE} or {INDEX_FILE} in the repository")


__all__ = ["CHUNK", "DISK_SHARE", "HEADER_PROBE", "WINDOW", "WORKERS", "Pinned", "RemoteCheckpoint", "coalesce",
           "fetch_missing", "fetch_range", "open_remote", "pin"]
