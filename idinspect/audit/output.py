"""Writing reports and baselines: whole files or nothing (temporary file + rename)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import IdinspectError


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, then rename it
    over ``path``, so a reader (or an interrupted run) never sees a half-written file."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise IdinspectError(f"{target}: directory {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise IdinspectError(f"{target}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` to ``path`` (the GitHub job summary file)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


__all__ = ["append_text", "write_atomic"]
