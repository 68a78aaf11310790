"""Small input files (config.json, an index, a policy, a survey's list of models) read safely.

:func:`read_regular` opens without blocking and checks, on the open descriptor, that the path is a
regular file before reading: a FIFO would otherwise block the read forever (``open`` of a FIFO
waits for a writer), ``/dev/zero`` or ``/dev/urandom`` would never end. What is read is capped at
``limit`` bytes; a larger file is refused by name, never read into memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import IdinspectError

#: Default cap on a small input file (bytes): far above any config.json or shard index.
DEFAULT_LIMIT = 64 << 20

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def read_regular(path: str | os.PathLike, limit: int = DEFAULT_LIMIT, fix: str = "pass a regular file") -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes (one-line errors
    otherwise; OSError from opening propagates for the caller's own wording)."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IdinspectError(f"{p}: is {kind_of(st.st_mode)}, not a regular file; {fix}")
        if st.st_size > limit:
            raise IdinspectError(f"{p}: {st.st_size} bytes, more than the {limit} this file may hold; {fix}")
        chunks, got = [], 0
        while got <= limit:
            block = os.read(fd, min(1 << 20, limit + 1 - got))
            if not block:
                break
            chunks.append(block)
            got += len(block)
        if got > limit:
            raise IdinspectError(f"{p}: more than the {limit} bytes this file may hold (it grew while read); {fix}")
        return b"".join(chunks)
    finally:
        os.close(fd)


__all__ = ["DEFAULT_LIMIT", "kind_of", "read_regular"]
