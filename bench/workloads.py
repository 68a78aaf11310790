"""The six measurements, each one child process, each returning a sample dict.

A sample is ``{"ok", "wall_s", "user_s", "sys_s", "max_rss_bytes", "detail", "error"}``; wall time
is the whole child process (interpreter start and imports included) as the user would see it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .measure import ChildResult, idinspect_argv, run_child, run_task_checked, task_argv
from .specs import ModelSpec

OUT = Path(__file__).resolve().parent / "cache" / "out"
TIMEOUT_S = 3600.0


@dataclass
class Capabilities:
    """What the installed idinspect CLI can do right now (others may still be building it)."""

    inspect: bool = False
    inspect_device: bool = False
    export: bool = False
    notes: list[str] = field(default_factory=list)


def probe_cli() -> Capabilities:
    """Ask ``idinspect inspect --help`` / ``idinspect export --help`` what exists."""
    caps = Capabilities()
    res = run_child(idinspect_argv("inspect", "--help"), timeout_s=120)
    caps.inspect = res.ok
    caps.inspect_device = res.ok and "--device" in res.stdout
    if not caps.inspect_device:
        caps.notes.append("idinspect inspect has no --device option: device not passed through")
    res = run_child(idinspect_argv("export", "--help"), timeout_s=120)
    # Without an export command the group routes "export" to inspect: look for export's own usage line.
    caps.export = res.ok and "idinspect export" in res.stdout
    if not caps.export:
        caps.notes.append("idinspect export is not available: export not measured")
    return caps


def _sample(res: ChildResult, detail: dict | None = None, error: str | None = None) -> dict:
    ok = res.ok and error is None
    if not res.ok and error is None:
        error = f"exit {res.returncode}: {res.stderr.strip()[-1500:]}"
    return {"ok": ok, "wall_s": res.wall_s, "user_s": res.user_s, "sys_s": res.sys_s,
            "max_rss_bytes": res.max_rss_bytes, "rss_floor_bytes": res.rss_floor_bytes, "load_1min": res.load_1min,
            "detail": detail or {}, "error": error}


def attention_names(directory: Path) -> list[str]:
    """Every tensor idinspect reads for attention, in layer order (from its own adapter, in a child
    process so that the harness does not import torch: see :mod:`bench.measure`)."""
    return run_task_checked(["names", str(directory)])["names"]


def floor(directory: Path, names_file: Path) -> dict:
    """(a) read exactly the attention tensors with safetensors, cast to float32."""
    res = run_child(task_argv("floor", str(directory), str(names_file)), timeout_s=TIMEOUT_S)
    return _sample(res, res.task_result() if res.ok else None)


def inspect(directory: Path, device: str, caps: Capabilities) -> dict:
    """(b)/(c) ``idinspect MODEL --format json`` end to end; checks the JSON and its spectra."""
    argv = idinspect_argv(str(directory), "--format", "json")
    if caps.inspect_device:
        argv += ["--device", device]
    res = run_child(argv, timeout_s=TIMEOUT_S)
    if not res.ok:
        return _sample(res)
    try:
        report = json.loads(res.stdout)
    except json.JSONDecodeError as exc:
        return _sample(res, error=f"stdout is not JSON: {exc}")
    layers = report.get("layers") or []
    detail = {"json_bytes": len(res.stdout), "keys": sorted(report), "layers": len(layers),
              "spectra": bool(layers) and all("spectra" in layer for layer in layers),
              "findings": len(report.get("findings") or []), "stderr_tail": res.stderr.strip()[-300:]}
    return _sample(res, detail)


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    for pattern in (path.name + "*", "." + path.name + "*"):   # temporary names beside OUT
        for stale in path.parent.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _written_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def copy(spec: ModelSpec, directory: Path) -> dict:
    """(d) plain copy of the whole checkpoint through safetensors."""
    out = _fresh(OUT / f"{spec.name}-copy")
    res = run_child(task_argv("copy", str(directory), str(out)), timeout_s=TIMEOUT_S)
    detail = res.task_result() if res.ok else None
    if detail is not None:
        detail["written_bytes"] = _written_bytes(out)
    shutil.rmtree(out, ignore_errors=True)
    return _sample(res, detail)


def copy_tree(spec: ModelSpec, directory: Path) -> dict:
    """(d') ``cp -r`` of the checkpoint folder: the kernel's own copy, the floor of export (issue 20)."""
    out = _fresh(OUT / f"{spec.name}-cpr")
    res = run_child(["cp", "-r", str(directory), str(out)], timeout_s=TIMEOUT_S)
    detail = {"written_bytes": _written_bytes(out)}
    shutil.rmtree(out, ignore_errors=True)
    return _sample(res, detail)


def export(spec: ModelSpec, directory: Path) -> dict:
    """(e) ``idinspect export MODEL OUT``."""
    out = _fresh(OUT / f"{spec.name}-export")
    res = run_child(idinspect_argv("export", str(directory), str(out)), timeout_s=TIMEOUT_S)
    detail = {"written_bytes": _written_bytes(out), "stderr_tail": res.stderr.strip()[-300:]}
    error = None if not res.ok or out.is_dir() else "export exited 0 but wrote no OUT directory"
    shutil.rmtree(out, ignore_errors=True)
    return _sample(res, detail, error)


def baseline(spec: ModelSpec, directory: Path, device: str) -> dict:
    """(f) from_pretrained + a full float64 SVD of every head's d x d W_QK, one layer, extrapolated.

    Extrapolated time = the process wall without the other variant's layer (start, imports, load,
    one layer) + (layers - 1) x that layer's SVD time: loading is counted once. The same for the
    float32 svdvals variant (``extrapolated_f32_svdvals_s``, informational).
    """
    res = run_child(task_argv("baseline", str(directory), spec.model_class, device), timeout_s=TIMEOUT_S)
    if not res.ok:
        return _sample(res)
    detail = res.task_result()
    full, values, rest = detail["layer_s"], detail["layer_f32_svdvals_s"], detail["layers"] - 1
    detail["extrapolated_s"] = res.wall_s - values + rest * full
    detail["extrapolated_f32_svdvals_s"] = res.wall_s - full + rest * values
    return _sample(res, detail)


def warm_page_cache(directory: Path, chunk: int = 1 << 24) -> int:
    """Read every file once so that all measurements start from a warm page cache (through one
    reused buffer, so the harness's own RSS stays small)."""
    total = 0
    buf = bytearray(chunk)
    for path in sorted(directory.iterdir()):
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total
