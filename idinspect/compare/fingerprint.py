"""The fingerprint: a model's invariants as compact, versioned JSON, enough for ``compare``.

Format ``idinspect-fingerprint`` version 1 (keys only ever added within a version)::

    {"format": "idinspect-fingerprint", "version": 1, "tool": "idinspect X.Y.Z",
     "source", "revision", "model": {...}, "dtype", "unit_roundoff", "gains_folded",
     "encoding": "base64 float32 little-endian, row-major",
     "layers": [{"index", "structure": {...}, "qk": [H, d_k], "ov": [H, d_v], "planes": [H, P, 2] | null,
                 "radius_qk": [H], "radius_ov": [H], "radius_planes": [H, P] | null,
                 "nonfinite_heads": [h, ...]}]}

Arrays are float32 (each value's relative rounding 2^-24 is added to the comparison tolerance;
radii are rounded up, so a bound stays a bound). Llama-3.2-1B: ~0.4 MB; all-MiniLM-L6-v2: ~25 kB.

The digest (:func:`fingerprint_digest`, ``idinspect fingerprint --digest``, the ``fingerprint``
column of ``idinspect survey --fingerprint``) is ``sha256:`` + the SHA-256 of the canonical JSON
(sorted keys, no spaces) of :data:`DIGEST_KEYS`: the invariants and how they are encoded, not where
the model was read from (source, revision, file name) nor which idinspect wrote them. Two copies of
one checkpoint have one digest; a fingerprint file read back has its model's digest.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ..errors import IdinspectError
from .invariants import LayerInvariants, ModelInvariants

FORMAT = "idinspect-fingerprint"
VERSION = 1
ENCODING = "base64 float32 little-endian, row-major"
#: Relative rounding of a float32-stored invariant.
FLOAT32_RTOL = 2.0 ** -24


def fingerprint_dict(inv: ModelInvariants, revision: str | None = None) -> dict:
    """The fingerprint of computed invariants (deterministic: no timestamp)."""
    from .. import __version__

    layers = []
    for L in inv.layers:
        layers.append({
            "index": L.index, "structure": L.structure,
            "qk": _enc(L.qk), "ov": _enc(L.ov), "planes": None if L.planes is None else _enc(L.planes),
            "radius_qk": _enc(L.radius_qk, up=True), "radius_ov": _enc(L.radius_ov, up=True),
            "radius_planes": None if L.radius_planes is None else _enc(L.radius_planes, up=True),
            "nonfinite_heads": [int(h) for h in (~L.finite).nonzero().flatten().tolist()],
        })
    return {"format": FORMAT, "version": VERSION, "tool": f"idinspect {__version__}", "source": inv.source,
            "revision": revision, "model": inv.model, "dtype": inv.dtype, "unit_roundoff": inv.unit_roundoff,
            "gains_folded": inv.gains_folded, "encoding": ENCODING, "layers": layers}


#: The fingerprint's keys that its digest covers (what the model computes, not where it came from).
DIGEST_KEYS = ("format", "version", "dtype", "unit_roundoff", "gains_folded", "encoding", "layers")


def fingerprint_digest(fp: dict) -> str:
    """``sha256:<64 hex>`` over the canonical JSON of ``fp``'s :data:`DIGEST_KEYS` (see the module doc)."""
    content = {key: fp.get(key) for key in DIGEST_KEYS}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def fingerprint_json(inv: ModelInvariants, revision: str | None = None) -> str:
    return json.dumps(fingerprint_dict(inv, revision), indent=1) + "\n"


def is_fingerprint_file(source) -> bool:
    """A path to a JSON file (that ``compare`` reads as a fingerprint rather than a checkpoint)."""
    if not isinstance(source, (str, Path)):
        return False
    p = Path(str(source)).expanduser()
    return p.suffix.lower() == ".json" and p.is_file()


def read_fingerprint(path: str | Path) -> ModelInvariants:
    """Parse a fingerprint file; IdinspectError naming the file and the problem if it is not one."""
    p = Path(path).expanduser()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IdinspectError(f"{p}: not a readable JSON fingerprint ({exc}); write one with 'idinspect fingerprint MODEL -o FILE'")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise IdinspectError(f"{p}: not an idinspect fingerprint (no \"format\": \"{FORMAT}\"); "
                             "write one with 'idinspect fingerprint MODEL -o FILE'")
    if data.get("version") != VERSION:
        raise IdinspectError(f"{p}: fingerprint version {data.get('version')!r} is not supported (this idinspect "
                             f"reads version {VERSION}); rewrite it with this idinspect's 'fingerprint'")
    try:
        layers = [_layer(entry) for entry in data["layers"]]
        return ModelInvariants(source=str(data.get("source") or p), model=dict(data.get("model") or {}),
                               dtype=str(data["dtype"]), unit_roundoff=float(data["unit_roundoff"]),
                               gains_folded=bool(data["gains_folded"]), layers=layers,
                               value_rtol=FLOAT32_RTOL, origin=f"fingerprint {p.name}")
    except (KeyError, TypeError, ValueError) as exc:
        raise IdinspectError(f"{p}: malformed fingerprint ({type(exc).__name__}: {exc}); rewrite it with "
                             "'idinspect fingerprint MODEL -o FILE'")


def _layer(entry: dict) -> LayerInvariants:
    s = entry["structure"]
    H, dk, dv = int(s["heads"]), int(s["d_k"]), int(s["d_v"])
    P = int(s.get("rotary_dim") or 0) // 2
    planes = None if entry.get("planes") is None else _dec(entry["planes"], (H, P, 2))
    rp = None if entry.get("radius_planes") is None else _dec(entry["radius_planes"], (H, P))
    finite = torch.ones(H, dtype=torch.bool)
    for h in entry.get("nonfinite_heads") or []:
        finite[int(h)] = False
    return LayerInvariants(index=int(entry["index"]), qk=_dec(entry["qk"], (H, dk)), ov=_dec(entry["ov"], (H, dv)),
                           planes=planes, radius_qk=_dec(entry["radius_qk"], (H,)), radius_ov=_dec(entry["radius_ov"], (H,)),
                           radius_planes=rp, finite=finite, structure=dict(s))


def _enc(t: torch.Tensor, up: bool = False) -> str:
    a = t.detach().to(torch.float64).cpu().numpy()
    f = a.astype("<f4")
    if up:                                              # round radii up: a bound stays a bound
        low = f.astype(np.float64) < a
        f[low] = np.nextafter(f[low], np.float32(np.inf))
    return base64.b64encode(np.ascontiguousarray(f).tobytes()).decode("ascii")


def _dec(text: str, shape: tuple[int, ...]) -> torch.Tensor:
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    a = np.frombuffer(raw, dtype="<f4")
    n = int(np.prod(shape))
    if a.size != n:
        raise ValueError(f"array of {a.size} values where the structure implies {list(shape)}")
    return torch.from_numpy(a.astype(np.float64).reshape(shape))
