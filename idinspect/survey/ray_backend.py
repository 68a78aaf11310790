"""The Ray backend (``pip install 'idinspect[ray]'``): the same rows, computed as Ray tasks.

Each model is one task (``num_cpus=1``, ``memory=`` its estimate, so Ray's scheduler keeps the
models on a node within that node's memory). A transient failure raises inside the task so that
Ray's own retry machinery runs it again (``max_retries``, ``retry_exceptions``); bad input
returns its failed row at once. At most ``max_pending`` tasks are submitted ahead; rows are
emitted as tasks finish (``ray.wait``). The nodes need idinspect installed (same version).
"""

from __future__ import annotations

import os
import time

from collections import deque
from collections.abc import Callable

from ..errors import IdinspectError
from .pool import BackendStats, Task, died_row
from .limits import KILL_GRACE_S, limited_row, timeout_message
from .rows import SurveyOptions, options_dict


class TransientRowError(Exception):
    """Raised in a task whose row failed transiently, so that Ray retries it; carries the row."""

    def __init__(self, row: dict):
        super().__init__(row.get("error"))
        self.row = row

    def __reduce__(self):
        return (TransientRowError, (self.row,))


def ray_row(source: str, options: dict) -> dict:
    """The task body: :func:`~idinspect.survey.rows.survey_row` under the survey's per-model limits
    (:func:`~idinspect.survey.limits.limited_row`: --timeout, and --model-memory where given; Ray's
    own ``memory`` request schedules the task), raising for a transient failure so that Ray retries it."""
    row = limited_row(source, options, options.get("timeout"), options.get("model_memory"))
    if row["error_kind"] == "transient":
        raise TransientRowError(row)
    return row


#: Ray's switch for its single-machine mode: set to "0" before Ray is imported, a local instance
#: binds every service to 127.0.0.1 (otherwise it takes the machine's network address even when
#: told 127.0.0.1). A user's own setting wins.
LOOPBACK_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def require_ray(local: bool = False):
    """Ray, imported; ``local``: a local instance will be started, so keep it on loopback."""
    if local:
        os.environ.setdefault(*LOOPBACK_ENV)
    try:
        import ray
    except ImportError:
        raise IdinspectError("--ray needs Ray: pip install 'idinspect[ray]'") from None
    return ray


#: The Ray backstop's allowance for starting a task's worker: it counts from submission, and a cold
#: worker (a new process, Ray's runtime_env, importing torch and transformers before the task's own
#: timer starts) is not the model's time. 30-40 s measured on a 2-core machine at load 4-5, where a
#: backstop of --timeout 30 + 10 s from submission ended a tiny model's task.
WORKER_START_S = 60.0


