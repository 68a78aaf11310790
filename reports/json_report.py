"""The JSON report: the inspection result serialised deterministically.

``schema_version`` comes first, then the contract's sections in a fixed order; keys inside
objects are sorted; lists keep their meaningful order (layers by index, heads, singular values),
findings are sorted by (layer, rule, tensor, head). Non-finite floats, which JSON cannot carry,
become ``null`` (the contract's "float|null"). No timestamp unless asked for; ``SOURCE_DATE_EPOCH``
fixes it for reproducible builds.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from itertools import chain

from .atomic import write_text_atomic

#: Top-level sections in the order they are written (others follow, sorted).
TOP_ORDER = ("schema_version", "tool", "model", "totals", "layers", "findings")


def _clean(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        if value and set(map(type, value)) == {float} and _all_finite(value):
            return list(value)        # a row of singular values: checked in one C-level pass
        if _float_rows(value) and _all_finite(chain.from_iterable(r for r in value if r is not None)):
            return [r if r is None else list(r) for r in value]     # a head's RoPE planes: one pass
        return [_clean(v) for v in value]
    return value


def _float_rows(value) -> bool:
    """True iff every item is None or a non-empty list of floats (rows of singular values)."""
    return all(r is None or (type(r) is list and r and set(map(type, r)) == {float}) for r in value)


def _all_finite(values) -> bool:
    """True iff every float is finite: fsum of finite values is finite or raises OverflowError;
    any NaN or Inf makes it NaN/Inf or raises ValueError."""
    try:
        return math.isfinite(math.fsum(values))
    except (OverflowError, ValueError):
        return False


def _finding_key(f: dict) -> tuple:
    layer = f.get("layer")
    head = f.get("head")
    return (layer if isinstance(layer, int) else -1, str(f.get("rule", "")), str(f.get("tensor", "")),
            head if isinstance(head, int) else -1, str(f.get("message", "")))


def timestamp_now() -> str:
    """UTC ISO-8601 time of generation, or ``SOURCE_DATE_EPOCH`` when that is set."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (_dt.datetime.fromtimestamp(int(epoch), tz=_dt.timezone.utc) if epoch and epoch.isdigit()
            else _dt.datetime.now(tz=_dt.timezone.utc))
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def ordered(result: dict, *, timestamp: bool = False) -> dict:
    """A copy of ``result`` in the deterministic order described above (``generated_at`` if asked)."""
    out: dict = {}
    rest = sorted(k for k in result if k not in TOP_ORDER)
    for key in (*TOP_ORDER, *rest):
        if key not in result:
            continue
        value = result[key]
        if key == "layers" and isinstance(value, list):
            value = sorted(value, key=lambda layer: layer.get("index", 0))
        elif key == "findings" and isinstance(value, list):
            value = sorted(value, key=_finding_key)
        out[key] = _clean(value)
    if timestamp:
        out["generated_at"] = timestamp_now()
    return out


def dumps(result: dict, *, timestamp: bool = False, indent: int | None = 2) -> str:
    """The JSON text (with a final newline) of ``result``.

    ``indent``: objects, and lists holding objects or lists, go over lines; a list of numbers or
    strings (a head's singular values, a layer's dead heads) stays on one line, readable and
    written by json's C encoder (``json.dumps(indent=...)`` runs the pure-Python one: 0.25 s for a
    Llama-1B report). ``indent=None``: compact, on one line.
    """
    data = ordered(result, timestamp=timestamp)
    if indent is None:
        return json.dumps(data, ensure_ascii=False, allow_nan=False) + "\n"
    return _pretty(data, "", " " * indent) + "\n"


_one_line = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
_NESTED = (dict, list, tuple)


def _pretty(value, pad: str, step: str) -> str:
    if isinstance(value, dict) and value:
        inner = pad + step
        items = (f"{inner}{_one_line(str(k))}: {_pretty(v, inner, step)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, (list, tuple)) and not set(map(type, value)).isdisjoint(_NESTED):
        inner = pad + step
        if _float_rows(value):
            # Rows of floats (or null): one C-encoder call for the whole list, then a line break
            # after each top-level item; floats print neither "]" nor "null", so ", " after either
            # of those is a top-level separator.
            body = _one_line(value)[1:-1].replace("], ", "],\n" + inner).replace("null, ", "null,\n" + inner)
            return "[\n" + inner + body + "\n" + pad + "]"
        return "[\n" + ",\n".join(inner + _pretty(v, inner, step) for v in value) + "\n" + pad + "]"
    return _one_line(value)


def write_json(result: dict, path, *, timestamp: bool = False) -> None:
    """Write the JSON report to ``path`` atomically."""
    write_text_atomic(path, dumps(result, timestamp=timestamp))
