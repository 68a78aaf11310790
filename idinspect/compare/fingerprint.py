"""The fingerprint: a model's invariants as compact, versioned JSON, enough for ``compare``.

Format ``idinspect-fingerprint`` version 1 (keys only ever added within a version)::

    {"format": "idinspect-fingerprint", "version": 1, "tool": "idinspect X.Y.Z",
     "source", "revision", "model": {...}, "dtype", "unit_roundoff", "gains_folded",
     "encoding": "base64 float32 little-endian, row-major",
     "layers": [{"index", "structure": {...}, "qk": [H, d_k], "ov": [H, d_v], "planes": [H, P, 2] | null,
                 "radius_qk": [H], "radius_ov": [H], "radius_planes": [H, P] | null,
                 "nonfinite_heads": [h, ...]}],
     "mlp": {...} (only with ``fingerprint --whole-model``: :mod:`.fingerprint_mlp`),
     "integrity": "sha256:..."}

Arrays are float32 (each value's relative rounding 2^-24 is added to the comparison tolerance;
radii are rounded up, so a bound stays a bound, and capped at the top of the range the dtype allows,
:func:`.fingerprint_check.cap_radius`). Llama-3.2-1B: ~0.4 MB; all-MiniLM-L6-v2: ~25 kB.
The schema is ``idinspect/schemas/fingerprint.schema.json``; ``integrity`` is the SHA-256 of the
canonical JSON of every other key; what a reader checks before believing a figure is
:mod:`.fingerprint_check` (files without ``integrity``, written before it existed, are read).

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
from .fingerprint_check import (
    array_shapes,
    canonical_digest,
    cap_radius,
    check_declared_sizes,
    check_integrity,
    check_layers_figures,
    check_schema,
    compact_values,
    decode,
    read_document,
    unit_roundoff_of,
)
from .invariants import LayerInvariants, ModelInvariants

FORMAT = "idinspect-fingerprint"
VERSION = 1
ENCODING = "base64 float32 little-endian, row-major"
#: Relative rounding of a float32-stored invariant.
FLOAT32_RTOL = 2.0 ** -24


#: Values kept per head and form by ``fingerprint --compact`` (512 heads of a Llama-3.2-1B shape: ~48 kB).
COMPACT_VALUES = 8


def fingerprint_dict(inv: ModelInvariants, revision: str | None = None, compact: int | None = None) -> dict:
    """The fingerprint of computed invariants (deterministic: no timestamp), with its ``integrity``
    digest; radii above the format's range are recorded at its upper end (:func:`.fingerprint_check.cap_radius`).

    ``compact``: keep only each head's ``compact`` largest singular values of W_QK and W_OV and no
    RoPE planes (the radii are those of the full form: each bounds every value of its head) and the RoPE
    frequencies to 8 significant digits (structures agree to 1e-6), for a fingerprint of a few tens of kB;
    recorded as ``"compact": {"values": compact}``."""
    from .. import __version__

    u = unit_roundoff_of(inv.dtype)
    layers = []
    for L in inv.layers:
        qk, ov = L.qk, L.ov
        planes, radius_planes = L.planes, L.radius_planes
        if compact is not None:
            qk, ov, planes, radius_planes = qk[:, :compact], ov[:, :compact], None, None
        structure = L.structure
        if compact is not None and structure.get("inv_freq"):     # 8 significant digits (compare: rtol 1e-6)
            structure = {**structure, "inv_freq": [float(f"{x:.8g}") for x in structure["inv_freq"]]}
        layers.append({
            "index": L.index, "structure": structure,
            "qk": _enc(qk), "ov": _enc(ov), "planes": None if planes is None else _enc(planes),
            "radius_qk": _enc(cap_radius(L.radius_qk, qk, u, L.qk.shape[1]), up=True),
            "radius_ov": _enc(cap_radius(L.radius_ov, ov, u, L.ov.shape[1]), up=True),
            "radius_planes": None if radius_planes is None else _enc(cap_radius(radius_planes, planes, u), up=True),
            "nonfinite_heads": [int(h) for h in (~L.finite).nonzero().flatten().tolist()],
        })
    fp = {"format": FORMAT, "version": VERSION, "tool": f"idinspect {__version__}", "source": inv.source,
          "revision": revision, "model": inv.model, "dtype": inv.dtype, "unit_roundoff": inv.unit_roundoff,
          "gains_folded": inv.gains_folded, "encoding": ENCODING, "layers": layers}
    if compact is not None:
        fp["compact"] = {"values": int(compact)}
    if inv.mlp is not None:
        from .fingerprint_mlp import mlp_section

        fp["mlp"] = mlp_section(inv.mlp, inv.mlp_dtypes, _enc)
    try:
        fp = json.loads(json.dumps(fp, allow_nan=False))    # as a reader will see it (lists, not tuples)
    except ValueError:
        raise IdinspectError(f"{inv.source}: its structure holds a non-finite number (NaN or Inf), which a "
                             "fingerprint cannot record; fix the model's config") from None
    fp["integrity"] = canonical_digest(fp)
    return fp


#: The fingerprint's keys that its digest covers (what the model computes, not where it came from);
#: ``mlp`` too where present (absent, it is left out, so that attention-only digests never change).
DIGEST_KEYS = ("format", "version", "dtype", "unit_roundoff", "gains_folded", "encoding", "layers")


def fingerprint_digest(fp: dict) -> str:
    """``sha256:<64 hex>`` over the canonical JSON of ``fp``'s :data:`DIGEST_KEYS` (see the module doc)."""
    content = {key: fp.get(key) for key in DIGEST_KEYS}
    for key in ("mlp", "compact"):
        if fp.get(key) is not None:
            content[key] = fp[key]
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def fingerprint_json(inv: ModelInvariants, revision: str | None = None, compact: int | None = None) -> str:
    """The file's text: indented, or on one line without spaces for a compact fingerprint."""
    fp = fingerprint_dict(inv, revision, compact)
    if compact is not None:
        return json.dumps(fp, separators=(",", ":")) + "\n"
    return json.dumps(fp, indent=1) + "\n"


