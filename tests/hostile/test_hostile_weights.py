"""Hostile matrix, group 1: weights that are not ordinary numbers, through every command.

inspect/audit report ``non-finite`` (NaN/Inf) and ``overflow`` (finite entries whose products
overflow float64) as findings; ``--html``/``--json`` still write; export refuses with one line
naming the tensor and writes nothing; verify never calls a NaN model equivalent to itself.
Quantised/integer/F8 attention tensors are refused by name, dtype and the way out.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.hostile import case_dir, poke, run_case, set_tensor

Q = "model.layers.0.self_attn.q_proj.weight"
K = "model.layers.1.self_attn.k_proj.weight"
V = "model.layers.0.self_attn.v_proj.weight"
O = "model.layers.1.self_attn.o_proj.weight"
KB = "model.layers.0.self_attn.k_proj.bias"
EMBED = "model.embed_tokens.weight"

BAD_VALUES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


@pytest.fixture
def llama(tiny_dir, tmp_path):
    return lambda: case_dir(tiny_dir("llama-gqa"), tmp_path)


@pytest.mark.parametrize("tensor, value", [(Q, "nan"), (K, "inf"), (V, "-inf"), (O, "nan")])
def test_inspect_reports_non_finite(llama, tmp_path, tensor, value):
    model = llama()
    set_tensor(model, tensor, poke(BAD_VALUES[value]))
    case = run_case(tmp_path, "model", code=0)
    assert "non-finite" in case.out


def test_inspect_reports_non_finite_bias(tiny_dir, tmp_path):
    model = case_dir(tiny_dir("llama-bias"), tmp_path)
    set_tensor(model, KB, poke(float("nan"), (1,)))
    assert "non-finite" in run_case(tmp_path, "model", code=0).out


def test_inspect_huge_finite_weights_report_overflow(llama, tmp_path):
    model = llama()
    set_tensor(model, Q, poke(1e200))
    case = run_case(tmp_path, "model", code=0)
    assert "overflow" in case.out


def test_inspect_subnormal_weights(llama, tmp_path):
    model = llama()
    set_tensor(model, V, lambda t: t * 1e-310)
    run_case(tmp_path, "model", code=0)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_html_and_json_reports_with_non_finite(llama, tmp_path, value):
    model = llama()
    set_tensor(model, Q, poke(BAD_VALUES[value]))
    run_case(tmp_path, "model", "--html", "r.html", "--json", "r.json", code=0, expect=("r.html", "r.json"))
    data = json.loads((tmp_path / "r.json").read_text(), parse_constant=_refuse_constant)
    assert any(f["rule"] == "non-finite" for f in data["findings"])
    assert "<html" in (tmp_path / "r.html").read_text().lower()


def test_html_with_huge_weights(llama, tmp_path):
    model = llama()
    set_tensor(model, K, poke(-1e200))
    run_case(tmp_path, "model", "--html", "r.html", code=0, expect=("r.html",))


def test_json_stdout_with_huge_weights_is_strict_json(llama, tmp_path):
    model = llama()
    set_tensor(model, Q, poke(1e200))
    case = run_case(tmp_path, "model", "--format", "json", code=0)
    json.loads(case.out, parse_constant=_refuse_constant)


def _refuse_constant(name):
    raise AssertionError(f"JSON holds {name}")


@pytest.mark.parametrize("tensor, value", [(Q, float("nan")), (V, float("inf")), (O, 1e200)])
def test_audit_fails_on_bad_numbers(llama, tmp_path, tensor, value):
    model = llama()
    set_tensor(model, tensor, poke(value))
    case = run_case(tmp_path, "audit", "model", code=1)
    assert ("non-finite" if value != 1e200 else "overflow") in case.out + case.err


@pytest.mark.parametrize("tensor, value", [(Q, "nan"), (K, "inf"), (O, "-inf")])
def test_export_refuses_non_finite(llama, tmp_path, tensor, value):
    model = llama()
    set_tensor(model, tensor, poke(BAD_VALUES[value]))
    run_case(tmp_path, "export", "model", "out", code=2, names=(tensor, "non-finite"))
    assert not (tmp_path / "out").exists()


def test_export_refuses_overflowing_weights(llama, tmp_path):
    model = llama()
    set_tensor(model, Q, poke(1e200))
    run_case(tmp_path, "export", "model", "out", code=2, names=(Q,))


def test_export_refuses_non_finite_bias(tiny_dir, tmp_path):
    model = case_dir(tiny_dir("llama-bias"), tmp_path)
    set_tensor(model, KB, poke(float("inf"), (0,)))
    run_case(tmp_path, "export", "model", "out", code=2, names=(KB,))


def test_export_copies_non_finite_outside_attention(llama, tmp_path):
    """A NaN in the embeddings is not attention: copied bit for bit, the export succeeds."""
    model = llama()
    set_tensor(model, EMBED, poke(float("nan")))
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))


def test_export_subnormal_weights(llama, tmp_path):
    model = llama()
    set_tensor(model, V, lambda t: t * 1e-310)
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))


@pytest.mark.parametrize("tensor", [Q, EMBED])
def test_verify_model_with_nan_against_itself_is_not_equivalent(llama, tmp_path, tensor):
    model = llama()
    set_tensor(model, tensor, poke(float("nan")))
    case = run_case(tmp_path, "verify", "model", "model", "--no-functional", code=1)
    assert tensor in case.out and "NaN" in case.out


def test_verify_functional_with_nan_is_not_equivalent(llama, tmp_path):
    model = llama()
    set_tensor(model, Q, poke(float("nan")))
    case = run_case(tmp_path, "verify", "model", "model", "--format", "json", code=1)
    data = json.loads(case.out)
    assert not data["equivalent"]


QUANTISED = {"int8": torch.int8, "uint8": torch.uint8, "int64": torch.int64, "bool": torch.bool,
             "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


@pytest.mark.parametrize("code_name", list(QUANTISED))
def test_inspect_refuses_quantised_attention(llama, tmp_path, code_name):
    model = llama()
    set_tensor(model, Q, lambda t: t.to(QUANTISED[code_name]))
    run_case(tmp_path, "model", code=2, names=(Q, code_name.upper() if code_name.startswith("F8") else code_name,
                                                 "dequantise"))


@pytest.mark.parametrize("command", ["export", "audit", "verify"])
def test_other_commands_refuse_f8_attention(llama, tmp_path, command):
    model = llama()
    set_tensor(model, O, lambda t: t.to(torch.float8_e4m3fn))
    args = {"export": ("model", "out"), "audit": ("model",), "verify": ("model", "model")}[command]
    run_case(tmp_path, command, *args, code=2, names=(O, "dequantise"))
    assert not (tmp_path / "out").exists()
