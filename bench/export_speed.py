"""``python -m bench.export_speed``: ``idinspect export`` against ``cp -r`` of the same folder, warm and cold.

For each checkpoint (default: the Llama-3.2-1B-shaped ``llama-1b-16l``; ``--scale`` adds the
Llama-3.1-8B-width ``llama-8b-8l``; ``--model DIR`` for others) and each page-cache state, the two
commands alternate within every repeat, each a fresh child process timed from spawn to exit (as a
user waits: interpreter start and imports included for export):

- ``cpr``: ``cp -r MODEL/ OUT`` (the kernel's copy; no fsync, as cp does not sync);
- ``cpr_sync`` (``--durable``, informational): the same followed by ``sync OUT/*`` (fsync of each
  copied file), the floor of a copy that is on the disk when it returns, as export's is;
- ``export``: ``python -m idinspect export MODEL OUT --quiet``.

Page cache: **warm**: every input file is read once before each sample; **cold**: before each
sample every input file is dropped from the page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)``
(``/proc/sys/vm/drop_caches`` is not writable here, and it would also drop the other users' caches);
``fincore`` confirms how much stayed resident (recorded as ``resident_bytes_before``). OUT is
removed after every sample (its dirty pages are discarded with it). Children run without
``PYTHONDONTWRITEBYTECODE`` (an installed package has its bytecode compiled; a source checkout
under that variable recompiles idinspect's ~300 modules in every process, ~0.2 s).

Prints each median ratio export / cpr with PASS/FAIL against :data:`TARGET`, and writes
``bench/results/STAMP-export-speed.json`` (every sample with the 1-minute load average at its start).
``--stages`` also runs :mod:`bench.export_stages` once per checkpoint (warm): where export's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .measure import run_child

RESULTS = Path(__file__).resolve().parent / "results"
OUT = Path(__file__).resolve().parent / "cache" / "out"
TARGET = 1.3


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file())


def drop_from_page_cache(directory: Path) -> None:
    """posix_fadvise(DONTNEED) on every file of ``directory`` (clean pages leave the cache)."""
    for path in _files(directory):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(directory: Path, chunk: int = 1 << 24) -> None:
    """Read every file once through one reused buffer (keeps this harness's RSS small)."""
    buf = bytearray(chunk)
    for path in _files(directory):
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def resident_bytes(directory: Path) -> int | None:
    """Bytes of ``directory``'s files in the page cache (``fincore``), None where it cannot tell."""
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                              *map(str, _files(directory))], capture_output=True, text=True, check=True).stdout
        return sum(int(x) for x in out.split())
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None


def _child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env


def sample(kind: str, model: Path, state: str) -> dict:
    """One timed child: ``kind`` in cpr / cpr_sync / export, page cache ``state`` warm or cold."""
    out = OUT / f"{model.name}-{kind}"
    shutil.rmtree(out, ignore_errors=True)
    for stale in out.parent.glob(f".{out.name}*"):
        shutil.rmtree(stale, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    if state == "cold":
        drop_from_page_cache(model)
    else:
        warm(model)
    resident = resident_bytes(model)
    if kind == "export":
        argv = [sys.executable, "-m", "idinspect", "export", str(model), str(out), "--quiet"]
    elif kind == "cpr":
        argv = ["cp", "-r", f"{model}/", str(out)]
    else:
        argv = ["sh", "-c", 'cp -r "$0/" "$1" && sync "$1"/*', str(model), str(out)]
    res = run_child(argv, env=_child_env())
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.is_dir() else 0
    shutil.rmtree(out, ignore_errors=True)
    if not res.ok:
        raise RuntimeError(f"{kind} of {model} failed (exit {res.returncode}): {res.stderr[-2000:]}")
    return {"wall_s": res.wall_s, "user_s": res.user_s, "sys_s": res.sys_s, "max_rss_bytes": res.max_rss_bytes,
            "load_1min": res.load_1min, "resident_bytes_before": resident, "written_bytes": written}


def stages(model: Path) -> dict:
    """:mod:`bench.export_stages` once, warm: the per-stage breakdown."""
    out = OUT / f"{model.name}-stages"
    warm(model)
    res = run_child([sys.executable, "-m", "bench.export_stages", str(model), str(out)], env=_child_env())
    shutil.rmtree(out, ignore_errors=True)
    if not res.ok:
        raise RuntimeError(f"export_stages failed: {res.stderr[-2000:]}")
    return {**json.loads(res.stdout.strip().splitlines()[-1]), "process_wall_s": res.wall_s, "load_1min": res.load_1min}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.export_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", type=Path, help="checkpoint folder(s) instead of the cached ones")
    p.add_argument("--scale", action="store_true", help="also the Llama-3.1-8B-width 8-layer checkpoint (5.6 GB)")
    p.add_argument("--only-scale", action="store_true", help="only the 8B-width checkpoint")
    p.add_argument("--states", nargs="+", default=["warm", "cold"], choices=["warm", "cold"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--durable", action="store_true", help="also time cp -r followed by an fsync of each copied file")
    p.add_argument("--stages", action="store_true", help="also the per-stage breakdown (bench.export_stages)")
    args = p.parse_args(argv)
    models = list(args.model or [])
    if not models:
        from .build import ensure_checkpoint_in_child
        from .specs import FULL, SCALE, by_role

        log = lambda m: print(m, file=sys.stderr)
        if not args.only_scale:
            models.append(ensure_checkpoint_in_child(by_role(FULL, "main"), log=log))
        if args.scale or args.only_scale:
            models.append(ensure_checkpoint_in_child(by_role(SCALE, "scale"), log=log))
    kinds = ["cpr", "export", *(["cpr_sync"] if args.durable else [])]
    from .machine import describe, load_average

    result: dict = {"machine": describe(), "target": TARGET, "models": {}}
    for model in models:
        model = Path(model).resolve()
        entry: dict = {"bytes": sum(p.stat().st_size for p in _files(model))}
        if args.stages:
            entry["stages"] = stages(model)
            print(f"{model.name}: stages {json.dumps(entry['stages'])}", file=sys.stderr, flush=True)
        for state in args.states:
            samples: dict[str, list[dict]] = {k: [] for k in kinds}
            for r in range(args.repeats):
                for kind in (kinds if r % 2 == 0 else kinds[::-1]):      # alternate which goes first
                    samples[kind].append(sample(kind, model, state))
            med = {k: statistics.median(s["wall_s"] for s in v) for k, v in samples.items()}
            ratio = med["export"] / med["cpr"]
            loads = [s["load_1min"] for v in samples.values() for s in v]
            entry[state] = {"median_wall_s": med, "export_over_cpr": ratio, "pass": ratio <= TARGET,
                            "load_1min_range": [min(loads), max(loads)], "samples": samples}
            if "cpr_sync" in med:
                entry[state]["export_over_cpr_sync"] = med["export"] / med["cpr_sync"]
            extra = f", cp -r + fsync {med['cpr_sync']:.2f} s" if "cpr_sync" in med else ""
            print(f"{model.name} {state}: cp -r {med['cpr']:.2f} s, export {med['export']:.2f} s{extra}: "
                  f"export / cp -r {ratio:.2f} (target <= {TARGET}: {'PASS' if ratio <= TARGET else 'FAIL'}; "
                  f"load {min(loads):.1f}-{max(loads):.1f})", flush=True)
        result["models"][model.name] = entry
    result["machine"]["load_average_end"] = load_average()
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"{stamp}-export-speed.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
