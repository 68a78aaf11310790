"""``python -m bench.verify_speed``: ``idinspect verify A B`` against 3 x (inspect A + inspect B), the
target of issue 34, measured in the same run on the same machine.

A is the benchmark's Llama-3.2-1B-shaped bf16 checkpoint (``llama-1b-16l``, built by :mod:`bench.build`
on first use) and B its gauge-fixed export (written under ``bench/cache/exports/`` by ``idinspect
export`` on first use); ``--a``/``--b`` take other paths. Each repeat runs, each in its own child
process: ``idinspect A --json``, ``idinspect B --json``, then ``idinspect verify A B --progress
always`` (the full check, functional included; ``--no-functional`` too with ``--also-no-functional``).
Reported per run: wall time and peak RSS of each child, verify's stage times (from its progress
lines, which state the elapsed seconds), the route its functional check took, and the ratio
verify / (3 x (inspect A + inspect B)) with pass (<= 1) or fail. Repeats default to 1: a 1B verify
holds one model copy in float32 (5 GB) at a time, and this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

from .measure import idinspect_argv, run_child

RESULTS = Path(__file__).resolve().parent / "results"
EXPORTS = Path(__file__).resolve().parent / "cache" / "exports"
_STAGE = re.compile(r"^idinspect: (.+?) (\d+)/(\d+) \((\d+) s\)$")


def default_pair() -> tuple[Path, Path]:
    """The 1B-shaped checkpoint (built if missing) and its export (written if missing)."""
    from .build import ensure_checkpoint_in_child
    from .specs import FULL

    a = ensure_checkpoint_in_child(next(s for s in FULL if s.name == "llama-1b-16l"))
    b = EXPORTS / f"{a.name}-balanced"
    if not b.exists():
        EXPORTS.mkdir(parents=True, exist_ok=True)
        res = run_child(idinspect_argv("export", str(a), str(b), "--quiet"))
        if not res.ok:
            raise RuntimeError(f"export failed:\n{res.stderr[-2000:]}")
    return a, b


def stage_times(stderr: str) -> dict[str, float]:
    """Seconds at which each progress stage of verify finished (its last ``done/total`` line)."""
    out: dict[str, float] = {}
    for line in stderr.splitlines():
        m = _STAGE.match(line.strip())
        if m and m.group(2) == m.group(3):
            out[m.group(1)] = float(m.group(4))
    return out


def one_run(a: Path, b: Path, no_functional: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        inspect = [run_child(idinspect_argv(str(m), "--json", str(Path(tmp) / f"{i}.json"), "--quiet"))
                   for i, m in enumerate((a, b))]
    for r in inspect:
        if not r.ok:
            raise RuntimeError(f"inspect failed:\n{r.stderr[-2000:]}")
    runs = {}
    for label, extra in [("verify", [])] + ([("verify --no-functional", ["--no-functional"])] if no_functional else []):
        r = run_child(idinspect_argv("verify", str(a), str(b), "--progress", "always", *extra))
        route = re.search(r"\((in memory, \w+|streamed[^)]*|offloaded[^)]*)\)", r.stdout)
        runs[label] = {"wall_s": r.wall_s, "cpu_s": r.user_s + r.sys_s, "peak_rss_bytes": r.max_rss_bytes,
                       "exit": r.returncode, "equivalent": r.stdout.rstrip().endswith("\nequivalent"),
                       "route": route.group(1) if route else None, "stages_s": stage_times(r.stderr),
                       "load_1min": r.load_1min}
    floor = 3 * (inspect[0].wall_s + inspect[1].wall_s)
    for v in runs.values():
        v["ratio"] = v["wall_s"] / floor
        v["pass"] = v["ratio"] <= 1.0
    return {"inspect_a_s": inspect[0].wall_s, "inspect_b_s": inspect[1].wall_s,
            "inspect_cpu_s": [r.user_s + r.sys_s for r in inspect],
            "inspect_peak_rss_bytes": [r.max_rss_bytes for r in inspect], "target_s": floor,
            "load_1min": inspect[0].load_1min, **runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, help="checkpoint A (default: the llama-1b-16l benchmark checkpoint)")
    ap.add_argument("--b", type=Path, help="checkpoint B (default: A's gauge-fixed export)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--also-no-functional", action="store_true", help="also time verify --no-functional")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    a, b = (args.a, args.b) if args.a and args.b else default_pair()
    results = []
    for i in range(args.repeats):
        r = one_run(a, b, args.also_no_functional)
        results.append(r)
        print(f"run {i + 1}: inspect A {r['inspect_a_s']:.2f} s, inspect B {r['inspect_b_s']:.2f} s -> target "
              f"{r['target_s']:.1f} s (load {r['load_1min']:.1f})")
        for label in ("verify", "verify --no-functional"):
            if label in r:
                v = r[label]
                print(f"  {label}: {v['wall_s']:.1f} s, peak {v['peak_rss_bytes'] / 2**30:.2f} GiB, {v['route']}, "
                      f"ratio {v['ratio']:.2f} {'pass' if v['pass'] else 'FAIL'}; stages {v['stages_s']}")
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = RESULTS / f"{stamp}-verify-speed.json"
        path.write_text(json.dumps({"a": str(a), "b": str(b), "runs": results}, indent=2))
        print(f"wrote {path}")
    return 0 if all(r["verify"]["pass"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
