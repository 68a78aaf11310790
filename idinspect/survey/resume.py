"""Resuming a survey: which models are already done, at which revision.

A model is done when the output holds an ``ok`` row for its source at the revision the model has
now: a hub model's resolved commit, a hub-cache snapshot folder's commit, or for any other local
checkpoint ``files:`` + a digest of config.json's bytes and each weight file's name, size and
modification time (:func:`local_revision`). Failed rows are never "done": a rerun tries them again.
Later rows for a source supersede earlier ones (:func:`latest_rows`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

#: Files whose names, sizes and modification times (and config.json's bytes) make a local revision.
_WEIGHT_GLOBS = ("*.safetensors", "*.safetensors.index.json")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def local_revision(path: str | Path) -> str:
    """``files:`` + 16 hex digits of sha256 over config.json's bytes and each weight file's name,
    size and modification time (nanoseconds), or a single-file checkpoint's (GGUF): changes
    whenever a file of the checkpoint is rewritten."""
    folder = Path(path)
    digest = hashlib.sha256()
    if folder.is_file():  # a single-file checkpoint (GGUF)
        st = folder.stat()
        digest.update(f"{folder.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        return "files:" + digest.hexdigest()[:16]
    config = folder / "config.json"
    digest.update(config.read_bytes() if config.is_file() else b"")
    names = sorted({p.name for pattern in _WEIGHT_GLOBS for p in folder.glob(pattern)})
    for name in names:
        st = (folder / name).stat()
        digest.update(f"\0{name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return "files:" + digest.hexdigest()[:16]


def local_folder(source: str) -> Path | None:
    """The folder (or single file) of a local or ``pkg:`` source, or None for a hub id (or nothing there)."""
    from ..errors import IdinspectError
    from ..sources.hub import looks_like_path
    from ..model import package_checkpoint

    try:
        if source.startswith("pkg:"):
            return package_checkpoint(source)
        if looks_like_path(source):
            path = Path(source).expanduser()
            return path if path.exists() else None
    except (IdinspectError, OSError):
        return None
    return None


def local_source_revision(source: str) -> str | None:
    """The revision of a local source (hub-cache snapshot commit, else :func:`local_revision`);
    None for a hub id or a path that is not a folder. Never raises."""
    from ..model import cache_revision

    folder = local_folder(source)
    if folder is None:
        return None
    try:
        return cache_revision(folder) or local_revision(folder)
    except OSError:
        return None


def current_revision(source: str, *, token: str | None = None, cache_dir: str | None = None,
                     offline: bool = False) -> str | None:
    """The revision ``source`` has now, or None when it cannot be told (then the model is run).

    Local: :func:`local_source_revision`. Hub ``org/name@<40-hex commit>``: that commit. Other hub
    ids: the commit the hub resolves (one metadata request), or offline the cached snapshot's.
    """
    from ..sources.hub import looks_like_path, split_revision

    if source.startswith("pkg:") or looks_like_path(source):
        return local_source_revision(source)
    try:
        repo_id, rev = split_revision(source)
    except Exception:  # noqa: BLE001 - a malformed id: the worker reports it
        return None
    if rev is not None and _COMMIT.match(rev):
        return rev
    try:
        if offline:
            from ..sources.hub import download_snapshot

            return download_snapshot(repo_id, revision=rev, token=token, allow_patterns=["config.json"],
                                     cache_dir=cache_dir, local_files_only=True)[1]
        from huggingface_hub import HfApi

        return HfApi(token=token).model_info(repo_id, revision=rev).sha
    except Exception:  # noqa: BLE001 - unknown revision: run the model, its row says what failed
        return None


def latest_rows(rows: Iterable[dict]) -> dict[str, dict]:
    """The last row of each source (later rows supersede earlier ones)."""
    latest: dict[str, dict] = {}
    for row in rows:
        source = row.get("source")
        if isinstance(source, str):
            latest.pop(source, None)
            latest[source] = row
    return latest


def is_done(row: dict | None, revision: str | None) -> bool:
    """An ``ok`` row at ``revision`` (an unknown revision is never done)."""
    return bool(row) and row.get("status") == "ok" and revision is not None and row.get("revision") == revision
