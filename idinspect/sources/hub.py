"""Hugging Face Hub snapshots through ``huggingface_hub.snapshot_download``.

Only config and safetensors files are fetched for inspection (export adds tokenizer and generation
files). ``HF_TOKEN``, ``HF_HUB_OFFLINE``, ``HF_HUB_CACHE`` and the cache layout
(``models--org--name/{refs,snapshots}``) are honoured by huggingface_hub itself; the snapshot
folder's name is the resolved commit sha. Every hub failure becomes a one-line
:class:`IdinspectError` saying what to do.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..errors import TransientError, first_line
from .file_names import CONFIG_FILE, INDEX_FILE, SHARD_PATTERN, SINGLE_FILE
from ..textsafe import visible
from .hub_guard import COMMIT_SHA
from .hub_errors import HubUnreachable, hub_error, hub_errors, is_transport_error  # noqa: F401 - the hub's public errors
from .hub_ids import HUB_ID, looks_like_path, split_revision  # noqa: F401 - the hub's public names

#: What inspection needs: the config and the transformers-named safetensors (never pickles,
#: never other copies of the weights such as Mistral's ``consolidated.safetensors``).
INSPECT_PATTERNS = [CONFIG_FILE, SINGLE_FILE, INDEX_FILE, SHARD_PATTERN]
#: What an exported checkpoint should carry besides the weights.
EXPORT_PATTERNS = INSPECT_PATTERNS + ["*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken", "merges.txt"]

def snapshot_download(*args, **kwargs) -> str:
    """``huggingface_hub.snapshot_download``, imported on first use: the hub client costs ~0.1 s to
    import, which a local inspection never needs."""
    from huggingface_hub import snapshot_download as download

    return download(*args, **kwargs)


def is_offline(local_files_only: bool = False) -> bool:
    """Offline: ``--offline`` (local_files_only) or ``HF_HUB_OFFLINE`` as huggingface_hub reads it."""
    from huggingface_hub import constants as hf_constants

    check = getattr(hf_constants, "is_offline_mode", None)
    return bool(local_files_only or (check() if callable(check) else hf_constants.HF_HUB_OFFLINE))


def download_snapshot(repo_id: str, revision: str | None = None, token: str | None = None,
                      allow_patterns: list[str] | None = None, cache_dir: str | Path | None = None,
                      local_files_only: bool = False) -> tuple[Path, str]:
    """Download (or find in the cache) a snapshot; returns (local folder, resolved commit sha).

    Online, the revision is first resolved with the validated revision API
    (:func:`~.remote_http.resolve_commit`): the download is pinned to that commit and asks for the
    listed files by exact name (a hostile listing cannot add a path), and every file this call
    downloaded is checked against the digest the API gave (:func:`~.hub_verify.verify_download`;
    a file already in the cache was checked when it was downloaded, and is not hashed again). If the index
    names shards that ``allow_patterns`` did not match, they are fetched by name in a second call
    pinned to the same commit.
    """
    patterns = list(allow_patterns or INSPECT_PATTERNS)
    kwargs = {"token": token, "cache_dir": str(cache_dir) if cache_dir is not None else None,
              "local_files_only": local_files_only}
    listing = None if is_offline(local_files_only) else _resolve(repo_id, revision, token, cache_dir)
    started = time.time()
    if listing is None:
        folder = Path(_call(repo_id, revision, patterns, **kwargs))
        commit = folder.name
    else:
        commit, files = listing
        folder = Path(_call(repo_id, commit, _exact(files, patterns), **kwargs))
        _write_ref(cache_dir, repo_id, revision, commit)
    missing = _unmatched_shards(folder)
    if listing is not None:
        missing = [n for n in missing if n in listing[1]]
    if missing:
        folder = Path(_call(repo_id, commit if COMMIT_SHA.match(commit) else revision,
                            _exact(listing[1], missing) if listing is not None else missing, **kwargs))
    if listing is not None:
        from .hub_verify import verify_download

        for name, file in listing[1].items():   # what this call downloaded (a cached blob was checked when it came)
            path = folder / name
            if path.is_file() and os.stat(path).st_mtime >= started - 2:
                verify_download(path, file.etag, f"{repo_id}@{commit[:12]}/{name}")
    return folder, commit


def _resolve(repo_id: str, revision: str | None, token, cache_dir):
    """(commit, files) from the validated revision API, or None when the hub cannot be reached (then
    huggingface_hub falls back to its cache as it always does)."""
    from .remote_http import resolve_commit

    try:
        with hub_errors(repo_id, revision, cache_dir, offline=False):
            return resolve_commit(repo_id, revision, token)
    except HubUnreachable:
        return None


def _exact(files: dict, patterns: list[str]) -> list[str]:
    """The listed files that ``patterns`` match, each as a pattern matching only itself."""
    import fnmatch
    import glob

    return [glob.escape(n) for n in sorted(files) if any(fnmatch.fnmatch(n, p) for p in patterns)]


def _write_ref(cache_dir, repo_id: str, revision: str | None, commit: str) -> None:
    """``refs/<revision>`` of the hub cache, as huggingface_hub writes it for a branch or tag (a download
    pinned to the commit does not), so that ``--offline`` finds the snapshot by its branch name."""
    from .remote_cache import atomic_write, repo_folder

    rev = revision or "main"
    if COMMIT_SHA.match(rev) or any(part in ("", ".", "..") for part in rev.split("/")):
        return
    atomic_write(repo_folder(cache_dir, repo_id).parent / "refs" / rev, commit.encode())


def _unmatched_shards(folder: Path) -> list[str]:
    """Shard files the snapshot's index names but the folder lacks (unusual shard names)."""
    index = folder / INDEX_FILE
    if not index.is_file():
        return []
    try:
        weight_map = json.loads(index.read_text()).get("weight_map") or {}
        names = {str(v) for v in weight_map.values()}
    except (OSError, ValueError, AttributeError):
        return []  # the checkpoint reader reports a bad index with its own message
    return sorted(n for n in names if "/" not in n and not (folder / n).exists())


def _call(repo_id: str, revision: str | None, patterns: list[str], *, token, cache_dir, local_files_only) -> str:
    from ..progress import current_hub_tqdm

    extra = {"tqdm_class": current_hub_tqdm()} if current_hub_tqdm() is not None else {}
    try:
        return snapshot_download(repo_id, revision=revision, token=token, allow_patterns=patterns,
                                 cache_dir=cache_dir, local_files_only=local_files_only, **extra)
    except Exception as exc:  # noqa: BLE001 - mapped to one line below, anything else re-raised
        error = hub_error(exc, repo_id, revision, offline=is_offline(local_files_only), cache_dir=cache_dir)
        if error is None and isinstance(exc, (AttributeError, TypeError, ValueError, KeyError)):
            # huggingface_hub tripping over an answer of the wrong shape (a listing that is not what the
            # tree API returns, a path outside the snapshot): the server's fault, named as such
            error = TransientError(f"{repo_id}: huggingface_hub could not use the hub's answer ({type(exc).__name__}: "
                                   f"{visible(first_line(exc))[:120]}); check HF_ENDPOINT (a proxy or mirror "
                                   "answering wrongly) and retry")
        if error is None:
            raise
        raise error from None


