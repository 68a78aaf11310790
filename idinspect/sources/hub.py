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
import re
import time
from pathlib import Path

from ..errors import IdinspectError, TransientError, first_line
from .file_names import CONFIG_FILE, INDEX_FILE, SHARD_PATTERN, SINGLE_FILE
from ..textsafe import visible
from .hub_guard import COMMIT_SHA

#: ``org/name``, or a legacy name without an organisation (``gpt2``, ``bert-base-uncased``).
HUB_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")
#: File names a user points at on disk; no hub repository is named like this.
_FILE_SUFFIXES = (".safetensors", ".gguf", ".json", ".bin", ".pt", ".pth", ".ckpt", ".pkl")

#: What inspection needs: the config and the transformers-named safetensors (never pickles,
#: never other copies of the weights such as Mistral's ``consolidated.safetensors``).
INSPECT_PATTERNS = [CONFIG_FILE, SINGLE_FILE, INDEX_FILE, SHARD_PATTERN]
#: What an exported checkpoint should carry besides the weights.
EXPORT_PATTERNS = INSPECT_PATTERNS + ["*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken", "merges.txt"]

_TRANSPORT_MODULES = ("httpx", "httpx2", "httpcore", "requests", "urllib3")


class HubUnreachable(Exception):
    """The hub could not be reached at all (no HTTP answer); ``error`` is the message for the user.
    Raised instead of ``error`` where a cached copy may stand in (as huggingface_hub itself does)."""

    def __init__(self, error: IdinspectError):
        super().__init__(str(error))
        self.error = error


def is_transport_error(exc: BaseException) -> bool:
    """A failure to reach the server (DNS, refused, reset, timeout), not an HTTP answer."""
    return type(exc).__module__.split(".")[0] in _TRANSPORT_MODULES or isinstance(exc, (ConnectionError, TimeoutError))


def snapshot_download(*args, **kwargs) -> str:
    """``huggingface_hub.snapshot_download``, imported on first use: the hub client costs ~0.1 s to
    import, which a local inspection never needs."""
    from huggingface_hub import snapshot_download as download

    return download(*args, **kwargs)


def looks_like_path(source: str) -> bool:
    """True for anything a user would mean as a filesystem path; such strings never go to the hub.

    A path: it exists, starts with ``.``, ``/``, ``~`` or a drive letter, ends with ``/``, holds a
    backslash or more than one ``/``, or ends in a checkpoint file's suffix (``.safetensors``,
    ``.gguf``, ``.json``, ``.bin``...). Everything else (``org/name``, ``gpt2``) is a hub id.
    """
    name = source.split("@", 1)[0]
    return (source.startswith((".", "/", "~", "\\")) or Path(source).expanduser().exists()
            or source.count("/") > 1 or "\\" in source or re.match(r"^[A-Za-z]:", source) is not None
            or source.endswith("/") or name.lower().endswith(_FILE_SUFFIXES))


def split_revision(source: str) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``)."""
    if "@" in source:
        repo, _, rev = source.partition("@")
        if not rev or "@" in rev:
            raise IdinspectError(f"{source!r}: expected org/name or org/name@revision")
        return repo, rev
    return source, None


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
    from .remote import hub_errors
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


def _site(hf_constants) -> str:
    return str(getattr(hf_constants, "ENDPOINT", "https://huggingface.co")).rstrip("/")


def hub_error(exc: BaseException, repo_id: str, revision: str | None, offline: bool,
              cache_dir: str | Path | None = None) -> IdinspectError | None:
    """The one-line error for a huggingface_hub failure, or None if ``exc`` is not one."""
    from huggingface_hub import constants as hf_constants
    from huggingface_hub import errors as hf_errors

    ref = f"{repo_id}@{revision}" if revision else repo_id
    cache = str(cache_dir) if cache_dir is not None else str(getattr(hf_constants, "HF_HUB_CACHE", "the hub cache"))
    if isinstance(exc, hf_errors.GatedRepoError):
        return IdinspectError(f"{repo_id} is gated: accept its terms at {_site(hf_constants)}/{repo_id} "
                              "and pass --token or set HF_TOKEN")
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return IdinspectError(f"{repo_id}: not a local directory, and no such model on the hub "
                              "(if it is private, pass --token or set HF_TOKEN)")
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return IdinspectError(f"{repo_id}: no revision {revision!r} on the hub; use a branch, tag or commit sha that exists")
    if isinstance(exc, hf_errors.DisabledRepoError):
        return IdinspectError(f"{repo_id}: the repository is disabled on the hub")
    if isinstance(exc, getattr(hf_errors, "IncompleteSnapshotError", ())):
        return TransientError(f"{ref}: the cached snapshot is incomplete and the hub cannot be reached; "
                              "rerun once online to finish the download")
    if isinstance(exc, hf_errors.LocalEntryNotFoundError):
        if offline:
            return IdinspectError(f"{ref} is not in the local cache ({cache}) and offline mode is on "
                                  "(HF_HUB_OFFLINE or --offline): download it once online, or pass a local directory")
        cause = exc.__cause__
        why = f" ({type(cause).__name__})" if cause is not None else ""
        return TransientError(f"{ref}: the hub cannot be reached{why} and it is not in the local cache "
                              f"({cache}): check the network, set HF_HUB_OFFLINE=1 to use the cache, "
                              "or pass a local directory")
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return IdinspectError(f"{ref}: offline mode is on (HF_HUB_OFFLINE) and it is not cached; unset it or pass a local directory")
    if isinstance(exc, hf_errors.HFValidationError):
        return IdinspectError(f"{repo_id!r} is not a valid hub id ({first_line(exc)}); pass org/name or an existing directory")
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return IdinspectError(f"{repo_id}: the hub refused the token (HTTP 401); check --token / HF_TOKEN")
        if status == 403:
            return IdinspectError(f"{repo_id}: access denied (HTTP 403); if the model is gated, accept its licence at "
                                  f"{_site(hf_constants)}/{repo_id} and pass --token or set HF_TOKEN with that account's token")
        if status == 404:
            return IdinspectError(f"{ref}: not found on the hub (HTTP 404: {first_line(exc)}); check the id, revision and "
                                  "--token")
        if status == 429:
            return TransientError(f"{repo_id}: rate limited by the hub (HTTP 429); retry later, or pass --token "
                                  "(authenticated requests get a higher limit)")
        error = TransientError if status is None or status >= 500 else IdinspectError
        return error(f"{repo_id}: the hub answered HTTP {status} ({first_line(exc)}); retry later, "
                     "or pass a local directory")
    if is_transport_error(exc):
        return TransientError(f"{ref}: network error while downloading ({type(exc).__name__}: {first_line(exc)}); "
                              "check the connection and retry, or pass a local directory")
    return None

