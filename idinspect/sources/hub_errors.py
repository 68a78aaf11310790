"""huggingface_hub's failures as one-line errors naming the repository and the fix, and the
distinction between no answer at all (:class:`HubUnreachable`: a cached copy may stand in) and an
answer that refuses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import IdinspectError, TransientError, first_line

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


@contextlib.contextmanager
def hub_errors(repo_id: str, revision: str | None, cache_dir, offline: bool) -> Iterator[None]:
    """huggingface_hub failures inside the block become one-line errors (:class:`HubUnreachable`
    where no HTTP answer came, so a cached copy may stand in); anything else is re-raised."""
    try:
        yield
    except IdinspectError:
        raise
    except Exception as exc:  # noqa: BLE001 - mapped to one line, anything else re-raised
        error = hub_error(exc, repo_id, revision, offline=offline, cache_dir=cache_dir)
        if error is None:
            raise
        if not offline and is_transport_error(exc):
            raise HubUnreachable(error) from None
        raise error from None
