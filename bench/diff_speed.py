"""``python -m bench.diff_speed``: ``idinspect diff`` against the floor of reading both checkpoints'
attention tensors, and its peak RSS against depth.

Uses the benchmark's cached Llama-3.2-1B-shaped bf16 checkpoints (built on first use by
:mod:`bench.build`): the 2- and 4-layer ones by default, each against a folder of symbolic links to
its own files (a zero step: every head unchanged, so diff skips the step's three-piece products;
``--pair A +`` diffs A against a copy with a tiny step in every attention weight); ``--full``: the 2-layer pair, then the
compare benchmark's two 16-layer checkpoints of different seeds (Llama-3.2-1B's depth, a real step). Every measurement runs in its own
child process, alternating floor, diff (the library call) and ``idinspect diff`` (the command line) in
each repeat; the time is measured inside the child around the operation (imports excluded) and
around the whole child process (as a user waits). The floor process imports only what reading needs
(not the diff modules); the targets (issue 40) compare the command line's whole process with it;
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
#: Issue 40: the whole ``idinspect diff`` process within these multiples of the floor process (reading
#: both checkpoints' attention tensors): the small (2-layer) pair, and the deepest pair (1B, 8B).
SMALL_TARGET, DEEP_TARGET = 2.0, 1.5

_CHILD = r"""
import json, resource, sys, time
import idinspect
mode, a, b = sys.argv[1:4]
if mode == "floor":
    import idinspect.automatic.loading               # what reading needs (torch, the readers), not diff's modules
else:
    from idinspect.training.diff import diff
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


def _env() -> dict:
    """Every child with the allocator setting that ``idinspect diff`` itself makes (entry.py), and with
    bytecode caching on (an installed package has its bytecode; a source checkout under
    ``PYTHONDONTWRITEBYTECODE`` recompiles idinspect's modules in every process, ~0.2 s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE", "1")}


def child(mode: str, a: Path, b: Path) -> dict:
    """One measurement: the operation's own time and CPU time (imports excluded), the child's peak
    RSS, and the whole process's wall time (interpreter start and imports included, as a user waits).
    ``cli``: the command line itself, ``python -m idinspect diff A B --format json --quiet``, timed
    as a whole process only (its output parsed to check it is the diff document)."""
    t0 = time.perf_counter()
    if mode == "cli":
        out = subprocess.run([sys.executable, "-m", "idinspect", "diff", str(a), str(b), "--format", "json", "--quiet"],
                             capture_output=True, text=True, check=True, env=_env())
        wall = time.perf_counter() - t0
        if json.loads(out.stdout).get("kind") != "idinspect-diff":
            raise RuntimeError("idinspect diff printed no diff document")
        return {"process_seconds": wall}
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(a), str(b)], capture_output=True, text=True,
                         check=True, env=_env())
    sample = json.loads(out.stdout.strip().splitlines()[-1])
    sample["process_seconds"] = time.perf_counter() - t0
    return sample


def mirror(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f.resolve())
    return dst


_TINY = r"""
import shutil, sys
from pathlib import Path
import torch
from safetensors import safe_open
from safetensors.torch import save_file
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.mkdir()
for f in src.iterdir():
    if f.suffix != ".safetensors":
        shutil.copyfile(f, dst / f.name)
        continue
    with safe_open(str(f), "pt") as st:
        tensors = {n: st.get_tensor(n) for n in st.keys()}
        meta = st.metadata()
    for n, t in tensors.items():
        if ".self_attn." in n and n.endswith("weight"):
            flat = t.view(-1)
            flat[::97] = (flat[::97].double() * (1 + 2.0 ** -6)).to(t.dtype)   # ~1 % of entries, a few ulps
    save_file(tensors, str(dst / f.name), metadata=meta)
