"""How an interrupted command ends: SIGTERM/SIGHUP as :class:`Terminated` (a KeyboardInterrupt, so
every cleanup runs), the exit status and the one line it prints, and multiprocessing's own exit
handler. Shared by the process entry point (:mod:`.entry`) and the command group (:mod:`.cli`)."""

from __future__ import annotations

import os
import signal
import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so that every ``finally`` and cleanup runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def interrupted_code(exc: KeyboardInterrupt) -> int:
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def say_interrupted(exc: KeyboardInterrupt) -> None:
    """One line on stderr, whatever state the interpreter is in."""
    what = signal.Signals(exc.signum).name if isinstance(exc, Terminated) else "Ctrl-C"
    try:
        os.write(2, f"idinspect: interrupted ({what}); nothing half-written was left behind\n".encode())
    except OSError:
        pass


def finish_multiprocessing() -> None:
    """multiprocessing's own exit handler (the atexit function that ``os._exit`` skips): ends the
    fork server and worker processes a survey started and removes their ``pymp-*`` temp folder."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            util._exit_function()
        except Exception:  # noqa: BLE001 - the command's outputs are complete; leave as before
            pass
