"""Per-model limits of a survey worker: a wall-clock timeout and a memory limit.

Inside the worker (:func:`limited_row`), a model's inspection runs under

- ``RLIMIT_DATA`` set to the worker's data segment before the model plus ``memory`` bytes (heap and
  private anonymous mappings, i.e. every tensor and array; the safetensors files it maps read-only
  do not count), so an allocation past the limit fails with ``MemoryError`` in that worker
  instead of driving the machine out of memory; the limit is lifted after the model;
- an interval timer of ``timeout`` seconds whose signal raises :class:`ModelTimeout` (a blocking
  read or a Python loop is interrupted; the row says so).

Both failures are recorded in the model's row as ``bad-input`` (the same model would fail the same
way again, so it is not retried). A worker stuck where no signal reaches it (a long C call) is the
pool's to end (:class:`~idinspect.survey.pool.LocalPool` kills the pool past
``timeout`` + :data:`KILL_GRACE_S` and records the timeout in the row).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

from ..errors import IdinspectError

#: Default per-model wall-clock limit (seconds).
DEFAULT_TIMEOUT_S = 3600.0
#: Seconds past the timeout after which the pool ends a worker that did not stop by itself.
KILL_GRACE_S = 10.0


class ModelTimeout(IdinspectError):
    """A model's inspection ran past the survey's per-model timeout."""


def timeout_message(seconds: float) -> str:
    return (f"timed out after {seconds:g} s (the per-model limit, --timeout); nothing was recorded for it: "
            "raise --timeout, or check the model (a hang while reading?)")


def memory_message(limit: int) -> str:
    return (f"ran out of its memory limit ({limit} bytes beyond the worker's own, --model-memory); raise "
            "--model-memory or --memory, or check the model (sizes that do not match its files?)")


def _data_bytes() -> int | None:
    """The process's data segment now (``VmData``, bytes), or None where /proc has no such line."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextlib.contextmanager
def memory_limit(extra: int | None) -> Iterator[int | None]:
    """``RLIMIT_DATA`` at the current data segment + ``extra`` bytes inside the block (None: no limit)."""
    try:
        import resource
    except ImportError:   # not on this platform: no limit
        yield None
        return
    base = _data_bytes()
    if extra is None or base is None:
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = base + int(extra)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield int(extra)
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


class TimerState:
    """Whether a :func:`time_limit` timer fired: the interrupted code may have turned its
    :class:`ModelTimeout` into another error (an import cut short says "partially initialized
    module"), so the caller asks this, not the exception."""

    fired: bool = False


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[TimerState]:
    """:class:`ModelTimeout` raised in this (main) thread after ``seconds`` (None: no limit)."""
    state = TimerState()
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield state   # a signal reaches only the main thread: elsewhere the caller's backstop ends the task
        return

    def expire(signum, frame):
        state.fired = True
        raise ModelTimeout(timeout_message(seconds))

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield state
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def limited_row(source: str, options: dict, timeout: float | None, memory: int | None,
                row_fn: Callable[[str, dict], dict] | None = None) -> dict:
    """``row_fn`` (default :func:`~idinspect.survey.rows.survey_row`) under both limits; their failures
    recorded in the row. A timer that fired makes the row a timeout whatever the interrupted code
    raised instead."""
    import torch  # noqa: F401  -- before the clock starts: an import cut short would poison this worker
    import transformers  # noqa: F401

    from .rows import empty_row, survey_row

    limit, timer = None, TimerState()
    try:
        with time_limit(timeout) as timer, memory_limit(memory) as limit:
            row = (row_fn or survey_row)(source, options)
    except ModelTimeout as exc:   # fired outside survey_row's own handler (setting up, tearing down)
        row = empty_row(source)
        row.update(status="failed", error=str(exc), error_kind="bad-input")
    except MemoryError:           # so short of memory that survey_row could not even record it
        row = empty_row(source)
        row.update(status="failed", error="MemoryError", error_kind="transient")
    except Exception:             # what the interruption became, if the timer fired; else a real failure
        if not timer.fired:
            raise
        row = empty_row(source)
    if timer.fired and row.get("status") != "ok":
        row.update(status="failed", error=timeout_message(timeout))
    if row.get("status") != "ok" and limit is not None and str(row.get("error", "")).startswith("MemoryError"):
        row.update(error=memory_message(limit), error_kind="bad-input")
    if row.get("status") != "ok" and str(row.get("error", "")).startswith("timed out after"):
        row["error_kind"] = "bad-input"
    return row


__all__ = ["DEFAULT_TIMEOUT_S", "KILL_GRACE_S", "ModelTimeout", "TimerState", "limited_row", "memory_limit", "memory_message",
           "time_limit", "timeout_message"]
