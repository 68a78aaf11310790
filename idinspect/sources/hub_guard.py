"""What a hub server says is checked before it touches the file system or holds the run.

Names: a commit sha is used as a folder name (the range cache, huggingface_hub's ``snapshots/``),
a repository file name as a relative path, an ETag as a blob file name. :func:`check_commit`,
:func:`check_repo_path` and :func:`check_etag` accept only what the hub can legitimately send
(40 hex digits; a relative path without ``..``, backslash or control characters; a token of
letters, digits, ``.``, ``_``, ``-``), so no answer can place a file outside the cache.

Time: every request huggingface_hub's client makes (the API, ``config.json``, ranges, whole
files) goes through :class:`GuardedTransport`, installed once by :func:`install`. It bounds each
read by a timeout (:data:`READ_TIMEOUT_ENV`, default :data:`DEFAULT_READ_TIMEOUT_S` s) and each
request by a total deadline of :data:`DEADLINE_ENV` seconds (default :data:`DEFAULT_DEADLINE_S`)
plus one second per :data:`ALLOWANCE_BYTES_PER_S` bytes the answer announces, so that a server
dripping one byte at a time cannot hold a run for longer; the error names the URL and the bytes
received. It also refuses an ``X-Repo-Commit`` or ETag header that is not a safe name.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Iterator

from ..errors import IdinspectError, TransientError
from ..textsafe import visible

COMMIT_SHA = re.compile(r"\A[0-9a-f]{40}\Z")
SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
_ETAG = re.compile(r"\A[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}\Z")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
#: Longest repository path accepted (the hub's own limit is far below).
MAX_PATH = 1000

READ_TIMEOUT_ENV = "IDINSPECT_HUB_READ_TIMEOUT"
DEADLINE_ENV = "IDINSPECT_HUB_DEADLINE"
DEFAULT_READ_TIMEOUT_S = 60.0
DEFAULT_DEADLINE_S = 300.0
#: A request announcing N bytes gets N / this many seconds on top of the deadline (1 MiB/s).
ALLOWANCE_BYTES_PER_S = 1 << 20


def check_commit(value: object, where: str) -> str:
    """``value`` if it is a commit sha (40 lowercase hex digits), else a one-line error naming ``where``."""
    if isinstance(value, str) and COMMIT_SHA.match(value):
        return value
    raise IdinspectError(f"{where}: the hub named the commit {visible(repr(value))[:80]}, which is not a commit sha "
                         "(40 hex digits); refusing to use it as a folder name. Check HF_ENDPOINT (a proxy or "
                         "mirror answering wrongly) and retry")


def check_repo_path(value: object, where: str) -> str:
    """``value`` if it is a safe relative repository path, else a one-line error naming ``where``."""
    if isinstance(value, str) and 0 < len(value) <= MAX_PATH and not _CONTROL.search(value) \
            and "\\" not in value and not value.startswith("/") and ":" not in value.split("/", 1)[0][1:2] \
            and all(part not in ("", ".", "..") for part in value.split("/")):
        return value
    raise IdinspectError(f"{where}: the hub listed the file {visible(repr(value))[:120]}, which is not a relative path "
                         "inside the repository (empty, absolute, '..', backslash or control characters); "
                         "refusing to write it. Check HF_ENDPOINT and retry")


def check_etag(value: str | None, where: str) -> None:
    """An ETag huggingface_hub would use as a blob file name must be a plain token."""
    if value is None:
        return
    tag = value.strip().removeprefix("W/").strip('"')
    if not _ETAG.match(tag):
        raise IdinspectError(f"{where}: the server sent the ETag {visible(repr(value))[:120]}, which is not a plain "
                             "token; refusing to use it as a file name. Check HF_ENDPOINT and retry")


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise IdinspectError(f"{name}={visible(text)[:40]}: expected a positive number of seconds")
    return value


def limits() -> tuple[float, float]:
    """(read timeout, deadline) in seconds, from the environment (see the module)."""
    return _seconds(READ_TIMEOUT_ENV, DEFAULT_READ_TIMEOUT_S), _seconds(DEADLINE_ENV, DEFAULT_DEADLINE_S)


def _url(request) -> str:
    return visible(str(request.url.copy_with(query=None)))


def _timed_out(url: str, received: int, seconds: float, what: str) -> TransientError:
    return TransientError(f"{url}: {what} after {received} bytes in {seconds:.1f} s; the server is too slow or "
                          f"stalled: retry later, or raise {READ_TIMEOUT_ENV} / {DEADLINE_ENV} (seconds)")


class _GuardedStream:
    """The response body, read under the read timeout and the request's deadline."""

    def __init__(self, inner, url: str, start: float, deadline: float):
        self.inner, self.url, self.start, self.deadline = inner, url, start, deadline
        self.received = 0

    def __iter__(self) -> Iterator[bytes]:
        import httpx2

        try:
            for chunk in self.inner:
                self.received += len(chunk)
                now = time.monotonic()
                if now > self.deadline and self.received:
                    raise _timed_out(self.url, self.received, now - self.start,
                                     f"the answer was still arriving at the deadline ({self.deadline - self.start:.1f} s)")
                yield chunk
        except httpx2.TimeoutException:
            raise _timed_out(self.url, self.received, time.monotonic() - self.start,
                             "no data within the read timeout") from None

    def close(self) -> None:
        if hasattr(self.inner, "close"):
            self.inner.close()


