"""One convention for every JSON output: an integer ``schema_version`` first, validated against the
JSON Schema in idinspect/schemas/ that docs/json-contract.md names for it."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from tests.support.cli import run_cli

jsonschema = pytest.importorskip("jsonschema")

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "json-contract.md"


def _schema(name: str) -> dict:
    return json.loads(files("idinspect").joinpath(f"schemas/{name}").read_text())


@pytest.mark.parametrize("command, schema", [(["{a}"], "report.schema.json"),
                                             (["diff", "{a}", "{a}"], "diff.schema.json"),
                                             (["compare", "{a}", "{a}"], "compare.schema.json")])
def test_every_output_has_an_integer_schema_version_first_and_validates(command, schema, tiny_dir):
    a = str(tiny_dir("llama-gqa"))
    res = run_cli(*[p.format(a=a) for p in command], "--format", "json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert next(iter(doc)) == "schema_version" and type(doc["schema_version"]) is int
    jsonschema.validate(doc, _schema(schema))
    assert f"idinspect/schemas/{schema}" in CONTRACT.read_text()
