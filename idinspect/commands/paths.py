"""Report and baseline paths checked before any work: never inside an input checkpoint, never a folder,
in a folder that exists. One-line errors naming the path."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import IdinspectError


def check_report_path(path: str | Path, inputs: Iterable[str | Path | None] = (), option: str = "--output") -> None:
    """Raise if writing a report to ``path`` would touch an input checkpoint or cannot work.

    ``inputs``: checkpoint folders (or anything that names one; what is not an existing local folder
    is ignored). A report inside an input folder is refused even where no file exists yet: inputs
    are never modified.
    """
    target = Path(path).expanduser()
    resolved = target.resolve()  # follows links: a link that points into the input counts as the input
    for source in inputs:
        if source is None:
            continue
        folder = Path(source).expanduser()
        if not folder.is_dir():
            continue
        root = folder.resolve()
        if resolved == root or resolved.is_relative_to(root):
            raise IdinspectError(f"{path}: {option} lies inside the input checkpoint {source}; reports never write "
                                 "into their input: choose a path outside it")
    if target.is_dir():
        raise IdinspectError(f"{path}: {option} is a directory; give a file name such as {Path(path) / 'report'}")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise IdinspectError(f"{path}: {option}'s folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise IdinspectError(f"{path}: {option}'s folder {parent} is not writable (permission denied); "
                             "choose a folder you can write")


__all__ = ["check_report_path"]
