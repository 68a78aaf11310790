"""GitHub annotations (escaping, order, limits), the job summary, and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from idinspect.reports.github import (
    annotations,
    command,
    escape_data,
    escape_property,
    md,
    step_summary,
)
from idinspect.reports.junit import render_junit

from tests.audit.test_audit_fixtures import audit, isolated_cwd, zoo  # noqa: F401


def test_escaping_follows_the_runner_rules():
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    line = command("error", "bad: 1,2\nthen", file="models/x,y:z/model.safetensors", line=1, title="t: 1, 2")
    assert line == "::error file=models/x%2Cy%3Az/model.safetensors,line=1,title=t%3A 1%2C 2::bad: 1,2%0Athen"
    assert command("notice", "plain") == "::notice::plain"


def _result(severities: list[str]) -> dict:
    findings = [{"rule": f"r{i}", "severity": s, "message": f"m{i}", "tensor": f"t{i}", "layer": 0,
                 "file": "model.safetensors", "path": "m/model.safetensors", "uri": "m/model.safetensors",
                 "fingerprint": "0" * 64} for i, s in enumerate(severities)]
    return {"audit": {"verdict": "fail", "fail_on": "error", "counts": {}},
            "models": [{"audit": {"source": "m", "identity": "m", "findings": findings, "error": None,
                                  "verdict": "fail", "counts": {}}}]}


def test_worst_first_at_most_ten_per_kind_then_a_counting_notice():
    lines = annotations(_result(["note"] * 3 + ["warning"] * 14 + ["error"] * 2))
    kinds = [line.split(" ", 1)[0].split("::")[1] for line in lines]
    assert kinds[:2] == ["error", "error"] and kinds[2:12] == ["warning"] * 10
    assert kinds[12:15] == ["notice"] * 3
    assert "4 more findings" in lines[-1] and "4 warnings" in lines[-1]
    assert len(lines) == 16
    assert annotations(_result(["warning"] * 3))[-1].startswith("::warning ")


def test_notice_budget_leaves_room_for_the_counting_notice():
    lines = annotations(_result(["note"] * 12))
    assert sum(line.startswith("::notice ") for line in lines) == 10
    assert "3 more" in lines[-1]


def test_markdown_cells_are_escaped():
    assert md("a|b\nc<script>") == "a\\|b<br>c&lt;script&gt;"
    r = _result(["error"])
    r["models"][0]["audit"]["findings"][0]["tensor"] = "x|y"
    text = step_summary(r)
    assert "x\\|y" in text and "## idinspect audit" in text


def test_github_format_through_the_cli_with_a_step_summary(zoo, isolated_cwd, monkeypatch):
    summary = isolated_cwd / "summary.md"
    summary.write_text("previous step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = audit(zoo["gpt2"], zoo["llama-nan"], "--format", "github", "--fail-on", "warning")
    assert res.code == 1
    lines = res.stdout.splitlines()
    assert lines[0].startswith("::error file=") and "non-finite" in lines[0]
    assert all(line.startswith("::") for line in lines)
    order = [line.split(" ", 1)[0] for line in lines]
    assert order == sorted(order, key=lambda k: ["::error", "::warning", "::notice"].index(k))
    text = summary.read_text()
    assert text.startswith("previous step\n") and "| Model | Verdict |" in text and "❌ fail" in text


def test_junit_counts_failures_at_the_threshold(zoo):
    res = audit(zoo["gpt2"], "--format", "junit", "--fail-on", "warning")
    assert res.code == 1
    root = ET.fromstring(res.stdout)
    assert root.tag == "testsuites" and root.get("failures") == "1"
    [suite] = root.findall("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert len(cases) == 9                     # one per rule of idinspect.rules.RULES
    assert cases["noop-bias"].find("failure") is not None
    assert cases["absorbable-bias"].find("failure") is None and cases["absorbable-bias"].find("system-out") is not None
    assert cases["not-gauge-fixed"].find("skipped") is not None
    root = ET.fromstring(audit(zoo["gpt2"], "--format", "junit", "--fail-on", "note").stdout)
    assert root.get("failures") == "2"
    root = ET.fromstring(audit(zoo["gpt2"], "--format", "junit").stdout)
    assert root.get("failures") == "0" and root.get("tests") == "9"


def test_junit_survives_hostile_strings():
    r = _result(["error"])
    r["models"][0]["audit"]["findings"][0]["message"] = "bad \x00 <&> ]]> \x1b[31m"
    root = ET.fromstring(render_junit(r))
    assert root.get("failures") == "1"
