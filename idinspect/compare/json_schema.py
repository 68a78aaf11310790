"""A small JSON Schema (draft 2020-12) checker for the schemas idinspect ships and reads back.

jsonschema is a test dependency only, so a document read at run time (a fingerprint) is checked
here against its schema in ``idinspect/schemas/`` with the subset of keywords those schemas use:
``type``, ``const``, ``enum``, ``required``, ``properties``, ``additionalProperties``, ``items``,
``minItems``, ``maxItems``, ``uniqueItems``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``maxLength``, ``pattern`` and local ``$ref`` (``#/$defs/NAME``); annotations are ignored.
A keyword outside that subset is refused when the schema is loaded, so the schema cannot promise
a check that is not made (tests/hostile/test_hostile_fingerprint.py checks that this and jsonschema
agree on every case). One difference: JSON has no NaN or infinity, so ``number`` accepts finite
numbers only (a parser hook marks the rest, see :class:`NotFinite`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

#: A compiled schema node: returns if the value holds, raises :class:`_Invalid` otherwise.
Check = Callable[[Any], None]

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
_CHECKED = {"type", "const", "enum", "required", "properties", "additionalProperties", "items", "minItems",
            "maxItems", "uniqueItems", "minimum", "maximum", "exclusiveMinimum", "maxLength", "pattern", "$ref"}
_ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "contentEncoding", "contentMediaType",
                "examples", "$comment", "default"}


class NotFinite(str):
    """A number JSON cannot hold (``NaN``, ``Infinity``, ``1e999``) as the parser met it."""


def parse_json(text: str) -> Any:
    """``json.loads`` with non-finite numbers kept as :class:`NotFinite` markers (never a float)."""
    def number(s: str):
        value = float(s)
        return value if math.isfinite(value) else NotFinite(s)

    return json.loads(text, parse_constant=NotFinite, parse_float=number)


class SchemaError(ValueError):
    """``where``: the JSON path of the offending value (``layers[3].structure.heads``)."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where or 'the document'} {problem}")
        self.where, self.problem = where, problem


@cache
def load_schema(name: str) -> dict:
    """``idinspect/schemas/NAME``, with every keyword it uses checked to be one this module checks."""
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    _check_keywords(schema, name)
    return schema


def _check_keywords(node: Any, name: str) -> None:
    if isinstance(node, dict):
        unknown = set(node) - _CHECKED - _ANNOTATIONS
        if unknown:
            raise RuntimeError(f"{name}: keywords {sorted(unknown)} are not checked by idinspect.compare.json_schema")
        for key in ("properties", "$defs"):
            for sub in node.get(key, {}).values():
                _check_keywords(sub, name)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                _check_keywords(node[key], name)


def validate(document: Any, schema: dict) -> None:
    """Raise :class:`SchemaError` at the first value ``document`` holds against ``schema``.

    The schema is compiled once into nested checks (:func:`_compile`, cached per schema object); a
    failure records its JSON path only on the way out, so a valid document costs one call per value."""
    try:
        _compiled(schema)(document)
    except _Invalid as exc:
        raise SchemaError(exc.where(), exc.problem) from None


class _Invalid(Exception):
    """A failed check; ``parts`` (keys and item indices) are appended innermost first as it propagates."""

    def __init__(self, problem: str, parts: list | None = None):
        super().__init__(problem)
        self.problem, self.parts = problem, parts or []

    def where(self) -> str:
        path = ""
        for part in reversed(self.parts):
            path = f"{path}[{part}]" if isinstance(part, int) else (f"{path}.{part}" if path else part)
        return path


#: id(schema) -> (schema, its compiled check); the schema is held so that its id is never reused.
_COMPILED: dict[int, tuple[dict, Check]] = {}


def _compiled(schema: dict) -> Check:
    hit = _COMPILED.get(id(schema))
    if hit is None or hit[0] is not schema:
        if len(_COMPILED) > 64:
            _COMPILED.clear()
        hit = _COMPILED[id(schema)] = (schema, _compile(schema, schema, {}))
    return hit[1]


