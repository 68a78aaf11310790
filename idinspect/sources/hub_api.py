"""The revision API, read and checked here: ``GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true``.

This is the request ``HfApi.model_info(files_metadata=True)`` makes, through the same client,
headers and error mapping (``hf_raise_for_status``), but its answer is validated field by field
before anything uses it: the body must be a JSON object of at most :data:`MAX_BODY` bytes, ``sha``
a commit sha, ``siblings`` a list of objects whose ``rfilename`` is a safe relative path, sizes
non-negative integers and digests hex. Anything else (an HTML page from a proxy, truncated JSON, a
sha that is a number, sizes as strings) is a one-line error naming the URL and what was wrong. A
429 waits as a finite, non-negative ``Retry-After`` says (``nan``, an HTTP date or a negative
number fall back to the backoff).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from urllib.parse import quote

from ..errors import IdinspectError, TransientError
from ..textsafe import visible
from .hub_guard import check_commit, check_repo_path, install

#: Largest API answer read (bytes); a repository listing of 100,000 files is ~20 MB.
MAX_BODY = 64 << 20


def retry_after(value: str | None, fallback: float) -> float:
    """Seconds a ``Retry-After`` header asks for; ``fallback`` when absent, not a finite number or negative."""
    try:
        seconds = float(value) if value is not None else fallback
    except ValueError:
        return fallback
    return seconds if math.isfinite(seconds) and seconds >= 0 else fallback


def _bad(url: str, what: str) -> TransientError:
    return TransientError(f"{url}: the hub's answer {what}; it is not the revision API's JSON (a proxy, mirror or "
                          "outage page?): check HF_ENDPOINT and retry later")


def _size(value: object, url: str, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(url, f"gives {field} as {visible(repr(value))[:60]}, not a non-negative integer")
    return value


def _digest(value: object, url: str, field: str, length: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != length or any(c not in "0123456789abcdef" for c in value):
        raise _bad(url, f"gives {field} as {visible(repr(value))[:80]}, not {length} hex digits")
    return value


def parse_revision(body: bytes, url: str) -> tuple[str, list[tuple[str, int | None, str | None, str | None]]]:
    """(commit sha, [(file name, size, lfs sha256, git blob sha)]) of an API answer, validated."""
    text = body.lstrip()[:1]
    if text == b"<":
        raise _bad(url, "is an HTML page")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise _bad(url, f"is not valid JSON ({visible(str(exc))[:80]}; {len(body)} bytes, truncated?)") from None
    if not isinstance(data, dict):
        raise _bad(url, f"is a JSON {type(data).__name__}, not an object")
    commit = check_commit(data.get("sha"), url)
    siblings = data.get("siblings", [])
    if siblings is None:
        siblings = []
    if not isinstance(siblings, list):
        raise _bad(url, f"gives siblings as a {type(siblings).__name__}, not a list")
    files = []
    for s in siblings:
        if not isinstance(s, dict):
            raise _bad(url, f"lists a sibling that is a {type(s).__name__}, not an object")
        name = check_repo_path(s.get("rfilename"), url)
        lfs = s.get("lfs")
        if lfs is not None and not isinstance(lfs, dict):
            raise _bad(url, f"gives lfs of {visible(name)} as a {type(lfs).__name__}, not an object")
        size = _size(s.get("size"), url, f"the size of {visible(name)}")
        sha256 = _digest(lfs.get("sha256"), url, f"the sha256 of {visible(name)}", 64) if lfs else None
        lfs_size = _size(lfs.get("size"), url, f"the LFS size of {visible(name)}") if lfs else None
        blob = _digest(s.get("blobId"), url, f"the blobId of {visible(name)}", 40)
        files.append((name, size if size is not None else lfs_size, sha256, blob))
    names = [f[0] for f in files]
    if len(set(names)) != len(names):
        raise _bad(url, "lists a file twice")
    return commit, files


def _read_capped(response, url: str) -> bytes:
    out = bytearray()
    for chunk in response.iter_bytes():
        out += chunk
        if len(out) > MAX_BODY:
            raise _bad(url, f"is larger than {MAX_BODY} bytes")
    return bytes(out)


def fetch_revision(repo_id: str, revision: str | None, token: str | bool | None, endpoint: str | None,
                   tries: int, max_wait: float, backoff: float,
                   sleep: Callable[[float], None] | None = None) -> tuple[str, list]:
    """GET the revision API (retrying 429 as :func:`retry_after` allows) and :func:`parse_revision` it."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    install()
    base = (endpoint or constants.ENDPOINT).rstrip("/")
    url = f"{base}/api/models/{repo_id}" + (f"/revision/{quote(revision, safe='')}" if revision is not None else "")
    shown = visible(url)
    headers = build_hf_headers(token=token)
    for attempt in range(1, tries + 1):
        with get_session().stream("GET", url, headers=headers, params={"blobs": True}) as response:
            if response.status_code == 429:
                after = response.headers.get("Retry-After")
                wait = retry_after(after, backoff * 2 ** attempt)
                if wait > max_wait or attempt == tries:
                    raise TransientError(f"{shown}: rate limited by the hub (HTTP 429, Retry-After {visible(after)[:40]}, "
                                         f"{attempt} tries); retry later, or pass --token (authenticated requests get "
                                         "a higher limit)")
                (sleep or time.sleep)(wait)
                continue
            if response.status_code >= 400:
                response.read()
            hf_raise_for_status(response)
            return parse_revision(_read_capped(response, shown), shown)
    raise IdinspectError(f"{shown}: no answer after {tries} tries")  # unreachable: the last try raises or returns


__all__ = ["MAX_BODY", "fetch_revision", "parse_revision", "retry_after"]
