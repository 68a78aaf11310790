"""Describe the machine and software a benchmark ran on (recorded beside every result)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 ** 2, 1)
    except OSError:
        pass
    return None


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def load_average() -> list[float]:
    """1-, 5- and 15-minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def describe() -> dict:
    """CPU, cores, RAM, library versions, git commit, date (UTC) and the current load average.

    Library facts come from a child process (``bench.tasks facts``): importing torch here would
    raise the harness's own peak RSS, which every child's measured peak inherits (bench.measure)."""
    from .measure import run_task_checked

    status = _git("status", "--porcelain", "--untracked-files=no")
    libs = run_task_checked(["facts"])
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": libs["torch_threads"],
        "ram_gb": _mem_total_gb(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "torch": libs["torch"],
        "transformers": libs["transformers"],
        "safetensors": libs["safetensors"],
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "load_average_start": load_average(),
        "gpu": libs["gpu"],
    }
