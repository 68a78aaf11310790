"""The local backend: a process pool of ``workers`` with the models in flight kept within a memory budget.

Workers come from a fork server (:func:`worker_context`; never forked from the parent, which has
torch loaded and running) and each inspects one model at a time with ``cpus / workers`` torch threads. A model is submitted only when the
:class:`~idinspect.survey.memory.Admission` rule lets it in. A row whose error is transient is run
again, up to ``retries`` more times; a worker that dies (e.g. killed for memory) fails the models
it held with a transient error, the pool is restarted and they are retried the same way.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from .limits import KILL_GRACE_S, limited_row, timeout_message
from .memory import WORKER_BASE_BYTES, Admission, Estimate, worker_count
from .rows import SurveyOptions, empty_row, options_dict


@dataclass(frozen=True)
class Task:
    """One model to survey: its source and memory estimate."""

    source: str
    estimate: Estimate = field(default_factory=lambda: Estimate(0, False))


@dataclass
class BackendStats:
    """What a backend did: models run, retries, peak models and estimated bytes in flight."""

    workers: int = 0
    retries: int = 0
    peak_models: int = 0
    peak_bytes: int = 0
    restarts: int = 0


#: Longest path a Unix socket may have on Linux and macOS (``sun_path`` less its NUL byte).
UNIX_SOCKET_PATH_MAX = 103
#: What multiprocessing adds to the temporary folder for the fork server's socket:
#: ``/pymp-XXXXXXXX/listener-XXXXXXXX``.
_FORKSERVER_SOCKET_SUFFIX = len("/pymp-12345678/listener-12345678")


def forkserver_socket_fits(tempdir: str | None = None) -> bool:
    """Whether the fork server's Unix socket, which multiprocessing places under the temporary folder
    (``TMPDIR``), stays within :data:`UNIX_SOCKET_PATH_MAX`; a deeper ``TMPDIR`` makes starting it fail
    with "AF_UNIX path too long"."""
    base = tempdir if tempdir is not None else tempfile.gettempdir()
    return len(os.fsencode(base)) + _FORKSERVER_SOCKET_SUFFIX <= UNIX_SOCKET_PATH_MAX


def worker_context():
    """Workers forked from a fork server that has imported torch and idinspect's analysis once (no
    torch threads started there, so forking it is safe); spawned where there is no fork server, or
    where ``TMPDIR`` is too deep for its socket (:func:`forkserver_socket_fits`)."""
    if "forkserver" in multiprocessing.get_all_start_methods() and forkserver_socket_fits():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["idinspect.survey.rows", "idinspect.analysis.inspection"])
        return context
    return multiprocessing.get_context("spawn")


def _init_worker(threads: int, environ: dict[str, str]) -> None:
    """Torch threads, and the environment the parent had when it made the pool (the fork server's
    is older; huggingface_hub, which reads HF_* settings on import, is not imported there yet).

    Ctrl-C reaches every process of the terminal's process group: a worker ignores it (no
    traceback of its own), and the parent, which gets it too, stops the workers (:func:`stop_workers`)."""
    import signal

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    os.environ.clear()
    os.environ.update(environ)

    torch.set_num_threads(max(1, threads))


def _run_one(source: str, options: dict, memory: int | None) -> dict:
    return limited_row(source, options, options.get("timeout"), memory)


def _kill(executor: ProcessPoolExecutor) -> None:
    """End every worker process of ``executor`` (its futures then fail with BrokenProcessPool)."""
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        try:
            process.kill()
        except (OSError, ValueError):
            pass


def stop_workers(executor: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes (SIGTERM, then SIGKILL after 2 s) so that shutting it
    down does not wait for the models they hold."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(2.0)
        if process.is_alive():
            process.kill()
            process.join(2.0)


def died_row(source: str, why: str) -> dict:
    """The row of a model whose worker process ended before answering (transient: retried)."""
    row = empty_row(source)
    row.update(status="failed", error=why, error_kind="transient")
    return row


class LocalPool:
    """``run(tasks, emit)``: every task's row goes to ``emit`` as soon as it is final (in finishing order)."""

    def __init__(self, workers: int, budget: int, *, retries: int = 2, options: SurveyOptions | None = None):
        self.workers = worker_count(workers, budget)
        self.model_budget = max(0, budget - self.workers * WORKER_BASE_BYTES)
        self.retries = max(0, int(retries))
        self.options = options or SurveyOptions()
        self.stats = BackendStats(workers=self.workers)
        self._timed_out: set[Future] = set()

    def _executor(self) -> ProcessPoolExecutor:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return ProcessPoolExecutor(self.workers, mp_context=worker_context(),
                                   initializer=_init_worker, initargs=(max(1, cpus // self.workers), dict(os.environ)))

    def run(self, tasks: list[Task], emit: Callable[[dict], None]) -> BackendStats:
        admission = Admission(self.model_budget, self.workers)
        queue: deque[tuple[Task, int]] = deque((task, 0) for task in tasks)
        in_flight: dict[Future, tuple[Task, int]] = {}
        opts = options_dict(self.options)
        timeout = opts.get("timeout")
        memory = opts.get("model_memory") or max(self.model_budget, WORKER_BASE_BYTES)
        started: dict[Future, float] = {}
        executor = self._executor()
        try:
            while queue or in_flight:
                while queue and admission.fits(queue[0][0].estimate):
                    task, attempt = queue.popleft()
                    future = executor.submit(_run_one, task.source, opts, memory)
                    in_flight[future] = (task, attempt)
                    started[future] = time.monotonic()
                    admission.enter(future, task.estimate)
                limit = None if not timeout else max(0.0, min(started[f] for f in in_flight) + timeout + KILL_GRACE_S
                                                         - time.monotonic())
                done, _ = wait(list(in_flight), timeout=limit, return_when=FIRST_COMPLETED)
                if not done:   # a worker past the timeout that no signal stopped: end the pool
                    self._timed_out = {f for f in in_flight if time.monotonic() - started[f] >= timeout + KILL_GRACE_S}
                    _kill(executor)
                    done = set(wait(list(in_flight))[0])
                broken = self._settle(done, in_flight, admission, queue, emit)
                if broken:  # every model still in flight failed with the pool: settle them all
                    self._settle(wait(list(in_flight))[0], in_flight, admission, queue, emit)
                    executor.shutdown(wait=True, cancel_futures=True)
                    self.stats.restarts += 1
                    executor = self._executor()
        except BaseException:  # Ctrl-C, SIGTERM: the models in flight are not waited for (their rows were never final)
            stop_workers(executor)
            raise
        finally:
            executor.shutdown(wait=True, cancel_futures=True)
        self.stats.peak_models = admission.peak_models
        self.stats.peak_bytes = admission.peak_bytes
        return self.stats

    def _settle(self, done, in_flight: dict, admission: Admission, queue: deque, emit: Callable[[dict], None]) -> bool:
        """Emit the final rows of ``done``, requeue transient failures with retries left; True if
        the pool broke (a worker process died)."""
        broken = False
        for future in done:
            task, attempt = in_flight.pop(future)
            admission.leave(future)
            try:
                row = future.result()
            except BrokenProcessPool:
                broken = True
                row = died_row(task.source, "the worker process ended while inspecting this model (out of memory?)")
                if future in self._timed_out:
                    row.update(error=timeout_message(self.options.timeout) + " (the worker was ended)",
                               error_kind="bad-input")
            if row["error_kind"] == "transient" and attempt < self.retries:
                self.stats.retries += 1
                queue.appendleft((task, attempt + 1))
                continue
            emit(row)
        return broken
