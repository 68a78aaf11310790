"""The process entry point (console script ``idinspect``, ``python -m idinspect``).

Nothing heavy is imported here, so that the signal handling is in place before torch or
transformers start loading: Ctrl-C at any moment (modules loading included) prints one line and
exits 130; SIGTERM and SIGHUP unwind like Ctrl-C (temporary folders removed) and exit 128 + the
signal number; a closed stdout (``idinspect MODEL | head``) is not an error.
"""

from __future__ import annotations

# Before anything else, even the ``signal`` module (its enums take milliseconds to build): a Ctrl-C
# while the process entry point itself is still importing exits with one line and 130.
import _signal
import os
import sys


def _started_as_the_program() -> bool:
    """True under the ``idinspect`` console script or ``python -m idinspect``, never on a library import."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return spec.name == "idinspect.__main__"
    return os.path.basename(getattr(main, "__file__", None) or "").startswith("idinspect")


def _interrupted_while_starting(signum, frame) -> None:
    try:
        os.write(2, b"idinspect: interrupted (Ctrl-C) while starting; nothing was written\n")
    finally:
        os._exit(130)


if _started_as_the_program() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)

import signal  # noqa: E402

from .interrupts import Terminated, finish_before_fast_exit, interrupted_code, say_interrupted  # noqa: E402


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


#: Packages whose initialisation runs native extension code (torch's pybind11, numpy's C core,
#: safetensors' Rust): an exception raised there by a signal handler can abort the process (exit -6)
#: or leave a half-initialised extension that a retried import refuses ("cannot load module more
#: than once per process"), so the signals are held while they load and delivered as soon as they have.
GUARDED_IMPORTS = {"torch", "numpy", "safetensors"}
_HELD = ("SIGINT", "SIGTERM", "SIGHUP")


class _HoldSignalsWhileLoading:
    """A meta-path finder that wraps the loader of each :data:`GUARDED_IMPORTS` module so that
    SIGINT/SIGTERM/SIGHUP are blocked (``pthread_sigmask``) while it executes; a signal that arrived
    meanwhile is delivered when it is done, in Python code, where it unwinds like any other."""

    def find_spec(self, name, path=None, target=None):
        if name not in GUARDED_IMPORTS:
            return None
        import importlib.util

        sys.meta_path.remove(self)           # find the real spec without coming back here
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        def exec_module(module, _exec=loader.exec_module):
            held = {getattr(signal, n) for n in _HELD if hasattr(signal, n)}
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
            try:
                _exec(module)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)

        loader.exec_module = exec_module
        return spec


def hold_signals_while_guarded_modules_load() -> None:
    """Install :class:`_HoldSignalsWhileLoading` (POSIX only; once)."""
    if hasattr(signal, "pthread_sigmask") and not any(isinstance(f, _HoldSignalsWhileLoading) for f in sys.meta_path):
        sys.meta_path.insert(0, _HoldSignalsWhileLoading())


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP raise :class:`Terminated`; SIGINT raises KeyboardInterrupt (Python's default)."""
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _raise_terminated)


def use_huge_pages_for_tensors() -> None:
    """Ask torch's CPU allocator for transparent huge pages on large tensors (its own switch,
    ``THP_MEM_ALLOC_ENABLE``; a user's explicit setting wins). The command line reads a layer's
    tensors into fresh buffers layer after layer, and with 4 KiB pages the kernel faults each page in:
    reading a Phi-3-mini layer's attention (75 MB) took 30 ms with 4 KiB pages and 16 ms with huge
    pages on the benchmark machine. Where the kernel has huge pages off this changes nothing. Set
    before torch is imported; only the command line does this, a library caller's process is not touched."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def run() -> None:
    """Install the handlers, then run :func:`idinspect.cli.run` (imported here, not before)."""
    use_huge_pages_for_tensors()
    install_signal_handlers()
    hold_signals_while_guarded_modules_load()
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
            # from here on Ctrl-C unwinds as KeyboardInterrupt, so every cleanup runs
            signal.signal(signal.SIGINT, signal.default_int_handler)
        from .cli import run as cli_run

        cli_run()
    except KeyboardInterrupt as exc:  # while modules load, or anywhere cli.run did not catch it
        say_interrupted(exc)
        _quiet_exit(interrupted_code(exc))


def _quiet_exit(code: int) -> None:
    finish_before_fast_exit()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


__all__ = ["Terminated", "install_signal_handlers", "run"]
