"""A hub revision pinned to one commit, without torch: its files, range cache and fetcher.

Kept apart from :mod:`.remote` (which builds tensors) so that :mod:`.remote_warm` can resolve a
revision and start fetching while the command is still importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import IdinspectError
from .remote_cache import RangeCache, repo_folder
from .remote_http import RangeFetcher, RemoteFile, resolve_commit


@dataclass
class Pinned:
    """One commit of one repo: its files, the range cache and the fetcher (None offline)."""

    repo_id: str
    commit: str
    files: dict[str, RemoteFile]
    cache: RangeCache
    fetcher: RangeFetcher | None


def pin(repo_id: str, revision: str | None, *, token: str | None, cache_dir: str | Path | None,
        offline: bool) -> Pinned:
    """Resolve ``revision`` to a commit. Online it is resolved on every call (so a moved branch is
    seen) and written to the range cache's ``refs/``; offline the commit comes from there (or from
    the hub cache's own refs). huggingface_hub errors propagate (see :func:`hub_errors`)."""
    from .hub_guard import COMMIT_SHA

    folder = repo_folder(cache_dir, repo_id)
    rev = revision or "main"
    if offline:
        commit = rev if COMMIT_SHA.match(rev) else (RangeCache.read_ref(folder, rev) or _hub_ref(folder, rev))
        commit = commit if commit is not None and COMMIT_SHA.match(commit) else None
        files = RangeCache(folder, commit).read_files() if commit else None
        if commit is None or files is None:
            raise IdinspectError(f"{repo_id}{'@' + revision if revision else ''} is not in the local cache "
                                 f"({folder.parent.parent}) and offline mode is on (HF_HUB_OFFLINE or --offline): "
                                 "inspect it once online, or pass a local directory")
        return Pinned(repo_id, commit, files, RangeCache(folder, commit), None)
    commit, files = resolve_commit(repo_id, revision, token)   # names and commit validated (hub_api)
    cache = RangeCache(folder, commit)
    cache.write_files(files)
    if not COMMIT_SHA.match(rev):
        cache.write_ref(rev)
    return Pinned(repo_id, commit, files, cache, RangeFetcher(repo_id, commit, token))


def _hub_ref(folder: Path, rev: str) -> str | None:
    """The commit huggingface_hub's own ``refs/<rev>`` names (a snapshot downloaded earlier)."""
    try:
        return (folder.parent / "refs" / rev).read_text().strip() or None
    except OSError:
        return None



def download(p: Pinned, filename: str, token, cache_dir, offline: bool) -> Path:
    """``filename`` of the pinned commit through huggingface_hub's cache, checked against the listed
    digest when downloaded online (:func:`~.hub_verify.verify_download`)."""
    from huggingface_hub import hf_hub_download

    from .hub_verify import verify_download

    path = Path(hf_hub_download(p.repo_id, filename, revision=p.commit, token=token,
                                cache_dir=str(cache_dir) if cache_dir is not None else None, local_files_only=offline))
    file = p.files.get(filename)
    if not offline and file is not None:
        verify_download(path, file.etag, f"{p.repo_id}@{p.commit[:12]}/{filename}")
    return path


__all__ = ["Pinned", "download", "pin"]
