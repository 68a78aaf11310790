"""Which commit an export may record as its source: only one whose bytes were verified.

A model read from a hub-cache snapshot (``models--org--name/snapshots/<commit>``, downloaded or
given as a path) names a commit, but the commit is a claim about bytes: a blob edited in the cache,
a snapshot folder copied elsewhere under that name, or bytes a server sent that differ from the
hub's digest all name a commit whose content they are not. In the cache every snapshot file is a
link to ``blobs/<digest>``: the sha256 of the content for LFS files (the weights), the git blob
sha1 (of ``b"blob <size>\\0" + content``) for the others. :func:`verified_commit` hashes each file
the export reads and keeps the commit only when every one matches the digest that names it; where
one does not (or is no such link), the export records no revision and says why.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 8 << 20


def content_digest(path: Path, git_blob: bool) -> str:
    """sha256 of the file's bytes, or (``git_blob``) the git blob sha1 ``sha1(b"blob <size>\\0" + bytes)``."""
    h = hashlib.sha1() if git_blob else hashlib.sha256()
    with open(path, "rb") as fh:
        if git_blob:
            h.update(f"blob {path.stat().st_size}\0".encode())
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verified_commit(commit: str | None, folder: Path | None, names: list[str]) -> tuple[str | None, str | None]:
    """(``commit``, None) when every file ``names`` of ``folder`` is a cache link to a blob whose
    name is its content's digest; else (None, why the commit is not recorded)."""
    if commit is None or folder is None:
        return None, None
    for name in names:
        path = Path(folder) / name
        if not path.is_symlink():
            return None, f"{name} is not a hub-cache blob (a link into blobs/ named by its digest), so its bytes cannot be tied to commit {commit}"
        blob = path.resolve()
        digest = blob.name
        if blob.parent.name != "blobs" or not (_SHA256.match(digest) or _GIT_SHA1.match(digest)):
            return None, f"{name} links to {blob.name}, not to a blob named by its digest, so its bytes cannot be tied to commit {commit}"
        actual = content_digest(blob, git_blob=bool(_GIT_SHA1.match(digest)))
        if actual != digest:
            return None, (f"{name}'s bytes do not match the digest that names its blob ({digest[:12]}..., content "
                          f"{actual[:12]}...): they are not commit {commit}'s; download it again "
                          "(hf download --force-download)")
    return commit, None


__all__ = ["content_digest", "verified_commit"]
