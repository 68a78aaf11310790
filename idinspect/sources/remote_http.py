"""Byte ranges of hub files over huggingface_hub's own HTTP client.

Every request goes through ``huggingface_hub.utils.get_session()`` with ``build_hf_headers`` and
``hf_hub_url``, so the token, ``HF_ENDPOINT``, proxies, user agent, offline mode and redirects to
the CDN (Xet bridge or LFS storage; httpx drops the ``Authorization`` header when the host changes)
behave as in every other huggingface_hub download; failures are mapped by ``hf_raise_for_status``.
What huggingface_hub does not do for a ranged read is done here:

- a server answering ``200`` with the whole file to a ``Range`` request is stopped after its
  headers (nothing of the body is read) and reported;
- a connection dropped mid-body or a short ``206`` is resumed from the first missing byte;
- ``429`` waits as ``Retry-After`` says, up to :data:`MAX_WAIT_S` a time and :data:`MAX_TRIES` tries;
- ``X-Repo-Commit`` and the linked ETag on the hub's answer must match the commit and file the run
  is pinned to, otherwise the revision moved under the run.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import IdinspectError, TransientError
from ..textsafe import visible

#: Tries per range (first try included) for dropped connections, short reads, 429 and 5xx.
MAX_TRIES = 6
#: The longest single wait for ``Retry-After`` (seconds); a longer one stops the run with a message.
MAX_WAIT_S = 60.0
#: Wait before retrying a dropped connection or a 5xx, doubled per try.
BASE_BACKOFF_S = 0.25
_RETRY_STATUS = (408, 429, 500, 502, 503, 504)
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


@dataclass(frozen=True)
class RemoteFile:
    """One file of the pinned commit: name in the repo, size and the hub's ETag (LFS sha256)."""

    name: str
    size: int
    etag: str | None


