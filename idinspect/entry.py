"""The process entry point (console script ``idinspect``, ``python -m idinspect``).

Nothing heavy is imported here, so that the signal handling is in place before torch or
transformers start loading: Ctrl-C at any moment (modules loading included) prints one line and
exits 130; SIGTERM and SIGHUP unwind like Ctrl-C (temporary folders removed) and exit 128 + the
signal number; a closed stdout (``idinspect MODEL | head``) is not an error.
"""

from __future__ import annotations

import os
import signal
import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so that every ``finally`` and cleanup runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP raise :class:`Terminated`; SIGINT raises KeyboardInterrupt (Python's default)."""
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _raise_terminated)


def interrupted_code(exc: KeyboardInterrupt) -> int:
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def say_interrupted(exc: KeyboardInterrupt) -> None:
    """One line on stderr, whatever state the interpreter is in."""
    what = signal.Signals(exc.signum).name if isinstance(exc, Terminated) else "Ctrl-C"
    try:
        os.write(2, f"idinspect: interrupted ({what}); nothing half-written was left behind\n".encode())
    except OSError:
        pass


def run() -> None:
    """Install the handlers, then run :func:`idinspect.cli.run` (imported here, not before)."""
    install_signal_handlers()
    try:
        from .cli import run as cli_run

        cli_run()
    except KeyboardInterrupt as exc:  # while modules load, or anywhere cli.run did not catch it
        say_interrupted(exc)
        _quiet_exit(interrupted_code(exc))


def _quiet_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


__all__ = ["Terminated", "install_signal_handlers", "run"]
