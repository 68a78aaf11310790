"""The audit's own rules, each behind one small function returning analyzer-style findings.

``identification_ratio`` reads the analyzer's ``totals``; ``gauge_fixed`` asks
:func:`idinspect.gauge.is_gauge_fixed`; ``unsupported_architecture`` turns a refusal of the
mathematics (an unknown model_type, an unmodelled layer feature) into a finding, because such a
model was readable: it is a result, not an error of the tool.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import IdinspectError
from ..rules import default_severity
from ..sources.file_names import CONFIG_FILE


def identification_ratio(report: dict, max_ratio: float) -> list[dict]:
    """A finding when ``totals.identification_ratio`` (U / P) exceeds ``max_ratio``."""
    totals = report.get("totals") or {}
    ratio = totals.get("identification_ratio")
    if not isinstance(ratio, (int, float)):
        raise IdinspectError("--max-unidentified-ratio needs totals.identification_ratio, which this "
                             "inspection did not report")
    if ratio <= max_ratio:
        return []
    unidentified = totals.get("unidentified_parameters")
    total = totals.get("attention_parameters")
    counts = ""
    if isinstance(unidentified, int) and isinstance(total, int):
        counts = f" ({unidentified:,} of {total:,} attention parameters)"
    return [{"rule": "identification-ratio", "severity": default_severity("identification-ratio"),
             "layer": None, "tensor": None,
             "parameters": unidentified, "ratio": ratio, "limit": max_ratio,
             "message": f"unidentified share {ratio:.4f}{counts} exceeds the limit {max_ratio:g}"}]


def gauge_fixed(model, rtol: float | None) -> list[dict]:
    """A ``not-gauge-fixed`` finding when the checkpoint differs from its canonical form beyond ``rtol``."""
    try:
        from ..forms import is_gauge_fixed
    except ImportError:
        raise IdinspectError("--require-gauge-fixed needs idinspect.forms, which this installation lacks") from None
    ok, worst, where = is_gauge_fixed(model, rtol)  # rtol None: the gauge's default for the stored dtype
    if ok:
        return []
    tol = f" (rtol {rtol:g})" if rtol is not None else ""
    match = re.match(r"layer (\d+)\b", where or "")
    layer = int(match.group(1)) if match else None
    tensors: list[str] = []
    if layer is not None and 0 <= layer < model.num_layers:
        from ..forms.per_head.findings import stored_tensors

        read = model.layer(layer)
        tensors = stored_tensors(read, ("W_O",) if "W_O" in read.tensor_names else tuple(read.tensor_names)[:1])
    return [{"rule": "not-gauge-fixed", "severity": default_severity("not-gauge-fixed"),
             "layer": layer, "tensor": None, "where": where,
             "tensors": tensors, "error": float(worst),
             "message": f"not in gauge-fixed canonical form: largest relative change {float(worst):.3g} at {where}{tol}; "
                        "publish the output of `idinspect export` instead"}]


def unsupported_architecture(message: str, layer: int | None = None) -> list[dict]:
    """The finding for a readable model that the mathematics does not cover."""
    return [{"rule": "unsupported-architecture", "severity": default_severity("unsupported-architecture"),
             "layer": layer, "tensor": None, "file": CONFIG_FILE, "message": message}]


def unsupported_model_type(directory: Path | None) -> str | None:
    """If ``directory`` holds a readable config.json whose model_type no adapter handles, say so.

    Used only after loading failed, to tell "not supported" (a finding) from "not readable" (an error).
    """
    from ..adapters import supported_model_types
    from ..errors import IdinspectError
    from ..sources.regular_file import read_regular

    if directory is None:
        return None
    cfg = Path(directory) / CONFIG_FILE
    try:
        raw = json.loads(read_regular(cfg).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, IdinspectError):
        return None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not isinstance(model_type, str) or model_type in supported_model_types():
        return None
    return (f"model_type {model_type!r} is not supported (supported: {', '.join(supported_model_types())}); "
            "nothing about its identification can be certified")


def local_directory(source: str, cache_dir: str | Path | None = None) -> Path | None:
    """The directory a source names without downloading: a path, ``pkg:...``, or a cached hub snapshot."""
    from ..model import package_checkpoint
    from ..sources.hub import HUB_ID, INSPECT_PATTERNS, looks_like_path, split_revision

    try:
        if source.startswith("pkg:"):
            return package_checkpoint(source)
        if looks_like_path(source):
            path = Path(source).expanduser()
            return path if path.is_dir() else None
        repo_id, rev = split_revision(source)
        if not HUB_ID.match(repo_id):
            return None
        import huggingface_hub as hf

        return Path(hf.snapshot_download(repo_id, revision=rev, allow_patterns=INSPECT_PATTERNS, cache_dir=cache_dir,
                                         local_files_only=True))
    except Exception:  # noqa: BLE001 - only a hint: None means "cannot tell", and the load error stands
        return None


__all__ = ["gauge_fixed", "identification_ratio", "local_directory", "unsupported_architecture",
           "unsupported_model_type"]