def _compile(s: dict, root: dict, defs: dict) -> Check:
    """One check ``f(value)`` for the schema node ``s``: the keywords in the order the format's errors
    name them ($ref, type, const, enum, number limits, string limits, array items, object keys)."""
    checks: list[Check] = []
    if "$ref" in s:
        ref = s["$ref"]
        if not ref.startswith("#/$defs/"):
            raise RuntimeError(f"unsupported $ref {ref}")
        name = ref[len("#/$defs/"):]
        if name not in defs:
            defs[name] = None                                  # a cycle resolves at call time
            defs[name] = _compile(root["$defs"][name], root, defs)
        checks.append(defs[name] if defs[name] is not None else (lambda v, n=name: defs[n](v)))
    if "type" in s:
        checks.append(_type_check(s["type"] if isinstance(s["type"], list) else [s["type"]]))
    if "const" in s:
        const = s["const"]

        def const_check(v):
            if not _equal(v, const):
                raise _Invalid(f"is {_show(v)}, expected {json.dumps(const)}")
        checks.append(const_check)
    if "enum" in s:
        enum = s["enum"]

        def enum_check(v):
            if not any(_equal(v, e) for e in enum):
                raise _Invalid(f"is {_show(v)}, not one of {', '.join(json.dumps(e) for e in enum)}")
        checks.append(enum_check)
    if any(k in s for k in ("minimum", "exclusiveMinimum", "maximum")):
        checks.append(_number_check(s))
    if "maxLength" in s or "pattern" in s:
        checks.append(_string_check(s))
    if any(k in s for k in ("maxItems", "minItems", "uniqueItems", "items")):
        checks.append(_array_check(s, root, defs))
    if any(k in s for k in ("required", "properties", "additionalProperties")):
        checks.append(_object_check(s, root, defs))
    if len(checks) == 1:
        return checks[0]

    def node(v):
        for check in checks:
            check(v)
    return node


def _type_check(types: list[str]) -> Check:
    preds = [_TYPES[t] for t in types]
    expected = " or ".join(_NAMES[t] for t in types)
    if types == ["number"]:                                    # the common case, without a call per test
        def number_check(v):
            if type(v) is not float and not (isinstance(v, (int, float)) and not isinstance(v, bool)):
                raise _Invalid(f"is {_show(v)}, not {expected}")
        return number_check

    def type_check(v):
        for pred in preds:
            if pred(v):
                return
        raise _Invalid(f"is {_show(v)}, not {expected}")
    return type_check


def _number_check(s: dict) -> Check:
    low, above, high = s.get("minimum"), s.get("exclusiveMinimum"), s.get("maximum")

    def check(v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if low is not None and v < low:
                raise _Invalid(f"is {_show(v)}, below the minimum {low}")
            if above is not None and v <= above:
                raise _Invalid(f"is {_show(v)}, not above {above}")
            if high is not None and v > high:
                raise _Invalid(f"is {_show(v)}, above the maximum {high}")
    return check


def _string_check(s: dict) -> Check:
    longest, pattern = s.get("maxLength"), s.get("pattern")
    compiled = None if pattern is None else re.compile(pattern)

    def check(v):
        if isinstance(v, str):
            if longest is not None and len(v) > longest:
                raise _Invalid(f"is a string of {len(v)} characters, more than {longest}")
            if compiled is not None and not compiled.search(v):
                raise _Invalid(f"is {_show(v)}, which does not match {pattern}")
    return check


def _array_check(s: dict, root: dict, defs: dict) -> Check:
    most, least, unique = s.get("maxItems"), s.get("minItems"), s.get("uniqueItems")
    item = _compile(s["items"], root, defs) if isinstance(s.get("items"), dict) else None

    def check(v):
        if isinstance(v, list):
            if most is not None and len(v) > most:
                raise _Invalid(f"has {len(v)} items, more than {most}")
            if least is not None and len(v) < least:
                raise _Invalid(f"has {len(v)} items, fewer than {least}")
            if unique and len({json.dumps(x, sort_keys=True) for x in v}) != len(v):
                raise _Invalid("repeats an item")
            if item is not None:
                for i, x in enumerate(v):
                    try:
                        item(x)
                    except _Invalid as exc:
                        exc.parts.append(i)
                        raise
    return check


def _object_check(s: dict, root: dict, defs: dict) -> Check:
    required = list(s.get("required", []))
    props = {key: _compile(sub, root, defs) for key, sub in s.get("properties", {}).items()}
    extra = s.get("additionalProperties", True)
    extra_check = _compile(extra, root, defs) if isinstance(extra, dict) else None

    def check(v):
        if isinstance(v, dict):
            for key in required:
                if key not in v:
                    raise _Invalid(f"has no {json.dumps(key)}")
            for key, x in v.items():
                sub = props.get(key)
                if sub is None:
                    if extra is False:
                        raise _Invalid("is not a key of this format", [key])
                    sub = extra_check
                    if sub is None:
                        continue
                try:
                    sub(x)
                except _Invalid as exc:
                    exc.parts.append(key)
                    raise
    return check


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str) and not isinstance(v, NotFinite),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


_NAMES = {"object": "an object", "array": "an array", "string": "a string", "boolean": "true or false",
          "null": "null", "integer": "an integer", "number": "a number"}


def _show(value: Any) -> str:
    if isinstance(value, NotFinite):
        return f"{value} (not a finite number)"
    if isinstance(value, (dict, list)):
        return f"a{'n object' if isinstance(value, dict) else 'n array'} of {len(value)}"
    text = json.dumps(value) if not isinstance(value, str) else json.dumps(value[:40] + ("..." if len(value) > 40 else ""))
    return text


def _equal(a: Any, b: Any) -> bool:
    """JSON equality (1 == 1.0, but true != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b and type(a) is not NotFinite


__all__ = ["NotFinite", "SchemaError", "load_schema", "parse_json", "validate"]
