"""What a MODEL argument names: a hub id (``org/name[@revision]``) or a path on disk. Pure string
and file-system tests, no hub client."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import IdinspectError

#: ``org/name``, or a legacy name without an organisation (``gpt2``, ``bert-base-uncased``).
HUB_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")
#: File names a user points at on disk; no hub repository is named like this.
_FILE_SUFFIXES = (".safetensors", ".gguf", ".json", ".bin", ".pt", ".pth", ".ckpt", ".pkl")


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
