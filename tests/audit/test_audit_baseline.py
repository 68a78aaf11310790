"""Baselines: --write-baseline then --baseline reports only new findings."""

from __future__ import annotations

import json

import pytest

from idinspect.audit.baseline import Baseline, BaselineError, Entry, fingerprint, render
from tests.audit.test_audit_fixtures import (  # noqa: F401
    audit,
    audit_json,
    findings_of,
    isolated_cwd,
    zoo,
)


def test_fingerprints_are_stable_and_specific():
    a = fingerprint("noop-bias", "models/gpt2", "h.0.attn.c_attn.bias[16:32]")
    assert a == fingerprint("noop-bias", "models/gpt2", "h.0.attn.c_attn.bias[16:32]")
    assert len(a) == 64 and int(a, 16) >= 0
    assert a != fingerprint("noop-bias", "models/other", "h.0.attn.c_attn.bias[16:32]")
    assert a != fingerprint("absorbable-bias", "models/gpt2", "h.0.attn.c_attn.bias[16:32]")
    assert a != fingerprint("noop-bias", "models/gpt2", "h.1.attn.c_attn.bias[16:32]")
    # a known value: changing the recipe silently would invalidate every user's baseline
    assert fingerprint("non-finite", "m", "t") == "69152202ff5ae68dd94d38c6507d687bce38abf5cf7e9062ce0c058f6f89198f"
    assert fingerprint("non-finite", "m", None) == fingerprint("non-finite", "m", "")


def test_baseline_round_trip(zoo, isolated_cwd):
    base = isolated_cwd / "idinspect-baseline.json"
    res = audit(zoo["gpt2"], "--fail-on", "warning", "--write-baseline", base)
    assert res.code == 0, res.stderr
    data = json.loads(base.read_text())
    assert data["idinspect_baseline"] == 1
    assert {e["rule"] for e in data["findings"]} == {"noop-bias", "absorbable-bias"}
    assert all(len(e["fingerprint"]) == 64 and e["count"] == 1 for e in data["findings"])
    # same model, same findings: nothing new, so it passes even at --fail-on note
    code, doc = audit_json(zoo["gpt2"], "--fail-on", "note", "--baseline", base)
    assert code == 0
    assert findings_of(doc) == [] and doc["audit"]["baselined"] == len(data["findings"])
    # a different model's findings are new
    code, doc = audit_json(zoo["gpt2-other"], "--fail-on", "warning", "--baseline", base)
    assert code == 1
    assert {f["rule"] for f in findings_of(doc)} >= {"noop-bias"}
    # and a new kind of finding on the baselined model shows too
    code, doc = audit_json(zoo["gpt2"], "--fail-on", "note", "--baseline", base, "--max-unidentified-ratio", 0.01)
    assert code == 1 and [f["rule"] for f in findings_of(doc)] == ["identification-ratio"]


def test_baseline_is_deterministic_and_configurable(zoo, isolated_cwd):
    a, b = isolated_cwd / "a.json", isolated_cwd / "b.json"
    audit(zoo["gpt2"], "--write-baseline", a)
    audit(zoo["gpt2"], "--write-baseline", b)
    assert a.read_bytes() == b.read_bytes()
    (isolated_cwd / "pyproject.toml").write_text('[tool.idinspect.audit]\nfail-on = "warning"\nbaseline = "a.json"\n')
    assert audit(zoo["gpt2"]).code == 0
    assert audit(zoo["gpt2"], "--no-config", "--fail-on", "warning").code == 1


def test_writing_a_baseline_configured_but_not_yet_there(zoo, isolated_cwd):
    (isolated_cwd / "pyproject.toml").write_text('[tool.idinspect.audit]\nbaseline = "base.json"\n')
    assert audit(zoo["gpt2"]).code == 2  # configured baseline missing: an error, never a silent pass
    assert audit(zoo["gpt2"], "--write-baseline", "base.json").code == 0
    assert audit(zoo["gpt2"], "--fail-on", "warning").code == 0


def test_no_baseline_written_when_a_model_fails_to_load(zoo, isolated_cwd, tmp_path):
    base = isolated_cwd / "base.json"
    assert audit(zoo["gpt2"], tmp_path / "missing", "--write-baseline", base).code == 2
    assert not base.exists()


def test_counts_cover_repeated_fingerprints():
    fp = fingerprint("rank-deficient-head", "m", "t")
    text = render([Entry(fp, "rank-deficient-head", "m", "t")] * 2)
    assert json.loads(text)["findings"][0]["count"] == 2


@pytest.mark.parametrize("content", ["not json", "[]", '{"idinspect_baseline": 7, "findings": []}',
                                     '{"idinspect_baseline": 1, "findings": [{"count": 1}]}'])
def test_malformed_baselines_are_errors(tmp_path, content, zoo):
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(BaselineError):
        Baseline.read(path)
    assert audit(zoo["llama"], "--baseline", path).code == 2


def test_missing_baseline_is_an_error(zoo, tmp_path):
    res = audit(zoo["llama"], "--baseline", tmp_path / "nope.json", "--format", "sarif")
    assert res.code == 2 and "nope.json" in res.stderr
