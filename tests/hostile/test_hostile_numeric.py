"""Hostile matrix: numeric edges of the attention weights through export, verify, inspect and audit.

Every attention weight scaled into a corner of its dtype: all subnormal, by 1e30 (float32), to near
float32's or float16's maximum, and float64 scaled by 1e200. Each command gives a well-defined
result (an export that verify calls equivalent, a report with the ``overflow`` finding) or a
one-line refusal naming the tensor, the reason and the largest value; never an internal error.
Also: a folder name that is not UTF-8 with ``--html``, and verify leaving no compile cache behind.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from tests.support.hostile import case_dir, read_tensors, run_case, write_tensors


def scale_attention(folder, edit) -> None:
    tensors, meta = read_tensors(folder)
    for name, t in tensors.items():
        if ".self_attn." in name and name.endswith("weight"):
            tensors[name] = edit(t)
    write_tensors(folder, tensors, meta)


def to_max(limit: float):
    return lambda t: (t.double() / t.double().abs().max() * limit).to(t.dtype)


F32_EDGES = {
    # case: (edit, export in the stored dtype: None = exported, else words of the refusal)
    "subnormal": (lambda t: (t.double() * 1e-40).to(t.dtype), ("smallest normal", "largest value", "--dtype float64")),
    "scaled-1e30": (lambda t: t * 1e30, None),
    "near-f32-max": (to_max(3.0e38), ("not finite in float32", "largest value", "--dtype float64")),
    "near-f16-max": (to_max(65000.0), None),
    "tiny-but-normal": (lambda t: (t.double() * 1e-30).to(t.dtype), None),
}


@pytest.fixture
def f32(tiny_dir, tmp_path):
    def make(case: str):
        model = case_dir(tiny_dir("llama-gqa", dtype=torch.float32), tmp_path)
        scale_attention(model, F32_EDGES[case][0])
        return model
    return make


@pytest.mark.parametrize("case", list(F32_EDGES))
def test_export_in_stored_dtype(f32, tmp_path, case):
    f32(case)
    refusal = F32_EDGES[case][1]
    if refusal is None:
        run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
        r = run_case(tmp_path, "verify", "model", "out", code=0, one_line=False)
        assert "equivalent" in r.out and "NOT" not in r.out
    else:
        r = run_case(tmp_path, "export", "model", "out", code=2, names=("self_attn", *refusal))
        assert re.search(r"largest value \d\.\d+e[+-]\d+", r.err), r.err
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", list(F32_EDGES))
def test_export_float64_then_verify(f32, tmp_path, case):
    f32(case)
    run_case(tmp_path, "export", "model", "out", "--dtype", "float64", code=0, expect=("out",))
    r = run_case(tmp_path, "verify", "model", "out", code=0, one_line=False)
    assert "NOT" not in r.out


@pytest.mark.parametrize("case", list(F32_EDGES))
@pytest.mark.parametrize("command", [(), ("audit",), ("--format", "json")])
def test_inspect_f32_edges(f32, tmp_path, case, command):
    f32(case)
    if command == ("audit",):
        r = _run_any(tmp_path, "audit", "model")
        assert r.code in (0, 1)     # findings or none, never an error
        return
    r = run_case(tmp_path, "model", *command, code=0)
    if command:
        json.loads(r.out)


def _run_any(root, *args):
    from tests.support.cli import run_cli
    from tests.support.hostile import _cwd

    with _cwd(root):
        r = run_cli(*args)
    assert "Traceback" not in r.stdout + r.stderr and "internal error" not in r.stdout + r.stderr, r.stderr
    return r


def test_functional_check_skipped_with_reason_when_transformers_overflows(f32, tmp_path):
    """1e30-scaled float32 weights: transformers' own run gives NaN (its float32 softmax); verify says so
    and lets the invariants decide, instead of failing on NaN != NaN."""
    f32("scaled-1e30")
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
    r = run_case(tmp_path, "verify", "model", "out", code=0, one_line=False)
    assert "not finite" in r.out and "the invariants decide" in r.out


@pytest.fixture
def f64_1e200(tiny_dir, tmp_path):
    model = case_dir(tiny_dir("llama-gqa"), tmp_path)
    scale_attention(model, lambda t: t * 1e200)
    return model


@pytest.mark.parametrize("args,code,expect", [
    ((), 0, ()),
    (("--format", "json"), 0, ()),
    (("--html", "r.html"), 0, ("r.html",)),
    (("--json", "r.json"), 0, ("r.json",)),
    (("--heads",), 0, ()),
    (("--prove",), 0, ()),
])
def test_inspect_float64_scaled_1e200(f64_1e200, tmp_path, args, code, expect):
    r = run_case(tmp_path, "model", *args, code=code, expect=expect)
    text = r.out if not expect else (tmp_path / expect[0]).read_text()
    assert "overflow" in text
    if args and args[0] == "--format":
        data = json.loads(r.out)
        assert any(f["kind"] == "overflow" if "kind" in f else f.get("rule") == "overflow"
                   for f in data.get("findings", [])) or "overflow" in r.out


def test_audit_float64_scaled_1e200(f64_1e200, tmp_path):
    r = run_case(tmp_path, "audit", "model", code=1, one_line=False, env={"COLUMNS": "1000"})
    assert "overflow" in r.out


@pytest.mark.parametrize("command", [("export", "model", "out"), ("export", "model", "out", "--dtype", "float32")])
def test_export_float64_scaled_1e200_refused_with_largest_value(f64_1e200, tmp_path, command):
    r = run_case(tmp_path, *command, code=2, names=("self_attn", "overflow"))
    assert re.search(r"\d\.\d+e\+200", r.err), r.err


def test_verify_float64_scaled_1e200_against_itself(f64_1e200, tmp_path):
    case_dir(f64_1e200, tmp_path, "copy")
    r = run_case(tmp_path, "verify", "model", "copy", code=2, names=("self_attn", "overflow float64", "largest")
                 if False else ("self_attn", "overflow float64", "holds values up to"))
    assert re.search(r"\d\.\d+e\+200", r.err), r.err


@pytest.mark.parametrize("name", [b"caf\xe9-model", b"\xff\xfe", b"m\x80\x81"])
@pytest.mark.parametrize("out", ["--html", "--json"])
def test_non_utf8_folder_name(tiny_dir, tmp_path, name, out):
    folder = os.fsdecode(name)
    case_dir(tiny_dir("bert"), tmp_path, folder)
    target = "r.html" if out == "--html" else "r.json"
    run_case(tmp_path, folder, out, target, code=0, expect=(target,))
    text = (tmp_path / target).read_bytes().decode("utf-8")     # valid UTF-8
    assert "\\udc" in text


def test_verify_leaves_no_compile_cache(tiny_dir, tmp_path):
    """Unless the user chose a folder (TORCHINDUCTOR_CACHE_DIR), torch's compile cache goes to a folder
    of idinspect's in the temp folder and is removed (run as its own process, as a user runs it)."""
    import subprocess
    import sys
    from pathlib import Path

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    case_dir(tiny_dir("llama-gqa", dtype=torch.float32), work)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env.update(TMPDIR=str(tmpdir), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    r = subprocess.run([sys.executable, "-m", "idinspect", "verify", "model", "model"], cwd=work, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(tmpdir.iterdir()), sorted(p.name for p in tmpdir.iterdir())
