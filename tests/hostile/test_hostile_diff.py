"""Hostile matrix: ``idinspect diff`` of checkpoints holding NaN, Inf or huge values, and of unrelated models.

Each is a result (exit 0, a document that satisfies idinspect/schemas/diff.schema.json, every figure
finite) or a one-line refusal naming the side, the layer and the fix (exit 2) — never an internal
error; the inputs stay unchanged and nothing is left behind (tests/support/hostile.py :func:`run_case`).
"""

from __future__ import annotations

import json
import math
import shutil

import jsonschema
import pytest
import torch

from idinspect.compare.json_schema import SCHEMAS
from tests.support import tiny
from tests.support.cli import run_cli
from tests.support.hostile import poke, read_tensors, run_case, set_tensor

Q0 = "model.layers.0.self_attn.q_proj.weight"


def _finite(x) -> bool:
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, list):
        return all(_finite(v) for v in x)
    return True


def _result(case) -> dict:
    doc = json.loads(case.out)
    jsonschema.validate(doc, json.loads((SCHEMAS / "diff.schema.json").read_text()))
    assert _finite(doc) and 0.0 <= doc["totals"]["rho"] <= 1.0
    return doc


# (dtype, tensor, value, edit A, edit B, expected exit, words of the refusal) -----------------------------
EDITS = {
    "NaN in W_Q, A = B": (torch.float64, Q0, float("nan"), True, True, 2, ("A (", "layer 0 W_Q holds NaN or Inf")),
    "Inf in W_Q, A = B": (torch.float64, Q0, float("inf"), True, True, 2, ("layer 0 W_Q holds NaN or Inf",)),
    "-Inf in W_O": (torch.float64, "model.layers.1.self_attn.o_proj.weight", -float("inf"), True, True, 2,
                    ("layer 1 W_O holds NaN or Inf",)),
    "NaN in B only": (torch.float64, Q0, float("nan"), False, True, 2, ("B (", "layer 0 W_Q")),
    "NaN in float32": (torch.float32, Q0, float("nan"), True, True, 2, ("layer 0 W_Q holds NaN or Inf",)),
    "NaN in bfloat16": (torch.bfloat16, Q0, float("nan"), True, True, 2, ("layer 0 W_Q holds NaN or Inf",)),
    "1e200, A = B": (torch.float64, Q0, 1e200, True, True, 2, ("layer 0", "overflow float64", "1e+200")),
    "1e200 in A only": (torch.float64, Q0, 1e200, True, False, 2, ("layer 0", "overflow float64")),
    "1e300 in W_V": (torch.float64, "model.layers.0.self_attn.v_proj.weight", 1e300, True, True, 2, ("overflow",)),
    "1e100, A = B": (torch.float64, Q0, 1e100, True, True, None, ("layer 0", "overflow float64")),
    "1e50, A = B": (torch.float64, Q0, 1e50, True, True, 0, ()),
    "float32 max, A = B": (torch.float32, Q0, 3.0e38, True, True, 0, ()),
    "bfloat16 max, A = B": (torch.bfloat16, Q0, 3.0e38, True, True, None, ("layer 0",)),
    "float16 max, A = B": (torch.float16, Q0, 65504.0, True, True, None, ("layer 0",)),
    "subnormal float32": (torch.float32, Q0, 1e-44, True, True, 0, ()),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_diff_of_non_finite_or_huge_weights(tmp_path, case):
    dtype, name, value, edit_a, edit_b, code, words = EDITS[case]
    base = tiny.save(tiny.build("llama-gqa"), tmp_path / "base", dtype=dtype)
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, edit in ((a, edit_a), (b, edit_b)):
        shutil.copytree(base, folder)
        if edit:
            set_tensor(folder, name, poke(value))
    assert read_tensors(a)[0][name].dtype == dtype
    for fmt in ("json", "text"):
        expected = code
        if expected is None:     # a result or a refusal, whichever the arithmetic allows: never anything else
            expected = run_cli("diff", a, b, "--format", fmt).code
            assert expected in (0, 2)
        result = run_case(tmp_path, "diff", a, b, "--format", fmt, code=expected, names=words if expected else ())
        if expected == 0 and fmt == "json":
            _result(result)


# unrelated models of one shape: a result ----------------------------------------------------------------
UNRELATED = [(variant, dtype) for variant in ("llama-gqa", "bert", "gpt2")
             for dtype in (torch.float64, torch.float32, torch.bfloat16)]