class RayBackend:
    """``address``: None or "local" starts a local Ray instance (``num_cpus=workers``) for the run
    and stops it after; "auto" or ``host:port`` / ``ray://host:port`` joins that cluster. If Ray is
    already initialised in this process, that instance is used and left running. ``runtime_env``
    goes to every task (e.g. ``{"env_vars": {"HF_TOKEN": ...}}``)."""

    def __init__(self, address: str | None = None, *, workers: int | None = None, retries: int = 2,
                 options: SurveyOptions | None = None, max_pending: int | None = None,
                 runtime_env: dict | None = None):
        self.address = address
        self.workers = workers
        self.retries = max(0, int(retries))
        self.options = options or SurveyOptions()
        self.max_pending = max_pending
        self.runtime_env = runtime_env
        self.stats = BackendStats()

    def _wait_limit(self, pending: dict, started: dict) -> float | None:
        """Seconds until the oldest task in flight is past its backstop (:meth:`_backstop`; None: no timeout)."""
        if not self.options.timeout or not pending:
            return None
        return max(0.0, min(started[ref] for ref in pending) + self._backstop() - time.monotonic())

    def _backstop(self) -> float:
        """Seconds from submission after which a task is ended: --timeout + :data:`KILL_GRACE_S` +
        :data:`WORKER_START_S` (the task's own timer, started once its worker is up, normally ends it first)."""
        return self.options.timeout + KILL_GRACE_S + WORKER_START_S

    def _overdue(self, pending: dict, started: dict) -> list:
        """The tasks in flight past their backstop (their own timer did not stop them)."""
        now = time.monotonic()
        return [ref for ref in pending if now - started[ref] >= self._backstop()]

    def _connect(self, ray) -> bool:
        """Initialise Ray unless it already is; True if this backend started it (and must stop it)."""
        if ray.is_initialized():
            return False
        kwargs = {"include_dashboard": False, "log_to_driver": False}
        if self.address in (None, "local"):
            kwargs.update(address="local", num_cpus=self.workers)
        else:
            kwargs["address"] = self.address
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise IdinspectError(f"cannot start or reach Ray at {self.address or 'local'} ({exc}); "
                                 "check the address (ray status) or drop --ray for the local pool") from None
        return True

    def run(self, tasks: list[Task], emit: Callable[[dict], None]) -> BackendStats:
        ray = require_ray(local=self.address in (None, "local"))
        started = self._connect(ray)
        try:
            self._run(ray, tasks, emit)
        finally:
            if started:
                ray.shutdown()
        return self.stats

    def _run(self, ray, tasks: list[Task], emit: Callable[[dict], None]) -> None:
        from ray.exceptions import RayError, RayTaskError

        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.stats.workers = cpus
        # with a timeout, no more tasks in flight than CPUs, so a task starts when it is submitted and
        # the backstop below (from submission) measures its own run, not its wait in Ray's queue
        limit = self.max_pending or (cpus if self.options.timeout else max(2, 2 * cpus))
        node_memory = max((int(n.get("Resources", {}).get("memory", 0)) for n in ray.nodes() if n.get("Alive")), default=0)
        # with --model-memory, a fresh worker per model: the limit counts from a clean process, as in the
        # local pool (a reused worker's freed memory would be handed out again uncounted)
        remote = ray.remote(max_calls=1)(ray_row) if self.options.model_memory else ray.remote(ray_row)
        opts = options_dict(self.options)
        queue = deque(tasks)
        pending: dict = {}
        started: dict = {}   # ref -> when it was submitted
        while queue or pending:
            while queue and len(pending) < limit:
                task = queue.popleft()
                options = {"num_cpus": 1, "max_retries": self.retries, "retry_exceptions": [TransientRowError]}
                if self.runtime_env:
                    options["runtime_env"] = self.runtime_env

                if task.estimate.known and task.estimate.bytes:
                    # capped at the largest node's: a larger request could never be scheduled
                    options["memory"] = min(task.estimate.bytes, node_memory) if node_memory else task.estimate.bytes
                ref = remote.options(**options).remote(task.source, opts)
                pending[ref], started[ref] = task, time.monotonic()
            self.stats.peak_models = max(self.stats.peak_models, len(pending))
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=self._wait_limit(pending, started))
            if not ready:   # a task past its timeout that its own timer did not stop (a long C call)
                for ref in self._overdue(pending, started):
                    task = pending.pop(ref)
                    started.pop(ref, None)
                    ray.cancel(ref, force=True)
                    row = died_row(task.source, timeout_message(self.options.timeout) + " (the Ray task was ended)")
                    row["error_kind"] = "bad-input"
                    emit(row)
                continue
            for ref in ready:
                task = pending.pop(ref)
                started.pop(ref, None)
                try:
                    row = ray.get(ref)
                except RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    row = cause.row if isinstance(cause, TransientRowError) else died_row(
                        task.source, f"Ray task failed: {type(cause or exc).__name__}: {str(cause or exc)[:160]}")
                except RayError as exc:  # worker or node died, object lost, out of memory: after Ray's retries
                    row = died_row(task.source, f"Ray: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                emit(row)
