"""Hugging Face Hub snapshots through ``huggingface_hub.snapshot_download``.

Only config and safetensors files are fetched (plus tokenizer and generation files for export).
``HF_TOKEN``, ``HF_HUB_OFFLINE`` and the cache are honoured by huggingface_hub itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import IdinspectError

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

#: What inspection needs.
INSPECT_PATTERNS = ["config.json", "*.safetensors", "model.safetensors.index.json"]
#: What an exported checkpoint should carry besides the weights.
EXPORT_PATTERNS = INSPECT_PATTERNS + ["*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken", "merges.txt"]


def looks_like_path(source: str) -> bool:
    """True for anything a user would mean as a filesystem path; such strings never go to the hub."""
    return (source.startswith((".", "/", "~", "\\")) or Path(source).expanduser().exists()
            or source.count("/") > 1 or "\\" in source or re.match(r"^[A-Za-z]:", source) is not None)


def split_revision(source: str) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``)."""
    if "@" in source:
        repo, _, rev = source.partition("@")
        if not rev or "@" in rev:
            raise IdinspectError(f"{source!r}: expected org/name or org/name@revision")
        return repo, rev
    return source, None


def download_snapshot(repo_id: str, revision: str | None = None, token: str | None = None,
                      allow_patterns: list[str] | None = None) -> tuple[Path, str]:
    """Download (or find in the cache) a snapshot; returns (local folder, resolved commit sha)."""
    import huggingface_hub as hf
    from huggingface_hub import errors as hf_errors

    try:
        folder = hf.snapshot_download(repo_id, revision=revision, token=token,
                                      allow_patterns=allow_patterns or INSPECT_PATTERNS)
    except hf_errors.GatedRepoError:
        raise IdinspectError(f"{repo_id} is gated: request access at https://huggingface.co/{repo_id} "
                             "and pass --token or set HF_TOKEN") from None
    except hf_errors.RepositoryNotFoundError:
        raise IdinspectError(f"{repo_id}: no such model on the hub (or it is private: pass --token or set HF_TOKEN)") from None
    except hf_errors.RevisionNotFoundError:
        raise IdinspectError(f"{repo_id}: no revision {revision!r}; use a branch, tag or commit sha that exists") from None
    except hf_errors.LocalEntryNotFoundError:
        raise IdinspectError(f"{repo_id} is not in the local cache and the hub cannot be reached (HF_HUB_OFFLINE "
                             "or no network): unset HF_HUB_OFFLINE, connect, or pass a local directory") from None
    except hf_errors.OfflineModeIsEnabled:
        raise IdinspectError(f"{repo_id}: HF_HUB_OFFLINE is set and the model is not cached; unset it or pass a local directory") from None
    except hf_errors.HFValidationError as exc:
        raise IdinspectError(f"{repo_id!r} is not a valid hub id ({exc}); pass org/name or an existing directory") from None
    except hf_errors.HfHubHTTPError as exc:
        raise IdinspectError(f"{repo_id}: the hub answered {exc}; retry, or pass a local directory") from None
    folder = Path(folder)
    return folder, folder.name
