"""Run one child process and measure it: wall time, CPU time and *its own* peak resident memory.

``os.wait4`` returns the resource usage of exactly the child it reaped (and of that child's own
reaped descendants), so each measurement is per process, unlike
``getrusage(RUSAGE_CHILDREN)``, whose ``ru_maxrss`` is the maximum over every child ever waited
for. ``ru_maxrss`` is the high-water mark of the resident set (anonymous and file-backed pages,
i.e. touched ``mmap`` pages count), in KiB on Linux.

One trap: Linux folds the high-water mark of the memory the child was forked from into the child's
``ru_maxrss`` when it execs, so a child never reports less than the harness's own peak RSS at that
moment (a 1.5 GB parent makes ``python -c pass`` report 1.5 GB). The harness therefore keeps its
own process small (torch, transformers, idinspect and checkpoint builds run in children) and every
result records that floor (``rss_floor_bytes``); a peak at or below it was not measured.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .tasks import PREFIX

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ChildResult:
    """What one child process did."""

    argv: list[str]
    wall_s: float
    user_s: float
    sys_s: float
    max_rss_bytes: int
    returncode: int
    stdout: str
    stderr: str
    load_1min: float = 0.0   # 1-minute load average when the child started (noise indicator)
    rss_floor_bytes: int = 0  # the harness's own peak RSS at spawn: max_rss_bytes cannot be lower

    @property
    def rss_measured(self) -> bool:
        """False when ``max_rss_bytes`` is only the inherited floor, not the child's own peak."""
        return self.max_rss_bytes > self.rss_floor_bytes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def task_result(self) -> dict:
        """The last ``BENCH_RESULT`` line a :mod:`bench.tasks` child printed."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX):])
        raise RuntimeError(f"{' '.join(self.argv)}: no result line; stderr:\n{self.stderr[-2000:]}")


def run_child(argv: list[str], *, timeout_s: float | None = None, env: dict | None = None) -> ChildResult:
    """Run ``argv`` from the repository root, stdout/stderr to temporary files, and reap it with wait4."""
    load = os.getloadavg()[0]
    floor = own_peak_rss_bytes()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, env=env)
        timer = None
        if timeout_s is not None:
            timer = threading.Timer(timeout_s, _kill, (proc.pid,))
            timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            if timer is not None:
                timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return ChildResult(argv=list(argv), wall_s=wall, user_s=usage.ru_utime, sys_s=usage.ru_stime,
                           max_rss_bytes=usage.ru_maxrss * 1024, returncode=proc.returncode,
                           stdout=out.read().decode(errors="replace"), stderr=err.read().decode(errors="replace"),
                           load_1min=load, rss_floor_bytes=floor)


def own_peak_rss_bytes() -> int:
    """This process's peak resident set so far (the floor of every child's ``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def task_argv(*args: str) -> list[str]:
    """``[sys.executable, -m, bench.tasks, *args]``: the same Python for every measurement."""
    return [sys.executable, "-m", "bench.tasks", *args]


def idinspect_argv(*args: str) -> list[str]:
    """The ``idinspect`` CLI run by the same Python (``python -m idinspect``)."""
    return [sys.executable, "-m", "idinspect", *args]


def run_task_checked(args: list[str], timeout_s: float | None = None) -> dict:
    """Run a :mod:`bench.tasks` task; raise with its stderr if it fails."""
    res = run_child(task_argv(*args), timeout_s=timeout_s)
    if not res.ok:
        raise RuntimeError(f"task {' '.join(args)} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return res.task_result()


def median(values: list[float]) -> float | None:
    """Median, or None for no values."""
    return statistics.median(values) if values else None