"""


def tiny_step(src: Path, dst: Path) -> Path:
    """A copy of ``src`` whose attention weights moved by a tiny step (every 97th entry scaled by
    1 + 2^-6: a few bf16 ulps), written by a child process (the harness stays small)."""
    subprocess.run([sys.executable, "-c", _TINY, str(src), str(dst)], check=True, env=_env())
    return dst


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.diff_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true",
                   help="the 2-layer checkpoint against itself, then the two 16-layer Llama-3.2-1B-shaped checkpoints "
                        "of the compare benchmark (different seeds: a real step), instead of 2 and 4 layers")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pair", nargs=2, action="append", metavar=("A", "B"),
                   help="checkpoint folders to diff instead of the cached ones (B may be '-': links to A, a zero "
                        "step; or '+': a copy of A with a tiny step in every attention weight); "
                        "give a shallow pair first and a deeper one last for the RSS ratio")
    args = p.parse_args(argv)
    pairs = args.pair
    if not pairs:
        from .build import ensure_checkpoint_in_child
        from .specs import QUICK, by_role, compare_pair

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
            label = {"-": "(links to A)", "+": "(A + a tiny step)"}.get(b)
            b = mirror(a, Path(tmp) / f"b{k}") if b == "-" else tiny_step(a, Path(tmp) / f"b{k}") if b == "+" else Path(b)
            name = f"{a.name} -> {label or b.name}"
            names.append(name)
            for folder in (a, b):           # warm page cache: every file read once first (as bench.run does)
                for f in sorted(folder.iterdir()):
                    with open(f, "rb", buffering=0) as fh:
                        buf = bytearray(1 << 24)
                        while fh.readinto(buf):
                            pass
            samples = {"floor": [], "diff": [], "cli": []}
            for _ in range(args.repeats):
                for mode, taken in samples.items():
                    taken.append({**child(mode, a, b), "load_1min": os.getloadavg()[0]})

            def med(mode: str, key: str, samples: dict = samples) -> float:
                return statistics.median(s[key] for s in samples[mode])
            floor, dif = med("floor", "seconds"), med("diff", "seconds")
            pfloor, pdif, pcli = med("floor", "process_seconds"), med("diff", "process_seconds"), med("cli", "process_seconds")
            loads = [s["load_1min"] for v in samples.values() for s in v]
            result["models"][name] = {
                "floor_s": floor, "diff_s": dif, "diff_over_floor": dif / floor,
                "floor_cpu_s": med("floor", "cpu_seconds"), "diff_cpu_s": med("diff", "cpu_seconds"),
                "floor_process_s": pfloor, "diff_process_s": pdif, "diff_over_floor_process": pdif / pfloor,
                "cli_process_s": pcli, "cli_over_floor_process": pcli / pfloor, "load_1min_range": [min(loads), max(loads)],
                "peak_rss_diff_bytes": max(s["peak_rss_bytes"] for s in samples["diff"]),
                "peak_rss_floor_bytes": max(s["peak_rss_bytes"] for s in samples["floor"]), "samples": samples}
            print(f"{name}: floor {floor:.2f} s, diff {dif:.2f} s, ratio {dif / floor:.2f}; whole processes: floor "
                  f"{pfloor:.2f} s, diff (library) {pdif:.2f} s, ratio {pdif / pfloor:.2f}; idinspect diff (command line) "
                  f"{pcli:.2f} s, ratio {pcli / pfloor:.2f} (load {min(loads):.1f}-{max(loads):.1f})", file=sys.stderr, flush=True)
    rs, rl = (result["models"][n]["peak_rss_diff_bytes"] for n in (names[0], names[-1]))
    first, last = result["models"][names[0]], result["models"][names[-1]]
    result["targets"] = {f"cli_over_floor_process<={SMALL_TARGET} (first, shallow pair)": [
                             first["cli_over_floor_process"], first["cli_over_floor_process"] <= SMALL_TARGET],
                         f"cli_over_floor_process<={DEEP_TARGET} (deepest pair)": [
                             last["cli_over_floor_process"], last["cli_over_floor_process"] <= DEEP_TARGET],
                         "diff_over_floor (deepest pair, operation only; informational)": [last["diff_over_floor"], None],
                         "peak_rss_last_over_first<=1.1": [rl / rs, rl / rs <= 1.1]}
    for key, (value, ok) in result["targets"].items():
        print(f"{key}: {value:.2f} {'' if ok is None else 'PASS' if ok else 'FAIL'}")
    from .machine import describe, load_average

    result["machine"] = {**describe(), "load_average_end": load_average()}
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (RESULTS / f"{stamp}-diff-speed{'-full' if args.full else ''}.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
