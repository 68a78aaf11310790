"""Write an output file (report, SARIF, baseline) so that a reader never sees it half written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    An interrupted write leaves at most a hidden ``.NAME.*.tmp`` file, never a truncated output,
    and an existing file stays as it was. The file gets the permissions a plain ``open`` would
    (0o666 less the umask). Raises OSError (no such folder, not writable, disk full); returns the
    final path. A lone surrogate (a file name that is not UTF-8, as Python decodes it) is written as
    its visible escape ``\\udcXX``, so the file stays valid UTF-8.
    """
    return write_atomic(path, lambda fh: fh.write(str.encode(text, "utf-8", "backslashreplace")))  # TypeError if not text


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """:func:`write_text_atomic` for any content: ``write(fh)`` fills the temporary file, opened in
    binary mode (e.g. ``pyarrow.parquet.write_table(table, fh)``)."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
