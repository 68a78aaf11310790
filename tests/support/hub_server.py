"""A local stand-in for the Hugging Face Hub on 127.0.0.1, speaking the endpoints huggingface_hub 2.x uses.

Two real HTTP servers in threads: the *hub* (``GET /api/models/{repo}[/revision/{rev}]``, ``HEAD``/``GET
/{repo}/resolve/{rev}/{file}`` with ``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``, ``X-Linked-Size``,
``X-Error-Code``) and a *CDN* that the hub redirects LFS files (``*.safetensors``) to, answering
``Range`` with ``206``. Both count the body bytes they send and log every request; faults can be
queued per request (status codes with headers, dropped connections, ignored ``Range``, a wrong
``X-Repo-Commit``) and a branch can be moved after a number of API calls. ``LocalHub(link=Link(rate,
latency))`` (:mod:`tests.support.link`) paces every answer through one shared bandwidth and latency.

Files are :class:`Blob` objects, so a benchmark can serve multi-GB checkpoints whose tensor data
is generated on the fly (:class:`PatternBlob`) without holding them in memory or on disk.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import unquote, urlparse

from .link import Link


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-request (the fault tests make the client give up and retry) is
    expected here: it is not printed as socketserver's traceback on the process's stderr, which
    in-process CLI runs capture as the command's own stderr. Any other handler error still is."""

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class Blob:
    """File content: ``size`` and ``read(start, end)``; ``sha256``/``git_sha`` identify it."""

    size: int

    def read(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    @property
    def sha256(self) -> str:
        if not hasattr(self, "_sha256"):
            h = hashlib.sha256()
            for a in range(0, self.size, 16 << 20):
                h.update(self.read(a, min(a + (16 << 20), self.size)))
            self._sha256 = h.hexdigest()
        return self._sha256

    @property
    def git_sha(self) -> str:
        return hashlib.sha1(f"blob {self.size}\0".encode() + self.read(0, self.size)).hexdigest()


class BytesBlob(Blob):
    def __init__(self, data: bytes):
        self.data, self.size = data, len(data)

    def read(self, start: int, end: int) -> bytes:
        return self.data[start:end]


class PatternBlob(Blob):
    """``prefix`` (e.g. a safetensors header) followed by a repeating block of pseudo-random bytes."""

    def __init__(self, prefix: bytes, size: int, seed: int = 0, block: int = 1 << 20, tag: str = ""):
        import random

        self.prefix, self.size = prefix, size
        rng = random.Random(seed)
        # bf16/fp16 values with a small exponent, never NaN/Inf: high byte in 0x3a..0x3d or 0xba..0xbd
        lo = rng.randbytes(block // 2)
        hi = bytes(rng.choice((0x3a, 0x3b, 0x3c, 0x3d, 0xba, 0xbb, 0xbc, 0xbd)) for _ in range(block // 2))
        self.block = bytes(b for pair in zip(lo, hi) for b in pair)
        self._sha256 = hashlib.sha256(f"{tag}:{seed}:{size}".encode() + prefix).hexdigest()

    def read(self, start: int, end: int) -> bytes:
        out = bytearray()
        p = len(self.prefix)
        if start < p:
            out += self.prefix[start:min(end, p)]
            start = min(end, p)
        n = len(self.block)
        while start < end:
            off = (start - p) % n
            take = min(end - start, n - off)
            out += self.block[off:off + take]
            start += take
        return bytes(out)

    @property
    def git_sha(self) -> str:
        return hashlib.sha1(self._sha256.encode()).hexdigest()


@dataclass
class Repo:
    commits: dict[str, dict[str, Blob]]
    refs: dict[str, str]
    gated: bool = False
    tokens: tuple[str, ...] = ("hf_good",)


@dataclass
class Fault:
    """Applied to the next request whose path contains ``path`` on ``host`` ('hub' or 'cdn')."""

    kind: str            # 'status', 'drop' (connection closed mid-body), 'short' (206 for part of the range),
    #                      'ignore_range', 'wrong_commit', 'gzip' (a 206 whose body is the range gzip-compressed,
    #                      with Content-Encoding: gzip, whatever Accept-Encoding asked for), 'corrupt_file' (a whole
    #                      file served with its last byte flipped: not the bytes the API's sha256 names), 'body'
    #                      (answer ``status``/``headers``/``body`` instead), 'drip' (the real answer, one byte per
    #                      ``delay`` seconds), 'headers' (the real answer with ``headers`` set over its own),
    #                      'corrupt' (one body byte flipped)
    host: str = "cdn"
    path: str = ""
    status: int = 500
    headers: dict = field(default_factory=dict)
    keep: float = 0.5    # 'drop': fraction of the body sent before closing
    after: int = 0       # matching requests let through untouched before this one applies
    body: bytes = b""
    delay: float = 0.0
    times: int = 1       # how many requests it applies to before it is used up


class LocalHub:
    """Start with ``with LocalHub() as hub:``; ``hub.endpoint`` is the HF_ENDPOINT to use."""

    def __init__(self, link: Link | None = None):
        self.link = link if link is not None else Link()
        self.repos: dict[str, Repo] = {}
        self.faults: list[Fault] = []
        self.log: list[dict] = []
        self.bytes_served = {"hub": 0, "cdn": 0}
        self.move_after: tuple[int, str, str, str] | None = None   # (api calls, repo, ref, new commit)
        self.api_calls = 0
        self._lock = threading.Lock()
        self._servers = []

    # setup ------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, Blob | bytes], commit: str | None = None, **kw) -> str:
        blobs = {n: (BytesBlob(b) if isinstance(b, (bytes, bytearray)) else b) for n, b in files.items()}
        commit = commit or hashlib.sha1(repr(sorted((n, b.sha256) for n, b in blobs.items())).encode()).hexdigest()
        repo = self.repos.setdefault(repo_id, Repo(commits={}, refs={}, **kw))
        repo.commits[commit] = blobs
        repo.refs["main"] = commit
        return commit

    def __enter__(self) -> Self:
        for role in ("hub", "cdn"):
            server = _QuietServer(("127.0.0.1", 0), _handler(self, role))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
            self._servers.append(server)
        self.endpoint = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        return self

    def __exit__(self, *exc) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()

    def reset_counts(self) -> None:
        with self._lock:
            self.log.clear()
            self.bytes_served = {"hub": 0, "cdn": 0}

    def take_fault(self, host: str, path: str) -> Fault | None:
        with self._lock:
            for i, f in enumerate(self.faults):
                if f.host == host and f.path in path:
                    if f.after > 0:
                        f.after -= 1
                        return None
                    f.times -= 1
                    if f.times <= 0:
                        self.faults.pop(i)
                    return f
        return None

    def api_body(self, repo_id: str, rev: str = "main") -> dict:
        """The revision API's JSON for ``repo_id@rev`` as the hub serves it (to edit into a 'body' fault)."""
        repo = self.repos[repo_id]
        commit = repo.refs.get(rev, rev)
        return _api_json(repo_id, commit, repo.commits[commit], repo.gated)

    def blob_by_sha(self, sha: str) -> Blob | None:
        for repo in self.repos.values():
            for files in repo.commits.values():
                for b in files.values():
                    if b.sha256 == sha:
                        return b
        return None


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def _lfs(name: str) -> bool:
    """Weights are LFS files on the hub: served through a redirect to the CDN."""
    return name.endswith((".safetensors", ".gguf"))


def _handler(hub: LocalHub, role: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        # plumbing ---------------------------------------------------------------------
        def _send(self, status: int, headers: dict, body: bytes = b"", head: bool = False, length: int | None = None,
                  keep: float | None = None) -> None:
            hub.link.wait_first_byte()
            self.send_response(status)
            headers = {"Content-Length": str(len(body) if length is None else length), **headers}
            fault = getattr(self, "_fault", None)
            if fault is not None and fault.kind == "headers":
                headers.update(fault.headers)
            for k, v in headers.items():
                self.send_header(k, str(v))
            self.end_headers()
            if head:
                return
            if keep is not None:
                body = body[:int(len(body) * keep)]
                self.close_connection = True
            fault = getattr(self, "_fault", None)
            if fault is not None and fault.kind == "corrupt" and body:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            with hub._lock:           # counted before the write: a client that has the body sees the count
                hub.bytes_served[role] += len(body)
            try:
                if fault is not None and fault.kind == "drip":
                    import time

                    for i in range(len(body)):
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(fault.delay)
                else:
                    hub.link.write(self.wfile, body)
            except (BrokenPipeError, ConnectionResetError):
                with hub._lock:
                    hub.bytes_served[role] -= len(body)

        def _error(self, status: int, code: str | None, head: bool) -> None:
            body = json.dumps({"error": code or "error"}).encode()
            headers = {"Content-Type": "application/json"}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, headers, body, head)

        def _serve(self, head: bool) -> None:
            path = unquote(urlparse(self.path).path)
            entry = {"host": role, "method": self.command, "path": path, "range": self.headers.get("Range"),
                     "auth": self.headers.get("Authorization"), "user_agent": self.headers.get("User-Agent"),
                     "accept_encoding": self.headers.get("Accept-Encoding")}
            with hub._lock:
                hub.log.append(entry)
            fault = hub.take_fault(role, path)
            entry["fault"] = fault.kind if fault is not None else None
            self._fault = fault
            if fault is not None and fault.kind == "status":
                self._send(fault.status, fault.headers, b'{"error": "injected"}', head)
                return
            if fault is not None and fault.kind == "body":
                self._send(fault.status, fault.headers, fault.body, head)
                return
            if role == "cdn":
                self._cdn(path, head, fault)
            else:
                self._hub(path, head, fault)

        # the CDN -----------------------------------------------------------------------------
        def _cdn(self, path: str, head: bool, fault: Fault | None) -> None:
            m = re.match(r"^/blobs/([0-9a-f]{64})$", path)
            blob = hub.blob_by_sha(m.group(1)) if m else None
            if blob is None:
                self._error(404, None, head)
                return
            rng = _RANGE.match(self.headers.get("Range") or "")
            headers = {"ETag": f'"{hashlib.md5(blob.sha256.encode()).hexdigest()}"', "Accept-Ranges": "bytes"}
            if rng is None or (fault is not None and fault.kind in ("ignore_range", "corrupt_file")):
                body = b"" if head else blob.read(0, blob.size)
                if fault is not None and fault.kind == "corrupt_file" and body:   # same size, one byte not the blob's
                    body = body[:-1] + bytes([body[-1] ^ 0xFF])
                self._send(200, headers, body, head, length=blob.size)
                return
            a = int(rng.group(1))
            b = min(int(rng.group(2)) + 1 if rng.group(2) else blob.size, blob.size)
            if a >= blob.size:
                self._send(416, {"Content-Range": f"bytes */{blob.size}"}, b"", head)
                return
            if fault is not None and fault.kind == "short" and b - a > 1:   # a valid 206 for less than was asked
                b = a + max(1, int((b - a) * fault.keep))
            headers["Content-Range"] = f"bytes {a}-{b - 1}/{blob.size}"
            if fault is not None and fault.kind == "gzip":
                import gzip

                body = gzip.compress(blob.read(a, b), mtime=0)
                headers["Content-Encoding"] = fault.headers.get("Content-Encoding", "gzip")
                self._send(206, headers, b"" if head else body, head, length=len(body))
                return
            keep = fault.keep if fault is not None and fault.kind == "drop" else None
            self._send(206, headers, b"" if head else blob.read(a, b), head, length=b - a, keep=keep)

        # the hub ---------------------------------------------------------------------------
        def _hub(self, path: str, head: bool, fault: Fault | None) -> None:
            m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)$", path)
            if m:
                self._tree(m.group(1), m.group(2), head)
                return
            m = re.match(r"^/api/models/([^/]+/[^/]+?)(?:/revision/(.+))?$", path)
            if m:
                self._api(m.group(1), m.group(2) or "main", head)
                return
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                self._resolve(m.group(1), m.group(2), m.group(3), head, fault)
                return
            self._error(404, None, head)

        def _lookup(self, repo_id: str, rev: str, head: bool):
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", head)
                return None, None
            commit = repo.refs.get(rev, rev if rev in repo.commits else None)
            if commit is None:
                self._error(404, "RevisionNotFound", head)
                return None, None
            return repo, commit

        def _api(self, repo_id: str, rev: str, head: bool) -> None:
            repo, commit = self._lookup(repo_id, rev, head)
            if repo is None:
                return
            with hub._lock:
                hub.api_calls += 1
                move = hub.move_after
                if move is not None and hub.api_calls >= move[0] and move[1] == repo_id:
                    hub.repos[repo_id].refs[move[2]] = move[3]
                    hub.move_after = None
            body = json.dumps(_api_json(repo_id, commit, repo.commits[commit], repo.gated)).encode()
            self._send(200, {"Content-Type": "application/json"}, body, head)

        def _tree(self, repo_id: str, rev: str, head: bool) -> None:
            """``list_repo_tree(recursive=True)``, which ``snapshot_download`` asks for (one page)."""
            repo, commit = self._lookup(repo_id, rev, head)
            if repo is None:
                return
            entries = []
            for name, blob in sorted(repo.commits[commit].items()):
                e = {"type": "file", "oid": blob.git_sha, "size": blob.size, "path": name}
                if _lfs(name):
                    e["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
                entries.append(e)
            self._send(200, {"Content-Type": "application/json"}, json.dumps(entries).encode(), head)

        def _resolve(self, repo_id: str, rev: str, filename: str, head: bool, fault: Fault | None) -> None:
            repo, commit = self._lookup(repo_id, rev, head)
            if repo is None:
                return
            auth = self.headers.get("Authorization") or ""
            if repo.gated and auth.removeprefix("Bearer ") not in repo.tokens:
                self._error(403 if auth else 401, "GatedRepo", head)
                return
            blob = repo.commits[commit].get(filename)
            if blob is None:
                self._error(404, "EntryNotFound", head)
                return
            if fault is not None and fault.kind == "wrong_commit":
                commit = "f" * 40
            headers = {"X-Repo-Commit": commit}
            if _lfs(filename):
                headers.update({"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": blob.size,
                                "ETag": f'"{blob.git_sha}"', "Location": f"{hub.cdn}/blobs/{blob.sha256}"})
                self._send(302, headers, b"", head)
                return
            headers["ETag"] = f'"{blob.git_sha}"'
            self._send(200, headers, b"" if head else blob.read(0, blob.size), head, length=blob.size)

    return Handler


def _api_json(repo_id: str, commit: str, files: dict[str, Blob], gated: bool) -> dict:
    siblings = []
    for name, blob in sorted(files.items()):
        s = {"rfilename": name, "size": blob.size, "blobId": blob.git_sha}
        if _lfs(name):
            s["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": 134}
        siblings.append(s)
    return {"_id": "x", "id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
            "gated": "auto" if gated else False, "disabled": False, "downloads": 0,
            "likes": 0, "tags": [], "siblings": siblings}


def served_files(folder) -> dict[str, bytes]:
    """A checkpoint folder as the hub would serve it: name -> bytes."""
    from pathlib import Path

    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}


__all__ = ["Blob", "BytesBlob", "Fault", "LocalHub", "PatternBlob", "Repo", "served_files"]
