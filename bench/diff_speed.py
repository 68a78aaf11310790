"""``python -m bench.diff_speed``: ``idinspect diff`` against the floor of reading both checkpoints'
attention tensors, and its peak RSS against depth.

Uses the benchmark's cached Llama-3.2-1B-shaped bf16 checkpoints (built on first use by
:mod:`bench.build`): the 2- and 4-layer ones by default (``--full``: 16 and 32 layers). B is a
folder of symbolic links to A's files (same shapes, a zero step: the same arithmetic as any B, and
both reads hit the same page cache, for the floor as for diff). Every measurement runs in its own
child process, alternating floor and diff in each repeat; the time is measured inside the child
around the operation (imports excluded), the peak RSS is the child's ru_maxrss.
"""

from __future__ import annotations

import argparse
import json
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
t0 = time.perf_counter()
if mode == "floor":
    with idinspect.load(a) as A, idinspect.load(b) as B:
        for i in range(A.num_layers):
            la, lb = A.layer(i), B.layer(i)
            del la, lb
else:
    diff(a, b)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def child(mode: str, a: Path, b: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(a), str(b)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def mirror(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f.resolve())
    return dst


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.diff_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="16 and 32 layers instead of 2 and 4")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pair", nargs=2, action="append", metavar=("A", "B"),
                   help="checkpoint folders to diff instead of the cached ones (B may be '-': links to A); "
                        "give a shallow pair first and a deeper one last for the RSS ratio")
    args = p.parse_args(argv)
    pairs = args.pair
    if not pairs:
        from .build import ensure_checkpoint_in_child
        from .specs import FULL, QUICK, by_role

        specs = FULL if args.full else QUICK
        pairs = [(str(ensure_checkpoint_in_child(by_role(specs, role), log=lambda m: print(m, file=sys.stderr))), "-")
                 for role in ("main", "rss-large")]
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
            floor = statistics.median(s["seconds"] for s in samples["floor"])
            dif = statistics.median(s["seconds"] for s in samples["diff"])
            result["models"][name] = {
                "floor_s": floor, "diff_s": dif, "diff_over_floor": dif / floor,
                "peak_rss_diff_bytes": max(s["peak_rss_bytes"] for s in samples["diff"]),
                "peak_rss_floor_bytes": max(s["peak_rss_bytes"] for s in samples["floor"]), "samples": samples}
            print(f"{name}: floor {floor:.2f} s, diff {dif:.2f} s, ratio {dif / floor:.2f}", file=sys.stderr)
    rs, rl = (result["models"][n]["peak_rss_diff_bytes"] for n in (names[0], names[-1]))
    worst = max(m["diff_over_floor"] for m in result["models"].values())
    result["targets"] = {"diff_over_floor<=2.5 (worst pair)": [worst, worst <= 2.5],
                         "peak_rss_last_over_first<=1.1": [rl / rs, rl / rs <= 1.1]}
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (RESULTS / f"{stamp}-diff-speed{'-full' if args.full else ''}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["targets"], indent=1))
    return result


if __name__ == "__main__":
    main()
