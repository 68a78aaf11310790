"""Audit policy: pyproject discovery, --config, strict keys, severities, disabled rules,
per-model overrides, and the command line winning over files."""

from __future__ import annotations

from pathlib import Path

import pytest

from idinspect.audit.policy import (
    Policy,
    PolicyError,
    cli_settings,
    discover,
    load_policy,
    parse_table,
)
from tests.audit.test_audit_fixtures import (  # noqa: F401
    audit,
    audit_json,
    findings_of,
    isolated_cwd,
    zoo,
)


def write_pyproject(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text("[project]\nname = \"demo\"\n\n" + body)
    return path


def test_defaults_without_any_file(isolated_cwd):
    policy = load_policy()
    assert policy.source is None and policy.fail_on == "error"
    mp = policy.for_model("x")
    assert mp.level("noop-bias") == "warning" and mp.level("absorbable-bias") == "note"
    assert mp.level("non-finite") == "error" and not mp.require_gauge_fixed and mp.max_unidentified_ratio is None


def test_pyproject_found_from_a_nested_directory(zoo, isolated_cwd, monkeypatch):
    write_pyproject(isolated_cwd, '[tool.idinspect.audit]\nfail-on = "warning"\n')
    nested = isolated_cwd / "a" / "b"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    assert discover() == isolated_cwd / "pyproject.toml"
    res = audit(zoo["gpt2"])
    assert res.code == 1, res.stdout + res.stderr
    assert audit(zoo["gpt2"], "--no-config").code == 0


def test_pyproject_without_the_table_is_skipped(isolated_cwd, monkeypatch):
    write_pyproject(isolated_cwd, '[tool.idinspect.audit]\nfail-on = "note"\n')
    inner = isolated_cwd / "pkg"
    inner.mkdir()
    write_pyproject(inner, "[tool.other]\nx = 1\n")
    monkeypatch.chdir(inner)
    assert load_policy().fail_on == "note"


def test_unknown_key_is_an_error_naming_it(zoo, isolated_cwd):
    write_pyproject(isolated_cwd, '[tool.idinspect.audit]\nfail_on = "warning"\n')
    res = audit(zoo["llama"])
    assert res.code == 2
    assert "fail_on" in res.stderr and "fail-on" in res.stderr
    write_pyproject(isolated_cwd, '[[tool.idinspect.audit.overrides]]\nmodels = ["x"]\nbogus-key = 1\n')
    res = audit(zoo["llama"], "--format", "json")
    assert res.code == 2 and "bogus-key" in res.stderr


@pytest.mark.parametrize("body, needle", [
    ('severity = { no-such-rule = "error" }', "no-such-rule"),
    ('disable = ["nope"]', "nope"),
    ('severity = { noop-bias = "high" }', "high"),
    ('fail-on = "fatal"', "fatal"),
    ("max-unidentified-ratio = 2", "max-unidentified-ratio"),
    ('require-gauge-fixed = "yes"', "require-gauge-fixed"),
    ("overrides = [{ severity = {} }]", "models"),
    ("fail-on = [", "TOML"),
])
def test_bad_policy_values_are_errors(tmp_path, body, needle):
    cfg = tmp_path / "idinspect.toml"
    cfg.write_text(body + "\n")
    with pytest.raises(PolicyError, match=needle):
        load_policy(cfg)


def test_bad_policy_exits_2_in_machine_formats_too(zoo, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('severity = { nope = "error" }\n')
    for fmt in ("json", "sarif", "junit", "github"):
        res = audit(zoo["llama"], "--config", cfg, "--format", fmt)
        assert res.code == 2 and res.stdout, fmt
    assert audit(zoo["llama"], "--config", tmp_path / "missing.toml").code == 2


def test_per_rule_severity_override(zoo, isolated_cwd):
    write_pyproject(isolated_cwd, '[tool.idinspect.audit.severity]\nnoop-bias = "error"\n')
    code, doc = audit_json(zoo["gpt2"])
    assert code == 1
    assert {f["severity"] for f in findings_of(doc) if f["rule"] == "noop-bias"} == {"error"}
    assert doc["audit"]["config"].endswith("pyproject.toml")


def test_disabled_rule(zoo, isolated_cwd):
    write_pyproject(isolated_cwd, '[tool.idinspect.audit]\nfail-on = "warning"\ndisable = ["noop-bias"]\n')
    code, doc = audit_json(zoo["gpt2"])
    assert code == 0
    assert "noop-bias" not in {f["rule"] for f in findings_of(doc)}
    assert doc["models"][0]["audit"]["policy"]["severity"]["noop-bias"] == "off"


def test_severity_off_disables_too(zoo):
    code, doc = audit_json(zoo["llama-nan"], "--severity", "non-finite=off")
    assert code == 0 and findings_of(doc) == []


def test_command_line_wins_over_the_config(zoo, isolated_cwd):
    write_pyproject(isolated_cwd, '[tool.idinspect.audit]\nfail-on = "warning"\n'
                                  '[tool.idinspect.audit.severity]\nabsorbable-bias = "error"\n')
    assert audit(zoo["gpt2"]).code == 1
    assert audit(zoo["gpt2"], "--fail-on", "error", "--severity", "absorbable-bias=note").code == 0
    write_pyproject(isolated_cwd, '[tool.idinspect.audit]\ndisable = ["non-finite"]\n')
    assert audit(zoo["llama-nan"]).code == 0
    assert audit(zoo["llama-nan"], "--severity", "non-finite=error").code == 1


def test_per_model_overrides(zoo, isolated_cwd):
    gpt2 = zoo["gpt2"]
    write_pyproject(isolated_cwd, '[tool.idinspect.audit]\nfail-on = "warning"\n\n'
                                  '[[tool.idinspect.audit.overrides]]\n'
                                  f'models = ["*/{gpt2.name}"]\nseverity = {{ noop-bias = "note" }}\n')
    code, doc = audit_json(gpt2, zoo["gpt2-other"])
    assert code == 1  # the override covers gpt2 only; gpt2-other still has warning no-op biases
    by_source = {m["audit"]["source"]: m["audit"] for m in doc["models"]}
    assert by_source[str(gpt2)]["verdict"] == "pass"
    assert by_source[str(gpt2)]["policy"]["overrides"] == [f"*/{gpt2.name}"]
    assert by_source[str(zoo["gpt2-other"])]["verdict"] == "fail"
    assert audit(gpt2).code == 0
    assert audit(gpt2, "--severity", "noop-bias=warning").code == 1  # the command line beats overrides


def test_override_globs_match_paths_relative_to_the_config(tmp_path):
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text('[tool.idinspect.audit]\n[[tool.idinspect.audit.overrides]]\n'
                   'models = ["models/legacy-*"]\nmax-unidentified-ratio = 0.9\n')
    (tmp_path / "models" / "legacy-bert").mkdir(parents=True)
    policy = load_policy(cfg)
    assert policy.for_model("elsewhere/legacy-bert", tmp_path / "models" / "legacy-bert").max_unidentified_ratio == 0.9
    assert policy.for_model("models/new", tmp_path / "models" / "new").max_unidentified_ratio is None


def test_config_file_with_top_level_keys_or_the_tool_table(tmp_path):
    flat = tmp_path / "audit.toml"
    flat.write_text('fail-on = "note"\nbaseline = "b.json"\n')
    policy = load_policy(flat)
    assert policy.fail_on == "note" and policy.baseline == tmp_path / "b.json"
    nested = tmp_path / "other.toml"
    nested.write_text('[tool.idinspect.audit]\nfail-on = "warning"\n')
    assert load_policy(nested).fail_on == "warning"
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("[tool.ruff]\nline-length = 100\n")
    with pytest.raises(PolicyError, match="no \\[tool.idinspect.audit\\]"):
        load_policy(wrong)


def test_layering_in_the_library():
    policy = parse_table({"severity": {"noop-bias": "error"}, "require-gauge-fixed": True,
                          "overrides": [{"models": ["a*"], "require-gauge-fixed": False, "gauge-rtol": 1e-3}]},
                         Path("pyproject.toml"))
    assert policy.for_model("b").require_gauge_fixed is True
    assert policy.for_model("abc").require_gauge_fixed is False and policy.for_model("abc").gauge_rtol == 1e-3
    cli = policy.with_cli(cli_settings(severity=("noop-bias=note",), require_gauge_fixed=True), "note")
    assert cli.for_model("abc").require_gauge_fixed is True and cli.for_model("abc").level("noop-bias") == "note"
    assert cli.fail_on == "note" and Policy().fail_on == "error"


def test_one_severity_order_for_the_audit_and_the_writers():
    """rules.SEVERITIES is the only order: severity_rank grows with severity (unknown text below
    note), and the report views list worst first from it."""
    from idinspect.reports.summary import findings_by_rule, severity_counts

    from idinspect.rules import SEVERITIES, WORST_FIRST, severity_rank

    assert [severity_rank(s) for s in (*SEVERITIES, "custom")] == [0, 1, 2, -1]
    assert WORST_FIRST == ("error", "warning", "note")
    findings = [{"rule": "a", "severity": "note"}, {"rule": "b", "severity": "custom"},
                {"rule": "c", "severity": "error"}, {"rule": "a", "severity": "warning"}]
    assert [(rule, worst) for rule, worst, _ in findings_by_rule(findings)] == [
        ("c", "error"), ("a", "warning"), ("b", "custom")]
    assert list(severity_counts(findings)) == ["error", "warning", "note", "custom"]
