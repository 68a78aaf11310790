"""``python -m bench.diff_speed``: ``idinspect diff`` against the floor of reading both checkpoints'
attention tensors, and its peak RSS against depth.

Uses the benchmark's cached Llama-3.2-1B-shaped bf16 checkpoints (built on first use by
:mod:`bench.build`): the 2- and 4-layer ones by default, each against a folder of symbolic links to
its own files (a zero step: the same arithmetic as any B); ``--full``: the 2-layer pair, then the
compare benchmark's two 16-layer checkpoints of different seeds (Llama-3.2-1B's depth, a real step). Every measurement runs in its own
child process, alternating floor and diff in each repeat; the time is measured inside the child
around the operation (imports excluded) and around the whole child process (as a user waits);
the peak RSS is the child's ru_maxrss. Both children run with ``THP_MEM_ALLOC_ENABLE=1``, as the
command line sets it (:func:`idinspect.entry.use_huge_pages_for_tensors`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

_CHILD = r"""
import json, resource, sys, time
import idinspect
from idinspect.training.diff import diff
mode, a, b = sys.argv[1:4]
t0, c0 = time.perf_counter(), time.process_time()
if mode == "floor":
    with idinspect.load(a) as A, idinspect.load(b) as B:
        for i in range(A.num_layers):
            la, lb = A.layer(i), B.layer(i)
            del la, lb
else:
    diff(a, b)
dt, dc = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"seconds": dt, "cpu_seconds": dc,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def child(mode: str, a: Path, b: Path) -> dict:
    """One measurement: the operation's own time and CPU time (imports excluded), the child's peak
    RSS, and the whole process's wall time (interpreter start and imports included, as a user waits)."""
    t0 = time.perf_counter()
    # both children with the allocator setting that ``idinspect diff`` itself makes (entry.py)
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE", "1")}
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(a), str(b)], capture_output=True, text=True,
                         check=True, env=env)
    sample = json.loads(out.stdout.strip().splitlines()[-1])
    sample["process_seconds"] = time.perf_counter() - t0
    return sample


def mirror(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f.resolve())
    return dst


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.diff_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true",
                   help="the 2-layer checkpoint against itself, then the two 16-layer Llama-3.2-1B-shaped checkpoints "
                        "of the compare benchmark (different seeds: a real step), instead of 2 and 4 layers")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pair", nargs=2, action="append", metavar=("A", "B"),
                   help="checkpoint folders to diff instead of the cached ones (B may be '-': links to A); "
                        "give a shallow pair first and a deeper one last for the RSS ratio")
    args = p.parse_args(argv)
    pairs = args.pair
    if not pairs:
        from .build import ensure_checkpoint_in_child
        from .specs import QUICK, by_role

        from .specs import compare_pair

        def built(spec) -> str:
            return str(ensure_checkpoint_in_child(spec, log=lambda m: print(m, file=sys.stderr)))

        pairs = [(built(by_role(QUICK, "main")), "-")]
        if args.full:
            pairs.append(tuple(built(s) for s in compare_pair(16)))
        else:
            pairs.append((built(by_role(QUICK, "rss-large")), "-"))
    result = {"models": {}}
    names = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (a, b) in enumerate(pairs):
            a = Path(a)
            b = mirror(a, Path(tmp) / f"b{k}") if b == "-" else Path(b)
            name = f"{a.name} -> {b.name if b.parent != Path(tmp) else '(links to A)'}"
            names.append(name)
            samples = {"floor": [], "diff": []}
            for _ in range(args.repeats):
                for mode in samples:
                    samples[mode].append(child(mode, a, b))
            med = lambda mode, key: statistics.median(s[key] for s in samples[mode])   # noqa: E731
            floor, dif = med("floor", "seconds"), med("diff", "seconds")
            pfloor, pdif = med("floor", "process_seconds"), med("diff", "process_seconds")
            result["models"][name] = {
                "floor_s": floor, "diff_s": dif, "diff_over_floor": dif / floor,
                "floor_cpu_s": med("floor", "cpu_seconds"), "diff_cpu_s": med("diff", "cpu_seconds"),
                "floor_process_s": pfloor, "diff_process_s": pdif, "diff_over_floor_process": pdif / pfloor,
                "peak_rss_diff_bytes": max(s["peak_rss_bytes"] for s in samples["diff"]),
                "peak_rss_floor_bytes": max(s["peak_rss_bytes"] for s in samples["floor"]), "samples": samples}
            print(f"{name}: floor {floor:.2f} s, diff {dif:.2f} s, ratio {dif / floor:.2f}; whole processes "
                  f"{pfloor:.2f} s and {pdif:.2f} s, ratio {pdif / pfloor:.2f}", file=sys.stderr, flush=True)
    rs, rl = (result["models"][n]["peak_rss_diff_bytes"] for n in (names[0], names[-1]))
    last = result["models"][names[-1]]
    result["targets"] = {"diff_over_floor_process<=2.5 (deepest pair)": [last["diff_over_floor_process"],
                                                                         last["diff_over_floor_process"] <= 2.5],
                         "diff_over_floor<=2.5 (deepest pair, operation only)": [last["diff_over_floor"],
                                                                                 last["diff_over_floor"] <= 2.5],
                         "peak_rss_last_over_first<=1.1": [rl / rs, rl / rs <= 1.1]}
    from .machine import describe, load_average

    result["machine"] = {**describe(), "load_average_end": load_average()}
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (RESULTS / f"{stamp}-diff-speed{'-full' if args.full else ''}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["targets"], indent=1))
    return result


if __name__ == "__main__":
    main()
