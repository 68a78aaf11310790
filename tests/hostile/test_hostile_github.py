"""Hostile matrix: escape sequences through ``audit --format github`` and ``$GITHUB_STEP_SUMMARY``.

Folder names, config strings and tensor names that carry ESC, OSC 52 (clipboard), BEL, C1 CSI,
CR/LF (a new workflow command line), ``%`` and ``::`` reach the annotations and the job summary
only escaped: no raw control character, every stdout line is one of idinspect's own workflow
commands, and what the runner unescapes (``%0A``...) is what idinspect escaped.
"""

from __future__ import annotations

import json

import pytest

from tests.support.hostile import case_dir, edit_config, run_case, visible

FOLDERS = {
    "esc-csi": "m\x1b[2Jx",
    "osc52": "m\x1b]52;c;QUFBQQ==\x07",
    "osc8-link": "m\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\",
    "bel": "m\x07\x07",
    "c1-csi": "m\x9b31mred",
    "cr": "m\rfake",
    "newline-command": "m\n::add-mask::secret\n::error::pwned",
    "percent": "m%0A::error::x",
    "colons": "m::warning::x",
    "bidi": "m\u202etxt.exe",
    "del": "m\x7f\x7f",
}


def _check(stdout: str, summary: str) -> None:
    assert visible(stdout) and visible(summary), (stdout[-500:], summary[-500:])
    for line in stdout.splitlines():
        assert line.startswith(("::error ", "::warning ", "::notice ")), f"stray workflow line: {line!r}"


@pytest.mark.parametrize("case", list(FOLDERS))
def test_folder_name_escaped_in_annotations_and_summary(tiny_dir, tmp_path, case):
    work = tmp_path / "work"
    work.mkdir()
    case_dir(tiny_dir("bert"), work, FOLDERS[case])
    summary = tmp_path / "summary.md"
    r = run_case(work, "audit", FOLDERS[case], "--format", "github", code=0, one_line=False,
                 env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.out.count("\n") >= 1
    _check(r.out, summary.read_text())


CONFIG_STRINGS = {
    "model_type-osc52": {"model_type": "x\x1b]52;c;QUFB\x07"},
    "model_type-newline": {"model_type": "x\n::add-mask::y"},
    "architectures-esc": {"architectures": ["Bert\x1b[31mModel"], "model_type": "nope\x1b[0m"},
}


@pytest.mark.parametrize("case", list(CONFIG_STRINGS))
def test_config_strings_escaped_in_error_annotation(tiny_dir, tmp_path, case):
    work = tmp_path / "work"
    work.mkdir()
    model = case_dir(tiny_dir("bert"), work)
    edit_config(model, **CONFIG_STRINGS[case])
    summary = tmp_path / "summary.md"
    r = run_case(work, "audit", "model", "--format", "github", code=1, one_line=False,
                 env={"GITHUB_STEP_SUMMARY": str(summary)}, names=("model_type",))
    assert r.out.startswith("::error ")
    _check(r.out, summary.read_text())


@pytest.mark.parametrize("name", ["x\x1b]52;c;QUFB\x07", "y\n::error::z", "z\x9b2J"])
def test_tensor_name_in_index_escaped(tiny_dir, tmp_path, name):
    work = tmp_path / "work"
    work.mkdir()
    model = case_dir(tiny_dir("bert", max_shard_size="20KB"), work)
    index = model / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"][name] = next(iter(data["weight_map"].values()))
    index.write_text(json.dumps(data))
    summary = tmp_path / "summary.md"
    r = run_case(work, "audit", "model", "--format", "github", code=2, one_line=False,
                 env={"GITHUB_STEP_SUMMARY": str(summary)})
    _check(r.out, summary.read_text())
