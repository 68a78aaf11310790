"""Output paths checked before any work, for every writer (inspect's and audit's reports, fingerprint -o,
compare's and diff's --json/--html, survey's --jsonl/--parquet/--html): never inside an input model,
never equal to one of its files (links resolved), never a folder, in a folder that exists.
One-line errors naming the path."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import IdinspectError
from ..sources.file_names import CONFIG_FILE, INDEX_FILE, SAFETENSORS_SUFFIX

#: A checkpoint named by one of its own files stands for its whole folder.
_CHECKPOINT_FILES = (CONFIG_FILE, INDEX_FILE)


def input_roots(source: str | Path) -> tuple[Path | None, list[Path]]:
    """(model folder or None, input files) that ``source`` names on this machine, links resolved.

    A folder (or ``pkg:PACKAGE/SUBDIR``) is a model folder; a checkpoint's own file (config.json,
    the index, a ``*.safetensors``) stands for its folder; any other existing file (a fingerprint,
    a GGUF) is an input file. Hub ids and what does not exist name nothing here. The folder's
    files are listed with links resolved (a hub snapshot's files are links into ``blobs/``).
    """
    text = str(source)
    if text.startswith("pkg:"):
        from ..model import package_checkpoint

        try:
            folder = package_checkpoint(text)
        except IdinspectError:
            return None, []
    else:
        folder = Path(text).expanduser()
    try:
        if folder.is_file():
            if folder.name in _CHECKPOINT_FILES or folder.name.endswith(SAFETENSORS_SUFFIX):
                folder = folder.parent
            else:
                return None, [folder.resolve()]
        if not folder.is_dir():
            return None, []
        root = folder.resolve()
        files = [entry.resolve() for entry in root.iterdir() if entry.is_file()]
    except (OSError, RuntimeError):   # unreadable, or a link loop: nothing this process could write over
        return None, []
    return root, files


def check_report_path(path: str | Path, inputs: Iterable[str | Path | None] = (), option: str = "--output") -> None:
    """Raise if writing ``path`` would touch an input model or cannot work.

    ``inputs``: what the command reads (model folders, a checkpoint's own files, fingerprint files;
    hub ids are ignored). The output is refused when it resolves (through links) into an input
    model folder, or to one of its files or an input file, even where no file exists there yet:
    inputs are never modified.
    """
    target = Path(path).expanduser()
    try:
        resolved = target.resolve()  # follows links: a link that points into the input counts as the input
    except (OSError, RuntimeError):
        raise IdinspectError(f"{path}: {option} cannot be resolved (a link loop?); choose another path") from None
    for source in inputs:
        if source is None:
            continue
        root, files = input_roots(source)
        inside = root is not None and (resolved == root or resolved.is_relative_to(root))
        if inside or resolved in files:
            where = f"the input checkpoint {source}" if inside else f"an input file of {source}"
            raise IdinspectError(f"{path}: {option} would write over {where}; outputs never touch their input: "
                                 "choose a path outside it")
    if target.is_dir():
        raise IdinspectError(f"{path}: {option} is a directory; give a file name such as {Path(path) / 'report'}")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise IdinspectError(f"{path}: {option}'s folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise IdinspectError(f"{path}: {option}'s folder {parent} is not writable (permission denied); "
                             "choose a folder you can write")


def check_output_paths(outputs: Iterable[tuple[str, str | Path | None]], inputs: Iterable[str | Path | None]) -> None:
    """:func:`check_report_path` for each (option, path) given (None: not asked for), before any work."""
    inputs = list(inputs)
    for option, path in outputs:
        if path is not None:
            check_report_path(path, inputs, option)


__all__ = ["check_output_paths", "check_report_path", "input_roots"]