def is_fingerprint_file(source) -> bool:
    """A path to a JSON file (that ``compare`` reads as a fingerprint rather than a checkpoint)."""
    if not isinstance(source, (str, Path)):
        return False
    p = Path(str(source)).expanduser()
    return p.suffix.lower() == ".json" and p.is_file()


def read_fingerprint(path: str | Path) -> ModelInvariants:
    """Parse and check a fingerprint file (:mod:`.fingerprint_check`); IdinspectError naming the
    file and the problem if it is not one, is damaged, or claims figures its dtype cannot hold."""
    p = Path(path).expanduser()
    return fingerprint_from_document(p, read_document(p))


def fingerprint_from_document(p, data) -> ModelInvariants:
    """The checked invariants of a parsed fingerprint document (``p`` names it in errors: its file, or
    a database entry such as ``DB.jsonl line 7``)."""
    integrity = check_integrity(p, data) if isinstance(data, dict) else "absent"
    check_schema(p, data, VERSION)
    check_declared_sizes(p, data)
    if data["unit_roundoff"] != unit_roundoff_of(data["dtype"]):
        raise IdinspectError(f"{p}: unit_roundoff {data['unit_roundoff']!r} is not that of its dtype {data['dtype']} "
                             f"({unit_roundoff_of(data['dtype'])!r}); a fingerprint cannot claim another precision; "
                             "write it again with 'idinspect fingerprint MODEL -o FILE'")
    values = compact_values(data)
    decoded = []
    for entry in data["layers"]:
        try:
            decoded.append(_decoded(p, entry, values))
        except IdinspectError:                          # an earlier layer's bad figure is named first
            _check(p, data["layers"], decoded, data["dtype"], values)
            raise
    _check(p, data["layers"], decoded, data["dtype"], values)
    layers = [_layer(entry, arrays, finite) for entry, (_, arrays, finite) in zip(data["layers"], decoded)]
    inv = ModelInvariants(source=str(data.get("source") or p), model=dict(data.get("model") or {}),
                          dtype=data["dtype"], unit_roundoff=unit_roundoff_of(data["dtype"]),
                          gains_folded=data["gains_folded"], layers=layers, value_rtol=FLOAT32_RTOL,
                          origin=f"fingerprint {getattr(p, 'name', p)}", integrity=integrity, compact_values=values)
    if data.get("mlp") is not None:
        from .fingerprint_mlp import read_mlp_section

        inv.mlp, inv.mlp_dtypes = read_mlp_section(p, data["mlp"]), list(data["mlp"]["dtypes"])
    return inv


def _decoded(path: Path, entry: dict, values: int | None) -> tuple[int, dict[str, torch.Tensor], torch.Tensor]:
    """One layer's (index, arrays decoded at their declared shapes (sizes checked already), finite heads [H])."""
    s = entry["structure"]
    index = int(entry["index"])
    arrays = {key: decode(path, f"layer {index} {key}", entry[key], shape)
              for key, shape in array_shapes(s, entry, values).items()}
    finite = torch.ones(int(s["heads"]), dtype=torch.bool)
    for h in entry.get("nonfinite_heads") or []:
        finite[int(h)] = False
    return index, arrays, finite


def _check(path: Path, entries: list[dict], decoded: list, dtype: str, values: int | None) -> None:
    """The figures of the decoded layers (:func:`.fingerprint_check.check_layers_figures`; a compact
    fingerprint's radius range counts the d_k, d_v values each head had)."""
    full = [None if values is None else {"qk": int(e["structure"]["d_k"]), "ov": int(e["structure"]["d_v"])}
            for e in entries[:len(decoded)]]
    check_layers_figures(path, decoded, dtype, full)


def _layer(entry: dict, arrays: dict[str, torch.Tensor], finite: torch.Tensor) -> LayerInvariants:
    """One layer's invariants from its checked arrays."""
    s = entry["structure"]
    structure = {k: (int(v) if k in _INTEGER_KEYS and v is not None else v) for k, v in s.items()}
    return LayerInvariants(index=int(entry["index"]), qk=arrays["qk"], ov=arrays["ov"], planes=arrays.get("planes"),
                           radius_qk=arrays["radius_qk"], radius_ov=arrays["radius_ov"],
                           radius_planes=arrays.get("radius_planes"), finite=finite, structure=structure)


#: Structure keys the schema types as integers (a JSON 4.0 is read as 4).
_INTEGER_KEYS = ("heads", "kv_heads", "d_model", "d_k", "d_v", "rotary_dim")


def _enc(t: torch.Tensor, up: bool = False) -> str:
    a = t.detach().to(torch.float64).cpu().numpy()
    f = a.astype("<f4")
    if up:                                              # round radii up: a bound stays a bound
        low = f.astype(np.float64) < a
        f[low] = np.nextafter(f[low], np.float32(np.inf))
    return base64.b64encode(np.ascontiguousarray(f).tobytes()).decode("ascii")
