"""The shipped integration examples: the GitHub Actions workflow and the pre-commit hook."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from tests.audit.test_audit_fixtures import isolated_cwd, zoo  # noqa: F401
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]


def test_workflow_audits_and_uploads_sarif():
    wf = yaml.safe_load((ROOT / "docs" / "github-actions-audit.yml").read_text())
    assert wf["permissions"]["security-events"] == "write"
    steps = wf["jobs"]["audit"]["steps"]
    audit = next(s for s in steps if s.get("id") == "audit")
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif@"))
    sarif_file = upload["with"]["sarif_file"]
    assert f"--format sarif --output {sarif_file}" in audit["run"]
    assert "steps.audit.outputs.code" in upload["if"]  # never upload an incomplete (exit 2) report
    assert any("exit ${{ steps.audit.outputs.code }}" in s.get("run", "") for s in steps)


def test_pre_commit_hook_runs_the_audit_on_changed_checkpoint_files(zoo):
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "idinspect-audit" and hook["language"] == "python"
    files = re.compile(hook["files"])
    assert files.search("models/gpt2/config.json") and files.search("m/model-00001-of-00002.safetensors")
    assert files.search("m/model.safetensors.index.json") and not files.search("src/app.py")
    argv = shlex.split(hook["entry"])
    assert argv[:2] == ["idinspect", "audit"]
    changed = [zoo["llama-nan"] / "config.json", zoo["llama-nan"] / "model.safetensors", zoo["llama"] / "config.json"]
    res = run_cli(*argv[1:], *changed)
    assert res.code == 1, res.stdout + res.stderr  # the NaN fails the commit
    assert res.stdout.count("PASS") == 1 and res.stdout.count("FAIL") == 2  # two models, one summary line
