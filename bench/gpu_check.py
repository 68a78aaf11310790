"""``python -m bench.gpu_check [--repeats N] [--layers N]``: the GPU check of issue 20, one short run.

Meant for a machine with a CUDA GPU (it runs on any machine; without one, ``--device cuda`` falls
back to the CPU and the script says so). Builds a Llama-3.1-8B-shaped bf16 checkpoint (full width,
``--layers`` decoder layers, default 8) on the machine's own disk (``bench/cache``), then, each in
its own child process and alternating within each repeat: the attention-read floor, ``idinspect
MODEL --device cpu``, ``idinspect MODEL --device cuda``, ``cp -r`` of the folder and ``idinspect
export`` (export has no device option: its gauge work runs on the CPU). Prints medians and the
ratios inspect(cuda) / floor, inspect(cpu) / floor, inspect(cpu) / inspect(cuda), export / cp -r,
and writes them as JSON to ``--out`` (default ``bench/results``). Under five minutes on a 16-core
H200 machine with the default sizes (the build is about a minute of it).

On the device machine (no network; its python3 holds torch, transformers, safetensors, click,
rich and accelerate)::

    python3 -m pip install -q --no-deps --no-build-isolation -e . && \\
    PYTHONUNBUFFERED=1 python3 -m bench.gpu_check --out $OUT
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
from .build import ensure_checkpoint
from .machine import describe, load_average
from .specs import llama_at_scale

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--layers", type=int, default=8, help="decoder layers of the 8B shape (32 is the real depth)")
    p.add_argument("--no-export", action="store_true", help="leave out cp -r and export")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    spec = llama_at_scale("8b", args.layers, "scale")
    directory = ensure_checkpoint(spec, log=lambda m: print(m, flush=True))
    print(f"checkpoint ready after {time.perf_counter() - t0:.0f} s", flush=True)
    caps = workloads.probe_cli()
    names = Path(tempfile.mkdtemp(prefix="idinspect-gpu-")) / "names.json"
    names.write_text(json.dumps(workloads.attention_names(directory)))
    workloads.warm_page_cache(directory)
    runs = {
        "floor": lambda: workloads.floor(directory, names),
        "inspect_cpu": lambda: workloads.inspect(directory, "cpu", caps),
        "inspect_cuda": lambda: workloads.inspect(directory, "cuda", caps),
    }
    if not args.no_export:
        runs["cpr"] = lambda: workloads.copy_tree(spec, directory)
        runs["export"] = lambda: workloads.export(spec, directory)
    runs["inspect_cuda"]()                       # warm-up: CUDA context, kernels, file cache
    samples: dict[str, list[dict]] = {k: [] for k in runs}
    for rep in range(args.repeats):
        for key, run in runs.items():
            s = run()
            samples[key].append(s)
            status = f"{s['wall_s']:8.2f} s" if s["ok"] else f"FAILED {(s['error'] or '')[:300]}"
            print(f"[{rep + 1}/{args.repeats}] {key:<13} {status}", flush=True)
    med = {k: statistics.median([s["wall_s"] for s in v if s["ok"]]) if any(s["ok"] for s in v) else None
           for k, v in samples.items()}

    def ratio(a: str, b: str) -> float | None:
        return med[a] / med[b] if med.get(a) and med.get(b) else None

    ratios = {"inspect_cuda_over_floor": ratio("inspect_cuda", "floor"),
              "inspect_cpu_over_floor": ratio("inspect_cpu", "floor"),
              "inspect_cpu_over_cuda": ratio("inspect_cpu", "inspect_cuda"),
              "export_over_cpr": ratio("export", "cpr")}
    machine = describe()
    stderr = (samples["inspect_cuda"][-1].get("detail") or {}).get("stderr_tail", "")
    if not machine["gpu"]["available"] or "using cpu" in stderr:
        print("warning: torch sees no GPU here: 'cuda' fell back to the CPU; no GPU figure was measured", flush=True)
    for k, v in med.items():
        print(f"median {k:<13} {v if v is None else round(v, 2)} s")
    for k, v in ratios.items():
        print(f"{k:<26} {v if v is None else round(v, 2)}")
    result = {"spec": spec.name, "layers": args.layers, "repeats": args.repeats, "machine": machine,
              "load_average_end": load_average(), "medians_s": med, "ratios": ratios, "samples": samples,
              "elapsed_s": round(time.perf_counter() - t0, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{machine['date_utc'].replace(':', '').replace('-', '')}-gpu-check.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path} ({result['elapsed_s']} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