def _guarded_transport_class():
    import httpx2

    class GuardedTransport(httpx2.BaseTransport):
        """Wraps a transport: timeouts and deadline per request, header names checked (see the module)."""

        def __init__(self, inner):
            self.inner = inner

        def handle_request(self, request):
            read_timeout, deadline_s = limits()
            timeout = dict(request.extensions.get("timeout") or {})
            for key in ("connect", "read", "write", "pool"):
                current = timeout.get(key)
                timeout[key] = read_timeout if current is None else min(current, read_timeout)
            request.extensions = {**request.extensions, "timeout": timeout}
            url, start = _url(request), time.monotonic()
            try:
                response = self.inner.handle_request(request)
            except httpx2.TimeoutException:
                raise _timed_out(url, 0, time.monotonic() - start, "no answer within the read timeout") from None
            try:
                commit = response.headers.get("X-Repo-Commit")
                if commit is not None:
                    check_commit(commit, url)
                check_etag(response.headers.get("X-Linked-Etag"), url)
                check_etag(response.headers.get("ETag"), url)
            except IdinspectError:
                response.close()
                raise
            try:
                announced = max(int(response.headers.get("Content-Length", "0")), 0)
            except ValueError:
                announced = 0
            allowance = deadline_s + announced / ALLOWANCE_BYTES_PER_S
            response.stream = httpx2_stream(_GuardedStream(response.stream, url, start, start + allowance))
            return response

        def close(self) -> None:
            self.inner.close()

    return GuardedTransport


def httpx2_stream(guarded: _GuardedStream):
    import httpx2

    class Stream(httpx2.SyncByteStream):
        def __iter__(self):
            return iter(guarded)

        def close(self) -> None:
            guarded.close()

    return Stream()


_installed = False
_lock = threading.Lock()


def install() -> None:
    """Route huggingface_hub's shared HTTP client through :class:`GuardedTransport` (once per process;
    a client factory set before, by the user, is kept and wrapped)."""
    global _installed
    with _lock:
        if _installed:
            return
        from huggingface_hub.utils import _http

        previous = _http._GLOBAL_CLIENT_FACTORY
        guarded = _guarded_transport_class()

        def factory():
            client = previous()
            client._transport = guarded(client._transport)
            client._mounts = {k: (guarded(v) if v is not None else v) for k, v in client._mounts.items()}
            return client

        _http.set_client_factory(factory)
        _installed = True


__all__ = ["COMMIT_SHA", "DEADLINE_ENV", "READ_TIMEOUT_ENV", "SHA256", "check_commit", "check_etag", "check_repo_path",
           "install", "limits"]
