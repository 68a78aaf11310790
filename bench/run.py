"""``python -m bench.run [--quick] [--repeats N] [--device cpu|cuda]``: the benchmark of issue 7.

Builds (or reuses) the synthetic checkpoints, warms the page cache, then runs every measurement in
its own child process, alternating them within each repeat (floor, inspect, copy, export,
baseline for each model in turn) so that drifting machine load hits all of them alike. Prints the
times, the ratios and the targets, and writes everything as JSON under ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from . import report, workloads
from .build import ensure_checkpoint_in_child
from .machine import describe, load_average
from .measure import own_peak_rss_bytes
from .specs import FULL, QUICK, SCALE, ModelSpec, by_role

RESULTS = Path(__file__).resolve().parent / "results"
MEASURES = ("floor", "inspect", "copy", "cpr", "export", "baseline")


def measures_for(spec: ModelSpec, skip: set[str]) -> list[str]:
    """Which measurements a model gets: the large RSS model, the non-Llama case and the scale set's
    slope and 70B models only floor and inspect; the scale set's main 8B model no safetensors copy
    and no baseline."""
    if spec.role in ("rss-large", "case", "case-large", "scale-slope", "scale-wide"):
        wanted: tuple[str, ...] = ("floor", "inspect")
    elif spec.role == "scale":
        wanted = ("floor", "inspect", "cpr", "export")
    else:
        wanted = MEASURES
    return [m for m in wanted if m not in skip]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="development mode: Llama-1B widths with 2 and 4 layers, GPT-2-small, BERT-base")
    p.add_argument("--scale", action="store_true",
                   help="issue 20: Llama-3.1-8B shapes (2 and 8 layers) and a Llama-3.1-70B shape (2 layers), "
                        "full width, bf16 (~16 GB cached); 32- and 80-layer times extrapolated")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (default 5, quick 3)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="passed to idinspect inspect --device and used by the baseline's SVDs")
    p.add_argument("--models", nargs="*", default=None, help="subset of model names")
    p.add_argument("--skip", nargs="*", default=[], choices=MEASURES, help="measurements to leave out")
    p.add_argument("--threads", type=int, default=None,
                   help="set OMP_NUM_THREADS/MKL_NUM_THREADS for every child (default: torch's own choice)")
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/*.json")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 5
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    return args


def _log(msg: str) -> None:
    print(msg, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = SCALE if args.scale else QUICK if args.quick else FULL
    specs = base
    if args.models:
        specs = tuple(s for s in specs if s.name in args.models)
        if not specs:
            _log(f"no such models; choose from {[s.name for s in base]}")
            return 2
    if args.threads is not None:   # children inherit it; torch reads it at import
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    machine = describe()
    machine["omp_num_threads_env"] = os.environ.get("OMP_NUM_THREADS")
    gpu_note = None
    if args.device == "cuda" and not machine["gpu"]["available"]:
        gpu_note = ("--device cuda requested but torch sees no GPU on this machine: the device is still passed "
                    "through (exercising the CPU fallback), so every number below is a CPU number; GPU not measured")
        _log("warning: " + gpu_note)
    caps = workloads.probe_cli()
    for note in caps.notes:
        _log("note: " + note)
    skip = set(args.skip) | ({"export"} if not caps.export else set()) | ({"inspect"} if not caps.inspect else set())

    dirs = {s.name: ensure_checkpoint_in_child(s, log=_log) for s in specs}
    scratch = Path(tempfile.mkdtemp(prefix="idinspect-bench-"))
    names_files = {}
    for s in specs:
        names_files[s.name] = scratch / f"{s.name}.names.json"
        names_files[s.name].write_text(json.dumps(workloads.attention_names(dirs[s.name])))
    _log(f"warming the page cache ({sum(workloads.warm_page_cache(d) for d in dirs.values()) / 1e9:.1f} GB read)")
    for s in specs:   # one untimed run each: fail early, and warm the imports' file cache
        if "inspect" not in skip:
            warm = workloads.inspect(dirs[s.name], args.device, caps)
            if not warm["ok"]:
                _log(f"warning: {s.name}: inspect failed in the warm-up: {warm['error']}")

    samples: dict[str, dict[str, list[dict]]] = {s.name: {m: [] for m in measures_for(s, skip)} for s in specs}
    t_start = time.perf_counter()
    for rep in range(args.repeats):
        for s in specs:
            for m in measures_for(s, skip):
                d = dirs[s.name]
                if m == "floor":
                    sample = workloads.floor(d, names_files[s.name])
                elif m == "inspect":
                    sample = workloads.inspect(d, args.device, caps)
                elif m == "copy":
                    sample = workloads.copy(s, d)
                elif m == "cpr":
                    sample = workloads.copy_tree(s, d)
                elif m == "export":
                    sample = workloads.export(s, d)
                else:
                    sample = workloads.baseline(s, d, args.device)
                samples[s.name][m].append(sample)
                status = f"{sample['wall_s']:8.3f} s  {sample['max_rss_bytes'] / 1e9:6.3f} GB" if sample["ok"] else \
                    f"FAILED: {(sample['error'] or '')[:200]}"
                _log(f"[{rep + 1}/{args.repeats}] {s.name:<14} {m:<9} {status}")
    elapsed = time.perf_counter() - t_start

    stats = {name: {m: report.summarize(v) for m, v in per.items()} for name, per in samples.items()}
    main_spec, large = by_role(specs, "scale" if args.scale else "main"), by_role(specs, "rss-large")
    small = by_role(specs, "rss-small")
    case_small, case_large = by_role(specs, "case"), by_role(specs, "case-large")
    values = report.target_values(stats, main_spec.name if main_spec else None,
                                  small.name if small else None, large.name if large else None,
                                  case_small.name if case_small else None, case_large.name if case_large else None)
    verdicts = report.judge(values)
    _log("\nmedian wall seconds per child process (baseline: extrapolated to all layers), peak RSS (max over repeats)")
    _log(report.format_times(stats))
    _log("\nratios per model (targets are judged on " + (main_spec.name if main_spec else "-") + ")")
    _log(report.format_ratios(stats))
    _log(f"\ntargets (RSS pair: {small.name if small else '-'} vs {large.name if large else '-'}; non-Llama case: "
         f"{case_small.name if case_small else '-'} vs {case_large.name if case_large else '-'})")
    _log(report.format_targets(verdicts))
    scale = report.scale_extrapolation(stats) if args.scale else None
    if scale:
        _log("\nextrapolated to full depth (per-layer slope from the 8B 2- and 8-layer runs; see bench/report.py)")
        _log(report.format_scale(scale))

    machine["load_average_end"] = load_average()
    machine["harness_peak_rss_bytes"] = own_peak_rss_bytes()
    _log(f"\nharness peak RSS {machine['harness_peak_rss_bytes'] / 1e6:.0f} MB (no child can report less; "
         "a peak at or below it is shown as '-')")
    result = {
        "mode": "scale" if args.scale else "quick" if args.quick else "full", "device": args.device, "gpu_measured": bool(
            args.device == "cuda" and machine["gpu"]["available"]), "gpu_note": gpu_note,
        "repeats": args.repeats, "elapsed_s": round(elapsed, 1), "machine": machine,
        "capabilities": {"inspect": caps.inspect, "inspect_device": caps.inspect_device, "export": caps.export,
                         "notes": caps.notes},
        "models": {s.name: {"dir": str(dirs[s.name]), "layers": s.layers, "dtype": s.dtype, "role": s.role,
                            "config": s.config} for s in specs},
        "targets_judged_on": {"time_ratios": main_spec.name if main_spec else None,
                              "rss_small": small.name if small else None, "rss_large": large.name if large else None,
                              "case_small": case_small.name if case_small else None,
                              "case_large": case_large.name if case_large else None},
        "targets": verdicts, "scale": scale, "ratios": {name: report.model_ratios(stats, name) for name in stats},
        "stats": stats, "samples": samples,
    }
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        stamp = machine["date_utc"].replace(":", "").replace("-", "")
        threads = f"-t{args.threads}" if args.threads is not None else ""
        mode = "scale" if args.scale else result["mode"]
        path = RESULTS / f"{stamp}-{mode}-{args.device}{threads}.json"
        path.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
        _log(f"\nwrote {path.relative_to(RESULTS.parent.parent)}")
    for f in scratch.iterdir():
        f.unlink()
    scratch.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
