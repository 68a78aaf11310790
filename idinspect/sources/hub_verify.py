"""Whole files from the hub checked against the digests the revision API gave for them.

An LFS file's ETag is the sha256 of its content; any other file's is its git blob sha
(``sha1("blob <size>\\0" + content)``). A downloaded file whose bytes do not hash to it is refused
with both digests, and the bad copy is removed from the cache so that a rerun downloads it again
(never read offline as if it were good).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from ..errors import TransientError
from ..textsafe import visible
from .hub_guard import COMMIT_SHA, SHA256

_BLOCK = 8 << 20


def content_digest(path: Path, etag: str) -> str | None:
    """The digest of ``path`` of the kind ``etag`` is (sha256 or git blob sha), or None if neither."""
    if SHA256.match(etag):
        h = hashlib.sha256()
    elif COMMIT_SHA.match(etag):
        h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    else:
        return None
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def verify_download(path: Path, etag: str | None, where: str) -> None:
    """Refuse (and remove) ``path`` if its content does not match the hub's ``etag``."""
    if not etag:
        return
    got = content_digest(path, etag)
    if got is None or got == etag:
        return
    kind = "sha256" if SHA256.match(etag) else "git blob sha"
    real = Path(os.path.realpath(path))
    for p in (path, real):
        with contextlib.suppress(OSError):
            os.unlink(p)
    raise TransientError(f"{where}: the downloaded bytes do not match the hub's {kind} (expected {etag}, got {got}); "
                         f"the copy was removed from the cache ({visible(real)}): retry, and check HF_ENDPOINT or the "
                         "proxy if it happens again")


__all__ = ["content_digest", "verify_download"]
