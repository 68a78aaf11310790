"""Write an output file (report, SARIF, baseline) so that a reader never sees it half written."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
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
    binary mode (e.g. ``pyarrow.parquet.write_table(table, fh)``).

    Ctrl-C, SIGTERM and SIGHUP that arrive meanwhile take effect when the write has ended (landed
    or cleaned up): raised at any moment in between, they could leave the temporary behind. A target
    that exists as a device, FIFO or socket (``--json /dev/null``, ``/dev/stdout``) is written in
    place: renaming a temporary over it would replace ``/dev/null`` itself with a regular file."""
    target = Path(path)
    if _special(target):   # /dev/null, /dev/stdout, a FIFO: written in place (a rename would replace the device)
        with open(target, "wb") as fh:
            write(fh)
            fh.flush()
        return target
    directory = target.parent if str(target.parent) else Path(".")
    with interrupts_deferred():
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


def _special(target: Path) -> bool:
    """Does ``target`` (its symlinks followed) exist as something other than a regular file or a folder:
    a character device (``/dev/null``, a terminal), a FIFO or a socket? Those are written in place."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


#: The signals that end a command: Ctrl-C, ``kill``, a closed terminal.
_ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Inside the block, an ending signal is noted instead of handled; the first one noted goes to
    its own handler when the block ends. Python runs signal handlers in the main thread only, so
    elsewhere this does nothing (and needs to do nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    own = {}
    for signum in _ENDING_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not None:   # None: set outside Python, and not ours to restore
            own[signum] = handler
            signal.signal(signum, lambda number, frame: noted.append(number))
    try:
        yield
    finally:
        for signum, handler in own.items():
            signal.signal(signum, handler)
        if noted:
            handler = own[noted[0]]
            if callable(handler):
                handler(noted[0], sys._getframe())
            elif handler == signal.SIG_DFL:
                signal.raise_signal(noted[0])


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
