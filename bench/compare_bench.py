"""``python -m bench.compare_bench [--layers N] [--repeats N]``: the speed targets of issue 16.

Two Llama-3.2-1B-shaped bf16 checkpoints of the same shape and different weights
(:func:`bench.specs.compare_pair`, built like every bench checkpoint) and, each in its own child
process, alternating within each repeat so that load drift hits all alike:

- ``floor2``: read both checkpoints' attention tensors with safetensors (cast to float32), one process;
- ``compare``: ``idinspect compare A B --format json``;
- ``floor1``: read B's attention tensors;
- ``fp_compare``: ``idinspect compare A.fingerprint.json B --format json`` (fingerprint written once,
  untimed, by ``idinspect fingerprint A``);
- ``inspect``: ``idinspect B --format json``, for reference: the same per-layer analysis of one
  checkpoint that ``fp_compare`` needs (no target).

Targets: compare / floor2 <= 2.5 and fp_compare / floor1 <= 1.5 (medians of whole-process wall
times: interpreter start and imports count on both sides). Results go to
``bench/results/<date>-compare-<N>l.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import workloads
from .build import ensure_checkpoint_in_child
from .machine import describe, load_average
from .measure import idinspect_argv, run_child, task_argv
from .tasks import PREFIX
from .specs import compare_pair

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"compare / floor2": 2.5, "fp_compare / floor1": 1.5}


def _log(msg: str) -> None:
    print(msg, flush=True)


def _sample(res, parse_json: bool = False) -> dict:
    sample = workloads._sample(res)
    if res.ok and parse_json:
        try:
            r = json.loads(res.stdout)
            sample["detail"] = {"verdict": r["verdict"], "p_value": (r.get("lineage") or {}).get("p_value"),
                                "similarity": r.get("similarity")}
        except (json.JSONDecodeError, KeyError) as exc:
            sample.update(ok=False, error=f"bad JSON from compare: {exc}")
    elif res.ok and PREFIX in res.stdout:
        sample["detail"] = res.task_result()
    return sample


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=16, help="decoder layers of both checkpoints (Llama-3.2-1B: 16)")
    p.add_argument("--size", choices=("1b", "8b"), default="1b",
                   help="8b: Llama-3.1-8B-shaped pair (full width, --layers layers; issue 20)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/*.json")
    args = p.parse_args(argv)
    spec_a, spec_b = compare_pair(args.layers, args.size)
    machine = describe()
    dirs = [ensure_checkpoint_in_child(s, log=_log) for s in (spec_a, spec_b)]
    scratch = Path(tempfile.mkdtemp(prefix="idinspect-compare-bench-"))
    names = []
    for s, d in zip((spec_a, spec_b), dirs):
        names.append(scratch / f"{s.name}.names.json")
        names[-1].write_text(json.dumps(workloads.attention_names(d)))
    fp = scratch / "a.fingerprint.json"
    made = run_child(idinspect_argv("fingerprint", str(dirs[0]), "-o", str(fp)))
    if not made.ok:
        _log(f"fingerprint failed: {made.stderr[-2000:]}")
        return 1
    _log(f"fingerprint of {spec_a.name}: {fp.stat().st_size / 1e3:.0f} kB")
    _log(f"warming the page cache ({sum(workloads.warm_page_cache(d) for d in dirs) / 1e9:.1f} GB read)")
    commands = {
        "floor2": (task_argv("floor", str(dirs[0]), str(names[0]), str(dirs[1]), str(names[1])), False),
        "compare": (idinspect_argv("compare", str(dirs[0]), str(dirs[1]), "--format", "json"), True),
        "floor1": (task_argv("floor", str(dirs[1]), str(names[1])), False),
        "fp_compare": (idinspect_argv("compare", str(fp), str(dirs[1]), "--format", "json"), True),
        "inspect": (idinspect_argv(str(dirs[1]), "--format", "json"), False),
    }
    for name, (argv_, as_json) in commands.items():          # warm-up, untimed: fail early
        warm = _sample(run_child(argv_), as_json)
        if not warm["ok"] and not (as_json and warm.get("error", "").startswith("exit 1")):
            _log(f"{name} failed in the warm-up: {warm['error']}")
            return 1
    samples: dict[str, list[dict]] = {k: [] for k in commands}
    t0 = time.perf_counter()
    for rep in range(args.repeats):
        for name, (argv_, as_json) in commands.items():
            res = run_child(argv_)
            if as_json and res.returncode == 1:                 # verdict 'not the same function': still a result
                res.returncode = 0
            sample = _sample(res, as_json)
            samples[name].append(sample)
            _log(f"[{rep + 1}/{args.repeats}] {name:<10} " +
                 (f"{sample['wall_s']:7.3f} s  {sample['detail']}" if sample["ok"] else f"FAILED {sample['error']}"))
    medians = {k: statistics.median(s["wall_s"] for s in v if s["ok"]) for k, v in samples.items()}
    ratios = {"compare / floor2": medians["compare"] / medians["floor2"],
              "fp_compare / floor1": medians["fp_compare"] / medians["floor1"]}
    reference = {"inspect / floor1": medians["inspect"] / medians["floor1"],
                 "fp_compare / inspect": medians["fp_compare"] / medians["inspect"]}
    verdicts = {k: {"value": v, "target": TARGETS[k], "pass": v <= TARGETS[k]} for k, v in ratios.items()}
    _log("\nmedian wall seconds: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()))
    for k, v in verdicts.items():
        _log(f"{k:<22} {v['value']:.2f}  (target <= {v['target']})  {'PASS' if v['pass'] else 'FAIL'}")
    for k, v in reference.items():
        _log(f"{k:<22} {v:.2f}  (reference)")
    result = {"benchmark": "compare", "layers": args.layers, "repeats": args.repeats,
              "elapsed_s": round(time.perf_counter() - t0, 1), "machine": {**machine, "load_average_end": load_average()},
              "models": {s.name: {"dir": str(d), "seed": s.seed, "dtype": s.dtype, "config": s.config}
                         for s, d in zip((spec_a, spec_b), dirs)},
              "fingerprint_bytes": fp.stat().st_size, "medians_s": medians, "targets": verdicts, "reference": reference, "samples": samples}
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{machine['date_utc'].replace(':', '').replace('-', '')}-compare-{'' if args.size == '1b' else args.size + '-'}{args.layers}l.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        _log(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    for f in scratch.iterdir():
        f.unlink()
    scratch.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