class RangeFetcher:
    """GET byte ranges of files at one commit of one repo; counts the body bytes it receives."""

    def __init__(self, repo_id: str, commit: str, token: str | bool | None, endpoint: str | None = None,
                 sleep: Callable[[float], None] | None = None):
        self.repo_id, self.commit, self.token = repo_id, commit, token
        self.endpoint = endpoint
        self.bytes_fetched = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._sleep = sleep

    def url(self, filename: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, filename, revision=self.commit, endpoint=self.endpoint)

    def fetch(self, file: RemoteFile, start: int, end: int, out: BinaryIO) -> None:
        """Write bytes ``[start, end)`` of ``file`` to ``out`` (resuming after drops; see the module).

        Failures are one-line :class:`IdinspectError` s (hub errors as :func:`~.hub.hub_error` words them).
        """
        from .hub_errors import hub_error

        try:
            self._fetch(file, start, end, out)
        except IdinspectError:
            raise
        except Exception as exc:  # noqa: BLE001 - huggingface_hub's errors become one line, anything else re-raised
            error = hub_error(exc, self.repo_id, self.commit, offline=False)
            if error is None:
                raise
            raise error from None

    def _fetch(self, file: RemoteFile, start: int, end: int, out: BinaryIO) -> None:
        import httpx2
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        from .hub_guard import install

        install()

        pos, tries, backoff = start, 0, BASE_BACKOFF_S
        headers = build_hf_headers(token=self.token)
        headers["Accept-Encoding"] = "identity"
        while pos < end:
            tries += 1
            wait: float | None = None
            try:
                with get_session().stream("GET", self.url(file.name), headers={**headers, "Range": f"bytes={pos}-{end - 1}"},
                                          follow_redirects=True) as response:
                    with self._lock:
                        self.requests += 1
                    if response.status_code in _RETRY_STATUS and tries < MAX_TRIES:
                        wait = self._retry_wait(response, file, backoff)
                    else:
                        if response.status_code >= 400:
                            response.read()
                        hf_raise_for_status(response)
                        self._check_pinned(response, file)
                        self._check_encoding(response, file, pos, end)
                        self._check_range(response, file, pos, end)
                        for chunk in response.iter_raw():
                            room = end - pos
                            if len(chunk) > room:   # a server sending past the range: keep only what was asked
                                chunk = chunk[:room]
                            out.write(chunk)
                            pos += len(chunk)
                            with self._lock:
                                self.bytes_fetched += len(chunk)
                            if pos >= end:
                                break
                        if pos < end and tries >= MAX_TRIES:
                            raise TransientError(f"{self.repo_id}/{file.name}: the server kept ending bytes {start}-{end - 1} "
                                                 f"early ({MAX_TRIES} tries, stopped at byte {pos}); retry later")
                        if pos < end:
                            wait = backoff
            except (httpx2.TransportError, httpx2.DecodingError) as exc:
                if tries >= MAX_TRIES:
                    raise TransientError(f"{self.repo_id}/{file.name}: network error reading bytes {pos}-{end - 1} "
                                         f"({type(exc).__name__}, {MAX_TRIES} tries); check the connection and retry") from None
                wait = backoff
            if wait is not None and pos < end:
                (self._sleep or time.sleep)(wait)
                backoff = min(backoff * 2, 8.0)

    def _retry_wait(self, response, file: RemoteFile, backoff: float) -> float:
        if response.status_code != 429:
            return backoff
        from .hub_api import retry_after

        after = response.headers.get("Retry-After")
        seconds = retry_after(after, backoff)   # an HTTP date, nan or a negative number: our own backoff
        if seconds > MAX_WAIT_S:
            raise TransientError(f"{self.repo_id}/{file.name}: rate limited by the hub (HTTP 429, Retry-After {visible(after)[:40]} s); "
                                 "retry later, or pass --token (authenticated requests get a higher limit)")
        return seconds

    def _check_pinned(self, response, file: RemoteFile) -> None:
        """The hub's own answer (before any CDN redirect) names the commit and the file's ETag."""
        hub_answer = response.history[0] if response.history else response
        commit = hub_answer.headers.get("X-Repo-Commit")
        etag = _normalise_etag(hub_answer.headers.get("X-Linked-Etag") or hub_answer.headers.get("ETag"))
        if commit is not None and commit != self.commit:
            raise TransientError(f"{self.repo_id}/{file.name}: the hub answered for commit {commit} although the run is "
                                 f"pinned to {self.commit}; the revision moved during the run: rerun")
        if file.etag is not None and etag is not None and etag != file.etag and response.history:
            raise IdinspectError(f"{self.repo_id}/{file.name}: its content changed during the run (ETag {etag}, expected "
                                 f"{file.etag} at commit {self.commit}); rerun")

    def _check_encoding(self, response, file: RemoteFile, pos: int, end: int) -> None:
        """Ranges are asked for with ``Accept-Encoding: identity``: a body in any other content coding
        (gzip, br, ...) is not the file's bytes, and is refused before any of it is stored."""
        coding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
        if coding != "identity":
            raise IdinspectError(f"{self.url(file.name)}: the server answered bytes {pos}-{end - 1} with Content-Encoding "
                                 f"{coding!r} although idinspect asked for identity (the file's own bytes); nothing was "
                                 "cached. Use an endpoint (HF_ENDPOINT) or proxy that serves plain byte ranges, or pass "
                                 "--download")

    def _check_range(self, response, file: RemoteFile, pos: int, end: int) -> None:
        if response.status_code == 206:
            m = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if m is None or int(m.group(1)) != pos:
                raise IdinspectError(f"{self.repo_id}/{file.name}: the server answered a range request for bytes {pos}-{end - 1} "
                                     f"with Content-Range {response.headers.get('Content-Range')!r}; it cannot be read in parts")
            return
        if response.status_code == 200 and pos == 0 and end >= file.size:
            return  # asked for the whole file: a 200 is the answer
        length = response.headers.get("Content-Length", "unknown")
        raise IdinspectError(
            f"{self.repo_id}/{file.name}: the server ignored the Range request and started sending the whole file "
            f"(HTTP {response.status_code}, {length} bytes); idinspect stopped instead of downloading it. Pass --download "
            "to fetch whole files, or use an endpoint (HF_ENDPOINT) or proxy that supports byte ranges")


def _normalise_etag(etag: str | None) -> str | None:
    if etag is None:
        return None
    return etag.removeprefix("W/").strip('"')


def resolve_commit(repo_id: str, revision: str | None, token: str | bool | None, endpoint: str | None = None,
                   sleep: Callable[[float], None] | None = None) -> tuple[str, dict[str, RemoteFile]]:
    """``revision`` -> (commit sha, files of that commit) from the revision API
    (``GET /api/models/{repo}/revision/{rev}?blobs=true``, validated by :mod:`.hub_api`).
    A file's ETag is its LFS sha256, else its git blob sha."""
    from .hub_api import fetch_revision

    commit, listing = fetch_revision(repo_id, revision, token, endpoint, MAX_TRIES, MAX_WAIT_S, BASE_BACKOFF_S, sleep)
    files = {name: RemoteFile(name, size if size is not None else -1, sha256 or blob)
             for name, size, sha256, blob in listing}
    return commit, files


__all__ = ["MAX_TRIES", "MAX_WAIT_S", "RangeFetcher", "RemoteFile", "resolve_commit"]
