"""SARIF output: valid against the vendored official 2.1.0 schema, and what GitHub needs."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

import idinspect
from tests.audit.test_audit_fixtures import NAN_TENSOR, audit, isolated_cwd, zoo  # noqa: F401

SCHEMA = Path(idinspect.__file__).parent / "schemas" / "sarif-2.1.0.json"


_URI_CHARS = re.compile(r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*$")


def _uri_reference(value) -> bool:
    """RFC 3986 characters only (jsonschema checks the uri formats only with optional packages)."""
    return not isinstance(value, str) or bool(_URI_CHARS.match(value))


def _uri(value) -> bool:
    return not isinstance(value, str) or (_uri_reference(value) and bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value)))


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    checker = jsonschema.FormatChecker()
    checker.checks("uri")(_uri)
    checker.checks("uri-reference")(_uri_reference)
    return jsonschema.Draft4Validator(schema, format_checker=checker)


def sarif(*args) -> tuple[int, dict]:
    res = audit(*args, "--format", "sarif")
    return res.code, json.loads(res.stdout)


def test_the_vendored_schema_is_the_official_file():
    digest = hashlib.sha256(SCHEMA.read_bytes()).hexdigest()
    assert digest == "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"
    schema = json.loads(SCHEMA.read_text())
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    jsonschema.Draft4Validator.check_schema(schema)


def test_uris_with_spaces_are_percent_encoded(zoo, validator, isolated_cwd):
    shutil.copytree(zoo["gpt2"], isolated_cwd / "my models" / "gpt 2")
    _, log = sarif("my models/gpt 2")
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]}
    assert uris == {"my%20models/gpt%202/model.safetensors"} and validator.is_valid(log)


def test_the_validator_rejects_what_it_should(validator):
    bad_uri = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x", "informationUri": "not a uri"}}}]}
    assert not validator.is_valid(bad_uri)
    assert not validator.is_valid({"version": "2.1.0"})
    assert not validator.is_valid({"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]})
    bad_level = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                               "results": [{"message": {"text": "m"}, "level": "fatal"}]}]}
    assert not validator.is_valid(bad_level)


def test_sarif_is_schema_valid_with_findings_from_several_models(zoo, validator, tmp_path):
    code, log = sarif(zoo["gpt2"], zoo["llama-nan"], zoo["unsupported"], tmp_path / "missing")
    assert code == 2
    errors = sorted(validator.iter_errors(log), key=str)
    assert not errors, errors[0]
    run = log["runs"][0]
    assert log["$schema"] and log["version"] == "2.1.0"
    assert {"noop-bias", "absorbable-bias", "non-finite", "unsupported-architecture"} <= {r["ruleId"] for r in run["results"]}
    assert run["invocations"][0]["executionSuccessful"] is False
    assert "missing" in run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]


def test_every_result_is_located_for_github(zoo, validator, isolated_cwd):
    local = isolated_cwd / "models" / "llama-nan"
    shutil.copytree(zoo["llama-nan"], local)
    code, log = sarif("models/llama-nan", zoo["gpt2"], "--fail-on", "note")
    assert code == 1 and validator.is_valid(log)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert run["results"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note")
        assert result["message"]["text"]
        [loc] = result["locations"]
        phys = loc["physicalLocation"]
        assert phys["artifactLocation"]["uri"] and phys["region"]["startLine"] == 1
        assert loc["logicalLocations"][0]["fullyQualifiedName"]
        assert len(result["partialFingerprints"]["idinspect/v1"]) == 64
    nan = [r for r in run["results"] if r["ruleId"] == "non-finite"]
    assert nan[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "models/llama-nan/model.safetensors"
    assert nan[0]["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == NAN_TENSOR
    outside = [r for r in run["results"] if r["ruleId"] == "noop-bias"]
    assert outside[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("file:///")


def test_rule_metadata_for_code_scanning(zoo):
    _, log = sarif(zoo["llama"])
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "idinspect" and driver["version"] == idinspect.__version__
    assert driver.get("informationUri", "https://").startswith("https://")  # a real URL, or none at all
    assert "example.invalid" not in json.dumps(log)
    ids = [r["id"] for r in driver["rules"]]
    assert ids == ["non-finite", "overflow", "noop-bias", "rank-deficient-head", "absorbable-bias", "unsupported-architecture",
                   "not-gauge-fixed", "identification-ratio", "base-model-unrelated"]
    levels = {r["id"]: r["defaultConfiguration"]["level"] for r in driver["rules"]}
    assert levels == {"non-finite": "error", "overflow": "error", "noop-bias": "warning", "rank-deficient-head": "warning",
                      "absorbable-bias": "note", "unsupported-architecture": "error", "not-gauge-fixed": "error",
                      "identification-ratio": "error", "base-model-unrelated": "error"}
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
        assert rule["properties"]["tags"]
    assert log["runs"][0]["results"] == [] and log["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_fingerprints_match_the_baseline_and_are_stable(zoo, isolated_cwd):
    _, first = sarif(zoo["gpt2"])
    _, second = sarif(zoo["gpt2"])
    fps = [r["partialFingerprints"] for r in first["runs"][0]["results"]]
    assert fps == [r["partialFingerprints"] for r in second["runs"][0]["results"]]
    audit(zoo["gpt2"], "--write-baseline", "b.json")
    recorded = {e["fingerprint"] for e in json.loads(Path("b.json").read_text())["findings"]}
    assert {fp["idinspect/v1"] for fp in fps} == recorded
