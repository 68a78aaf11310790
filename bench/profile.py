"""``python -m bench.profile [--quick] [--what inspect export]``: pyinstrument profiles of the CLI.

Runs ``idinspect MODEL --format json`` and ``idinspect export MODEL OUT`` under pyinstrument
(``pip install pyinstrument`` into the venv first) on the benchmark's main checkpoint and writes
the text call trees to ``bench/results/profiles/``. Set ``OMP_NUM_THREADS`` etc. in the
environment to profile other threading settings; it is passed through.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from pathlib import Path

from .build import ensure_checkpoint
from .machine import load_average
from .measure import run_child
from .specs import FULL, QUICK, by_role
from .workloads import OUT

PROFILES = Path(__file__).resolve().parent / "results" / "profiles"


_ONE_ROOT = "import sys\ndef idinspect_process():\n    from idinspect.cli import main\n    main(sys.argv[1:])\nidinspect_process()\n"


def profile(argv_tail: list[str], label: str) -> Path:
    """Run ``idinspect ARGS`` under pyinstrument and save its text report."""
    PROFILES.mkdir(parents=True, exist_ok=True)
    path = PROFILES / f"{label}.txt"
    # pyinstrument writes its report at interpreter exit, which idinspect's fast exit would skip
    env = {**os.environ, "IDINSPECT_NO_FAST_EXIT": "1"}
    # One root frame around imports and the command: with ``-m idinspect`` pyinstrument renders only
    # the heavier of runpy's two roots, which is the torch import once the command is faster than it.
    res = run_child([sys.executable, "-m", "pyinstrument", "-o", str(path), "-c", _ONE_ROOT, *argv_tail],
                    timeout_s=3600, env=env)
    if not res.ok:
        raise RuntimeError(f"profiling {label} failed (exit {res.returncode}):\n{res.stderr[-2000:]}")
    header = (f"# idinspect {' '.join(argv_tail)}\n# wall {res.wall_s:.2f} s, cpu {res.user_s + res.sys_s:.2f} s, "
              f"peak RSS {res.max_rss_bytes / 1e9:.3f} GB, load average {load_average()}\n")
    path.write_text(header + path.read_text())
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="profile the quick-mode main model (2 layers)")
    p.add_argument("--what", nargs="*", default=["inspect", "export"], choices=("inspect", "export"))
    args = p.parse_args(argv)
    if importlib.util.find_spec("pyinstrument") is None:
        print("pyinstrument is not installed: pip install pyinstrument", file=sys.stderr)
        return 2
    spec = by_role(QUICK if args.quick else FULL, "main")
    directory = ensure_checkpoint(spec)
    if "inspect" in args.what:
        print(profile([str(directory), "--format", "json"], f"inspect-{spec.name}"))
    if "export" in args.what:
        out = OUT / f"{spec.name}-profile-export"
        shutil.rmtree(out, ignore_errors=True)
        try:
            print(profile(["export", str(directory), str(out)], f"export-{spec.name}"))
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
