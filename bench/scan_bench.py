"""``python -m bench.scan_bench [--entries 300] [--repeats 3]``: compact fingerprint size and ``scan`` speed (issue 36).

On the Llama-3.2-1B-shaped bf16 checkpoint of 16 layers (the bench cache's ``llama-1b-16l``, or
``--model DIR``):

- the sizes of ``idinspect fingerprint MODEL`` and ``fingerprint MODEL --compact`` (target <= 64 kB);
- a JSONL database of ``--entries`` compact fingerprints: the model's own and ``entries - 1`` synthetic
  ones of the same structure (random descending spectra at the model's scale, legal radii; every one
  passes the reader's checks), the model's placed in the middle;
- timed, each in its own process and alternating within each repeat: ``floor1`` (reading the model's
  attention tensors with safetensors, :mod:`bench.tasks`) and ``idinspect scan MODEL DB --format json``.
  Target: scan <= 1.2 floor1 + a few seconds (medians of whole-process wall times).

Result: ``bench/results/<stamp>-scan.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from . import workloads
from .machine import describe, load_average
from .measure import idinspect_argv, run_child, task_argv

RESULTS = Path(__file__).resolve().parent / "results"


def default_model() -> Path:
    """The bench cache's 16-layer Llama-3.2-1B-shaped checkpoint (built by :mod:`bench.build` if missing)."""
    from .build import ensure_checkpoint_in_child
    from .specs import FULL

    return ensure_checkpoint_in_child(next(s for s in FULL if s.name == "llama-1b-16l"))


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def synthetic_entries(model_dir: Path, n: int, seed: int = 0) -> list[str]:
    """``n`` compact fingerprints (JSON text, one line each) of the model's structure with random spectra."""
    from idinspect.compare import invariants_of
    from idinspect.compare.fingerprint import COMPACT_VALUES, fingerprint_json

    inv = invariants_of(str(model_dir))
    gen = torch.Generator().manual_seed(seed)
    u = inv.unit_roundoff

    def radius(s: torch.Tensor) -> torch.Tensor:        # legal: between u ||s|| and the format's upper end
        return 8 * u * torch.linalg.vector_norm(s, dim=-1)

    out = []
    for e in range(n):
        layers = []
        for L in inv.layers:
            def spectrum(ref: torch.Tensor) -> torch.Tensor:
                scale = float(ref.mean())
                x = scale * torch.rand(ref.shape, generator=gen, dtype=torch.float64) * 2
                return x.sort(dim=-1, descending=True).values
            qk, ov = spectrum(L.qk), spectrum(L.ov)
            layers.append(type(L)(L.index, qk, ov, None, radius(qk), radius(ov), None, L.finite.clone(),
                                  dict(L.structure)))
        fake = type(inv)(source=f"synthetic-{e:04d}", model={}, dtype=inv.dtype, unit_roundoff=inv.unit_roundoff,
                         gains_folded=inv.gains_folded, layers=layers)
        out.append(fingerprint_json(fake, compact=COMPACT_VALUES).strip())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scan_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint folder (default: the bench cache's llama-1b-16l)")
    p.add_argument("--entries", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    model = Path(args.model) if args.model else default_model()
    machine = describe()
    scratch = Path(tempfile.mkdtemp(prefix="idinspect-scan-bench-"))
    names = scratch / "names.json"
    names.write_text(json.dumps(workloads.attention_names(model)))
    sizes = {}
    for label, extra in (("full", []), ("compact", ["--compact"])):
        out = scratch / f"{label}.json"
        res = run_child(idinspect_argv("fingerprint", str(model), "-o", str(out), *extra))
        if not res.ok:
            _log(f"fingerprint {label} failed: {res.stderr[-2000:]}")
            return 1
        sizes[label] = out.stat().st_size
        _log(f"fingerprint {label}: {sizes[label]:,} bytes")
    own = json.dumps(json.loads((scratch / "compact.json").read_text()), separators=(",", ":"))
    lines = synthetic_entries(model, args.entries - 1)
    lines.insert(len(lines) // 2, own)
    db = scratch / "db.jsonl"
    db.write_text("\n".join(lines) + "\n")
    _log(f"database: {len(lines)} entries, {db.stat().st_size / 1e6:.1f} MB")
    _log(f"warming the page cache ({workloads.warm_page_cache(model) / 1e9:.1f} GB read)")
    commands = {"floor1": task_argv("floor", str(model), str(names)),
                "scan": idinspect_argv("scan", str(model), str(db), "--format", "json")}
    samples: dict[str, list[dict]] = {k: [] for k in commands}
    detail = None
    for rep in range(args.repeats + 1):                        # the first round is a warm-up, untimed
        for name, argv_ in commands.items():
            res = run_child(argv_)
            if name == "scan" and res.returncode in (0, 1) and res.stdout:
                rows = json.loads(res.stdout)["matches"]
                detail = {"entries": len(rows), "top": rows[0], "second": rows[1] if len(rows) > 1 else None}
                res.returncode = 0
            if not res.ok:
                _log(f"{name} failed: {res.stderr[-2000:]}")
                return 1
            if rep:
                samples[name].append({"wall_s": res.wall_s, "max_rss_bytes": res.max_rss_bytes})
                _log(f"[{rep}/{args.repeats}] {name:<7} {res.wall_s:7.3f} s")
    med = {k: statistics.median(s["wall_s"] for s in v) for k, v in samples.items()}
    excess = med["scan"] - 1.2 * med["floor1"]
    _log(f"median: floor1 {med['floor1']:.2f} s, scan {med['scan']:.2f} s: scan / floor1 {med['scan'] / med['floor1']:.2f}, "
         f"scan - 1.2 floor1 = {excess:+.2f} s; top: {detail['top']['entry']} {detail['top']['verdict']}")
    result = {"benchmark": "scan", "model": str(model), "machine": {**machine, "load_average_end": load_average()},
              "fingerprint_bytes": sizes, "entries": len(lines), "database_bytes": db.stat().st_size,
              "medians_s": med, "scan_over_floor1": med["scan"] / med["floor1"], "scan_minus_1_2_floor1_s": excess,
              "detail": detail, "samples": samples}
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        (RESULTS / f"{stamp}-scan.json").write_text(json.dumps(result, indent=1) + "\n")
    for f in scratch.iterdir():
        f.unlink()
    scratch.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
