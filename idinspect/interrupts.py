"""How an interrupted command ends: SIGTERM/SIGHUP as :class:`Terminated` (a KeyboardInterrupt, so
every cleanup runs), the exit status and the one line it prints, and multiprocessing's own exit
handler. Shared by the process entry point (:mod:`.entry`) and the command group (:mod:`.cli`)."""

from __future__ import annotations

import os
import signal
import sys
import weakref


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


def remove_temporary_folders() -> None:
    """The exit hook of ``weakref.finalize`` (which ``os._exit`` skips): removes the
    ``tempfile.TemporaryDirectory`` folders that libraries made and left to exit (torch 2.6 makes one
    for ``_remote_module_non_scriptable.py`` when ``torch.distributed.nn`` is imported)."""
    hook = getattr(weakref.finalize, "_exitfunc", None)
    if callable(hook):
        try:
            hook()
        except Exception:  # noqa: BLE001 - the command's outputs are complete; leave as before
            pass


def finish_before_fast_exit() -> None:
    """What the interpreter's exit would have run that a finished command still owes: the survey's
    worker processes (:func:`finish_multiprocessing`) and the temporary folders
    (:func:`remove_temporary_folders`)."""
    finish_multiprocessing()
    remove_temporary_folders()
