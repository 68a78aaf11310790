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
from functools import lru_cache
from pathlib import Path
from typing import Any

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


@lru_cache(maxsize=None)
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
    """Raise :class:`SchemaError` at the first value ``document`` holds against ``schema``."""
    _validate(document, schema, schema, "")


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


def _validate(v: Any, s: dict, root: dict, where: str) -> None:
    if "$ref" in s:
        ref = s["$ref"]
        if not ref.startswith("#/$defs/"):
            raise RuntimeError(f"unsupported $ref {ref}")
        _validate(v, root["$defs"][ref[len("#/$defs/"):]], root, where)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_TYPES[t](v) for t in types):
            raise SchemaError(where, f"is {_show(v)}, not {' or '.join(_NAMES[t] for t in types)}")
    if "const" in s and not _equal(v, s["const"]):
        raise SchemaError(where, f"is {_show(v)}, expected {json.dumps(s['const'])}")
    if "enum" in s and not any(_equal(v, e) for e in s["enum"]):
        raise SchemaError(where, f"is {_show(v)}, not one of {', '.join(json.dumps(e) for e in s['enum'])}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in s and v < s["minimum"]:
            raise SchemaError(where, f"is {_show(v)}, below the minimum {s['minimum']}")
        if "exclusiveMinimum" in s and v <= s["exclusiveMinimum"]:
            raise SchemaError(where, f"is {_show(v)}, not above {s['exclusiveMinimum']}")
        if "maximum" in s and v > s["maximum"]:
            raise SchemaError(where, f"is {_show(v)}, above the maximum {s['maximum']}")
    if isinstance(v, str):
        if "maxLength" in s and len(v) > s["maxLength"]:
            raise SchemaError(where, f"is a string of {len(v)} characters, more than {s['maxLength']}")
        if "pattern" in s and not re.search(s["pattern"], v):
            raise SchemaError(where, f"is {_show(v)}, which does not match {s['pattern']}")
    if isinstance(v, list):
        if "maxItems" in s and len(v) > s["maxItems"]:
            raise SchemaError(where, f"has {len(v)} items, more than {s['maxItems']}")
        if "minItems" in s and len(v) < s["minItems"]:
            raise SchemaError(where, f"has {len(v)} items, fewer than {s['minItems']}")
        if s.get("uniqueItems") and len({json.dumps(x, sort_keys=True) for x in v}) != len(v):
            raise SchemaError(where, "repeats an item")
        if isinstance(s.get("items"), dict):
            for i, item in enumerate(v):
                _validate(item, s["items"], root, f"{where}[{i}]")
    if isinstance(v, dict):
        for key in s.get("required", []):
            if key not in v:
                raise SchemaError(where, f"has no {json.dumps(key)}")
        props = s.get("properties", {})
        extra = s.get("additionalProperties", True)
        for key, item in v.items():
            path = f"{where}.{key}" if where else key
            if key in props:
                _validate(item, props[key], root, path)
            elif extra is False:
                raise SchemaError(path, "is not a key of this format")
            elif isinstance(extra, dict):
                _validate(item, extra, root, path)


def _equal(a: Any, b: Any) -> bool:
    """JSON equality (1 == 1.0, but true != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b and type(a) is not NotFinite


__all__ = ["NotFinite", "SchemaError", "load_schema", "parse_json", "validate"]
