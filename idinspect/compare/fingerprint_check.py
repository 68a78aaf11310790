"""What ``compare`` checks in a fingerprint file before it believes a figure of it.

A fingerprint is a claim made by whoever wrote the file; the comparing side takes from it only
what it can check (docs/compare.md, "Reading a fingerprint"):

1. Bounded reading: a regular file of at most :data:`MAX_FILE_BYTES`, JSON nested at most
   :data:`MAX_DEPTH` deep (a recursion bomb is refused, not parsed), no NaN/Infinity literals.
2. The JSON Schema ``idinspect/schemas/fingerprint.schema.json`` (types, keys, per-layer limits).
3. ``integrity`` (when present): the sha256 of the canonical JSON of every other key; a mismatch
   names the file as damaged. Version-1 files written before the field existed are read without
   it (keys are only ever added within a version) and reported as unchecked.
4. Declared sizes before any allocation: at most :data:`MAX_HEADS` heads in all, kv heads dividing
   the heads, ``rotary_dim / 2`` planes within ``d_k``, each base64 array exactly as long as its
   declared shape needs, ``nonfinite_heads`` within ``[0, H)``.
5. The figures: every invariant and radius of a head not listed in ``nonfinite_heads`` finite and
   >= 0; ``unit_roundoff`` exactly u = eps / 2 of the declared dtype; and each radius r of a head
   with values s (k of them) within the range that dtype allows (:func:`radius_range`):

       lower = (u_kind + COMPUTE_RTOL) ||s||_2   (the Weyl radius is at least this: ||Q||_F ||K||_2 >= ||Q K^T||_F)
       upper = sqrt(k) (2 e + e^2 + COMPUTE_RTOL) ||s||_2,   e = 2u + u^2

   ``upper`` is the radius of the function's balanced representative (Q^T Q = K^T K: ||Q||_F ||K||_2
   = sqrt(s_1 sum s_i) <= sqrt(k) ||s||_2, ||Q||_F ||K||_F = sum s_i <= sqrt(k) ||s||_2) with a norm
   gain folded in the same dtype (e = u_g + u_W + u_g u_W). The writer caps its radii there
   (:func:`cap_radius`), so a comparison is never looser than the gauge-fixed model's own rounding;
   a smaller radius than ``lower`` claims more precision than the dtype holds. ``u_kind`` is the
   dtype's u for qk and the planes (W_Q's dtype is the one recorded) and 0 for ov (W_V and W_O may
   be stored otherwise).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import IdinspectError
from .json_schema import NotFinite, SchemaError, load_schema, parse_json, validate

#: Largest fingerprint file read (a 405B model's fingerprint is ~40 MB).
MAX_FILE_BYTES = 256 << 20
#: Deepest nesting of JSON read (the format itself is 5 deep; the model summary a little more).
MAX_DEPTH = 32
#: Most heads in one fingerprint: compare's head-by-head distance matrices are N_A x N_B float64
#: (2^14 heads on both sides: 2 GiB; Llama-3.1-405B has 16,128 query heads).
MAX_HEADS = 1 << 14
#: Relative accuracy of the float64 singular values (as in :mod:`.invariants`).
COMPUTE_RTOL = 1e-9
#: Slack for the float32 rounding of stored values and radii in the range check (2^-24 each, twice).
STORED_SLACK = 2.0 ** -20
FIX = "write it again with 'idinspect fingerprint MODEL -o FILE'"


def read_document(path: Path) -> dict:
    """The parsed, schema-checked JSON of a fingerprint file (IdinspectError naming it otherwise)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise IdinspectError(f"{path}: not a regular file; a fingerprint is a JSON file ({FIX})")
        if info.st_size > MAX_FILE_BYTES:
            raise IdinspectError(f"{path}: {info.st_size} bytes, more than a fingerprint can hold "
                                 f"({MAX_FILE_BYTES >> 20} MiB); is it a fingerprint? ({FIX})")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        from ..sources.validate import os_reason

        raise IdinspectError(f"{path}: {os_reason(exc)}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IdinspectError(f"{path}: not UTF-8 text (byte {exc.start}); not a fingerprint ({FIX})") from None
    return parse_document(path, text)


def parse_document(path, text: str) -> Any:
    """The parsed JSON of one fingerprint's text (``path`` names it in errors: a file, or a JSONL line),
    refused before parsing when nested deeper than :data:`MAX_DEPTH`; no NaN/Infinity literals."""
    depth = _bracket_depth(text)
    if depth > MAX_DEPTH:
        raise IdinspectError(f"{path}: JSON nested {depth} deep, more than a fingerprint ever is ({MAX_DEPTH}); "
                             f"the file is damaged or not a fingerprint ({FIX})")
    try:
        data = parse_json(text)
    except (ValueError, RecursionError) as exc:
        raise IdinspectError(f"{path}: not a readable JSON fingerprint ({str(exc).splitlines()[0]}); {FIX}") from None
    return data


#: A JSON string (quotes, escapes): the same language as ``"(?:[^"\\]|\\.)*"``, unrolled so that a long
#: base64 string is one run of a character class rather than one alternation per character.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _bracket_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` outside strings: strings removed, then a scan of the brackets left.
    Without a backslash every quote opens or closes a string, so splitting at the quotes removes them
    (an odd last quote opens none: the text after it is outside, as the string pattern leaves it)."""
    if "\\" not in text:
        parts = text.split('"')
        outside = "".join(parts[0::2]) + (parts[-1] if len(parts) % 2 == 0 else "")
    else:
        outside = _JSON_STRING.sub("", text)
    depth = deepest = 0
    for c in _BRACKET.findall(outside):
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def check_schema(path: Path, data: Any, version: int) -> None:
    """The format, the version, then the JSON Schema (first problem named with its JSON path)."""
    if not isinstance(data, dict) or data.get("format") != "idinspect-fingerprint":
        raise IdinspectError(f"{path}: not an idinspect fingerprint (no \"format\": \"idinspect-fingerprint\"); {FIX}")
    if data.get("version") != version or isinstance(data.get("version"), bool):
        raise IdinspectError(f"{path}: fingerprint version {data.get('version')!r} is not supported (this idinspect "
                             f"reads version {version}); rewrite it with this idinspect's 'fingerprint'")
    try:
        validate(data, load_schema("fingerprint.schema.json"))
    except SchemaError as exc:
        raise IdinspectError(f"{path}: malformed fingerprint: {exc} (idinspect/schemas/fingerprint.schema.json); "
                             f"{FIX}") from None


def canonical_digest(data: dict) -> str:
    """``sha256:`` + SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of ``data`` less ``integrity``."""
    content = {k: v for k, v in data.items() if k != "integrity"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def check_integrity(path: Path, data: dict) -> str:
    """'verified' when the recorded digest matches, 'absent' for a file without one; raise if damaged
    (a malformed digest is left to the schema check, which names it)."""
    recorded = data.get("integrity")
    if recorded is None:
        return "absent"
    if not isinstance(recorded, str) or isinstance(recorded, NotFinite):
        return "absent"
    computed = canonical_digest(data)
    if computed != recorded:
        raise IdinspectError(f"{path}: damaged: its content does not match its integrity digest (recorded "
                             f"{recorded[:19]}..., content {computed[:19]}...); copy it again or {FIX}")
    return "verified"


def unit_roundoff_of(name: str) -> float:
    """u = eps / 2 of a dtype named as the schema allows."""
    return torch.finfo(getattr(torch, name)).eps / 2


def check_declared_sizes(path: Path, data: dict) -> None:
    """Heads and shapes consistent and within :data:`MAX_HEADS` (all layers first), then each array's
    base64 length against its declared shape: nothing is decoded or allocated before."""
    total, last = 0, -1
    for i, entry in enumerate(data["layers"]):
        s = entry["structure"]
        H, G, dk = int(s["heads"]), int(s["kv_heads"]), int(s["d_k"])
        where = f"layers[{i}]"
        if int(entry["index"]) <= last:
            raise IdinspectError(f"{path}: {where}.index {entry['index']} does not follow {last}; layers are listed in "
                                 f"order, once each; {FIX}")
        last = int(entry["index"])
        if H % G:
            raise IdinspectError(f"{path}: {where}.structure: {H} heads do not divide into {G} kv heads; {FIX}")
        rotary = int(s["rotary_dim"] or 0)
        if rotary % 2 or rotary > dk:
            raise IdinspectError(f"{path}: {where}.structure.rotary_dim {rotary} is not an even number up to d_k {dk}; {FIX}")
        if (entry.get("planes") is None) != (entry.get("radius_planes") is None) or \
                (entry.get("planes") is not None and rotary == 0):
            raise IdinspectError(f"{path}: {where}: planes and radius_planes must both be given (RoPE, rotary_dim > 0) "
                                 f"or both be null; {FIX}")
        bad = [h for h in entry.get("nonfinite_heads") or [] if int(h) >= H]
        if bad:
            raise IdinspectError(f"{path}: {where}.nonfinite_heads names head {bad[0]}, but the layer has {H} heads "
                                 f"(0..{H - 1}); {FIX}")
        total += H
    if total > MAX_HEADS:
        raise IdinspectError(f"{path}: declares {total} heads, more than {MAX_HEADS} heads in all; compare would need "
                             f"{total}^2 x 8 bytes per distance matrix; {FIX}")
    values = compact_values(data)
    for i, entry in enumerate(data["layers"]):
        if values is not None and entry.get("planes") is not None:
            raise IdinspectError(f"{path}: layers[{i}] holds RoPE planes, which a compact fingerprint leaves out; {FIX}")
        for key, shape in array_shapes(entry["structure"], entry, values).items():
            need = 4 * math.ceil(4 * math.prod(shape) / 3)
            if len(entry[key]) != need:
                raise IdinspectError(f"{path}: layers[{i}].{key} holds {len(entry[key])} base64 characters where the "
                                     f"declared shape {list(shape)} needs {need}; the file is damaged; {FIX}")


def compact_values(data: dict) -> int | None:
    """A compact fingerprint's number of values kept per head and form (None: the full form)."""
    compact = data.get("compact")
    return None if compact is None else int(compact["values"])


def array_shapes(s: dict, entry: dict, values: int | None = None) -> dict[str, tuple[int, ...]]:
    """Key -> shape of each array a layer entry holds, from its structure (``values``: a compact
    fingerprint's largest singular values kept per head, at most d_k / d_v)."""
    H, dk, dv = int(s["heads"]), int(s["d_k"]), int(s["d_v"])
    if values is not None:
        dk, dv = min(dk, values), min(dv, values)
    shapes = {"qk": (H, dk), "ov": (H, dv), "radius_qk": (H,), "radius_ov": (H,)}
    if entry.get("planes") is not None:
        P = int(s["rotary_dim"] or 0) // 2
        shapes.update(planes=(H, P, 2), radius_planes=(H, P))
    return shapes


def decode(path: Path, where: str, text: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A base64 float32 array of the declared ``shape`` as float64."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise IdinspectError(f"{path}: {where} is not base64; the file is damaged; {FIX}") from None
    a = np.frombuffer(raw, dtype="<f4")
    if a.size != math.prod(shape):
        raise IdinspectError(f"{path}: {where} holds {a.size} values where the declared shape {list(shape)} needs "
                             f"{math.prod(shape)}; {FIX}")
    return torch.from_numpy(a.astype(np.float64).reshape(shape))


def radius_range(values: torch.Tensor, u: float, u_kind: float, full: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(lower, upper) [...] of the rounding radius of heads (or planes) with singular values
    ``values`` [..., k] stored in a dtype of unit roundoff ``u`` (module docstring, step 5).

    ``full``: the number of singular values of which ``values`` are the largest k (a compact
    fingerprint). The lower end holds as is (||s_top|| <= ||s||); for the upper end each of the
    full - k values left out is at most the smallest kept one, so ||s||^2 <= ||s_top||^2 + (full - k) s_k^2."""
    norm = torch.linalg.vector_norm(values, dim=-1)
    k = values.shape[-1]
    e = 2 * u + u * u
    top = norm
    if full is not None and full > k:
        top = torch.sqrt(norm * norm + (full - k) * values[..., -1] ** 2)
        k = full
    return (u_kind + COMPUTE_RTOL) * norm, math.sqrt(k) * (2 * e + e * e + COMPUTE_RTOL) * top


def cap_radius(radius: torch.Tensor, values: torch.Tensor, u: float, full: int | None = None) -> torch.Tensor:
    """The radius the writer records: at most the format's upper bound (see the module docstring),
    taken of the values as stored (float32), so that a fingerprint read back and written again
    is the same file."""
    stored = values.to(torch.float32).to(torch.float64)
    return torch.minimum(radius.to(torch.float64), radius_range(stored, u, 0.0, full)[1])


def check_figures(path: Path, index: int, arrays: dict[str, torch.Tensor], finite: torch.Tensor, dtype: str,
                  full: dict[str, int] | None = None) -> None:
    """Every figure of a finite head finite and >= 0, every radius within :func:`radius_range`
    (``full``: kind -> number of singular values of which a compact fingerprint keeps the largest)."""
    heads = finite.nonzero().flatten()
    for key, a in arrays.items():
        rows = a[heads].reshape(len(heads), math.prod(a.shape[1:]))
        bad = (~torch.isfinite(rows) | (rows < 0)).any(dim=1)
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            value = float(rows[row][~torch.isfinite(rows[row]) | (rows[row] < 0)][0])
            raise IdinspectError(f"{path}: layer {index} head {int(heads[row])}: {key} holds {value!r}, not a finite "
                                 f"number >= 0 (a head whose weights are not finite is listed in nonfinite_heads); {FIX}")
    for kind, r, lower, upper in _radius_ranges(arrays, dtype, full):
        live = finite.reshape(-1, *[1] * (r.dim() - 1))
        for mask, bound, what, why in (
                (live & (r > upper * (1 + STORED_SLACK)), upper, "above the largest",
                 "a tolerance that wide would accept values the dtype cannot explain"),
                (live & (r < lower * (1 - STORED_SLACK)), lower, "below the smallest",
                 f"it claims more precision than {dtype} holds")):
            if bool(mask.any()):
                at = tuple(mask.nonzero()[0].tolist())
                raise IdinspectError(f"{path}: layer {index} head {at[0]}: radius_{kind} {float(r[at]):.3g} is {what} "
                                     f"rounding radius its values allow in {dtype} ({float(bound[at]):.3g}): {why}; {FIX}")


def _radius_ranges(arrays: dict[str, torch.Tensor], dtype: str, full: dict[str, int] | None):
    """(kind, stored radius, smallest and largest radius the values allow in ``dtype``) of each kind present
    (:func:`radius_range`; W_OV's values carry no rounding of their own, W_QK's and the planes' one)."""
    u = unit_roundoff_of(dtype)
    for kind, u_kind in (("qk", u), ("ov", 0.0), ("planes", u)):
        if kind in arrays:
            lower, upper = radius_range(arrays[kind], u, u_kind, (full or {}).get(kind))
            yield kind, arrays[f"radius_{kind}"], lower, upper


def check_layers_figures(path: Path, layers: list[tuple[int, dict[str, torch.Tensor], torch.Tensor]], dtype: str,
                         full: list[dict[str, int] | None]) -> None:
    """:func:`check_figures` of every layer (index, arrays, finite) with its ``full``: one stacked check
    [L, H, ...] where the layers' shapes agree (a fingerprint's usual case), and layer by layer, in
    order, where they do not or where the stacked check finds a problem (to name the first one)."""
    if len(layers) > 1 and all(f == full[0] for f in full) and \
            len({tuple((k, tuple(a.shape)) for k, a in arrays.items()) for _, arrays, _ in layers}) == 1:
        stacked = {key: torch.stack([arrays[key] for _, arrays, _ in layers]) for key in layers[0][1]}
        if _figures_hold(stacked, torch.stack([finite for _, _, finite in layers]), dtype, full[0]):
            return
    for (index, arrays, finite), f in zip(layers, full):
        check_figures(path, index, arrays, finite, dtype, f)


def _figures_hold(arrays: dict[str, torch.Tensor], finite: torch.Tensor, dtype: str, full: dict[str, int] | None) -> bool:
    """Whether :func:`check_figures` passes, for arrays of any leading shape ``finite.shape`` ([H] or [L, H])."""
    for a in arrays.values():
        rows = a[finite]
        if not bool(torch.isfinite(rows).all()) or bool((rows < 0).any()):
            return False
    for _, r, lower, upper in _radius_ranges(arrays, dtype, full):
        live = finite.reshape(*finite.shape, *[1] * (r.dim() - finite.dim()))
        if bool((live & ((r > upper * (1 + STORED_SLACK)) | (r < lower * (1 - STORED_SLACK)))).any()):
            return False
    return True
