"""Hostile matrix, group 5: equivalence that users can trust.

The Python answers are truthful objects (``if idinspect.verify(a, b):``); the tool's own export
audits clean at ``--fail-on warning`` (zero no-op/folded biases raise no findings); buffers are not
compared as weights; a flipped bit in a weight is caught; a closed stdout is not an error.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
import torch

import idinspect
from tests.support.hostile import (
    case_dir,
    read_tensors,
    run_case,
    set_tensor,
    write_tensors,
)


def test_verify_result_is_false_for_different_models(tiny_dir):
    result = idinspect.verify(tiny_dir("gpt2"), tiny_dir("bert"), functional=False)
    assert not result and not result.equivalent


def test_verify_result_is_true_for_the_same_model(tiny_dir):
    assert idinspect.verify(tiny_dir("llama-gqa"), tiny_dir("llama-gqa"), functional=False)


def test_is_gauge_fixed_is_false_for_a_random_model_and_true_for_its_export(tiny_dir, tmp_path):
    src = tiny_dir("llama-bias")
    with idinspect.load(src) as model:
        check = idinspect.is_gauge_fixed(model)
    assert not check
    fixed, worst, where = check                      # still unpacks as before
    assert fixed is False and worst > 0 and where
    idinspect.export(src, tmp_path / "out")
    with idinspect.load(tmp_path / "out") as model:
        assert idinspect.is_gauge_fixed(model)


def test_inspecting_an_export_reports_no_bias_findings(tiny_dir, tmp_path):
    case_dir(tiny_dir("bert"), tmp_path)
    before = run_case(tmp_path, "model", code=0)
    assert "noop-bias" in before.out
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
    after = run_case(tmp_path, "out", code=0)
    assert "noop-bias" not in after.out and "absorbable-bias" not in after.out


@pytest.mark.parametrize("name, where", [("model.layers.0.self_attn.rotary_emb.inv_freq", "b"),
                                         ("model.embed_positions.position_ids", "both")])
def test_buffers_are_not_compared_as_weights(tiny_dir, tmp_path, name, where):
    a = case_dir(tiny_dir("llama-gqa"), tmp_path, "a")
    b = case_dir(tiny_dir("llama-gqa"), tmp_path, "b")
    for folder, values in ((a, torch.arange(4.0)), (b, torch.arange(4.0) + 1)):
        if where == "both" or folder == b:
            tensors, meta = read_tensors(folder)
            tensors[name] = values
            write_tensors(folder, tensors, meta)
    case = run_case(tmp_path, "verify", "a", "b", "--no-functional", code=0)
    assert "buffers not compared" in case.out


def _flip(bit: int):
    def edit(t: torch.Tensor) -> torch.Tensor:
        (word,) = struct.unpack("<I", struct.pack("<f", float(t[0, 0])))
        t[0, 0] = struct.unpack("<f", struct.pack("<I", word ^ (1 << bit)))[0]
        return t
    return edit


@pytest.mark.parametrize("bit", [12, 22])
def test_a_flipped_bit_in_an_export_is_caught(tiny_dir, tmp_path, bit):
    case_dir(tiny_dir("llama-gqa", dtype=torch.float32), tmp_path)
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
    set_tensor(tmp_path / "out", "model.layers.1.self_attn.q_proj.weight", _flip(bit))
    case = run_case(tmp_path, "verify", "model", "out", "--no-functional", code=1)
    assert "NOT equivalent" in case.out and "tolerance" in case.out


def test_export_verifies_with_stated_bounds(tiny_dir, tmp_path):
    case_dir(tiny_dir("llama-gqa", dtype=torch.float32), tmp_path)
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
    case = run_case(tmp_path, "verify", "model", "out", code=0)
    assert "tolerance" in case.out and "equivalent" in case.out


def test_closed_stdout_is_not_an_error(tiny_dir, tmp_path):
    """``idinspect MODEL | head`` where head has already gone: exit 0, nothing on stderr."""
    src = tiny_dir("llama-gqa")
    env = {**os.environ, "COLUMNS": "200"}
    child = subprocess.Popen([sys.executable, "-m", "idinspect", str(src), "--heads", "--layers", "all"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    child.stdout.close()                                  # the reader is gone before the first line
    err = child.stderr.read().decode()
    assert child.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "error" not in err.lower(), err


def _lopsided(folder, cond: float) -> None:
    """Move kv group 0 of every layer along the VO gauge by D = diag(cond, 1, ..., 1) (W_V D, D^-1 W_O)."""
    tensors, meta = read_tensors(folder)
    layers = sorted({k.split(".")[2] for k in tensors if ".self_attn.v_proj.weight" in k})
    for i in layers:
        v, o = f"model.layers.{i}.self_attn.v_proj.weight", f"model.layers.{i}.self_attn.o_proj.weight"
        V, O = tensors[v].double(), tensors[o].double()            # V rows: kv dims; O columns: query dims
        hd = O.shape[1] // 4                                       # tiny llama-gqa: 4 heads, 2 kv heads
        V[0] *= cond
        for h in (0, 1):                                           # the query heads of kv group 0
            O[:, h * hd] /= cond
        tensors[v], tensors[o] = V.to(tensors[v].dtype), O.to(tensors[o].dtype)
    write_tensors(folder, tensors, meta)


def test_gauge_move_into_ill_conditioned_factors_is_equivalent(tiny_dir, tmp_path):
    """The SmolLM2 case: outputs equal to rounding, but one group's value factor has condition number
    1,650; a flat 1e-6 tolerance said "not equivalent". The tolerance follows the conditioning."""
    case_dir(tiny_dir("llama-gqa", dtype=torch.float32), tmp_path, "a")
    b = case_dir(tiny_dir("llama-gqa", dtype=torch.float32), tmp_path, "b")
    _lopsided(b, 1650.0)
    case = run_case(tmp_path, "verify", "a", "b", code=0)
    assert "conditioning" in case.out and "equivalent" in case.out
    set_tensor(b, "model.layers.0.self_attn.q_proj.weight", _flip(12))   # a flipped bit is still caught
    run_case(tmp_path, "verify", "a", "b", "--no-functional", code=1)


def test_a_flipped_bit_beside_an_ill_conditioned_head_is_caught(tiny_dir, tmp_path):
    """The conditioning bound is each head's own: kv group 0 lopsided (condition 1,650) does not
    loosen the tolerance of group 1 in the same layer, whose flipped bit is caught."""
    case_dir(tiny_dir("llama-gqa", dtype=torch.float32), tmp_path, "a")
    b = case_dir(tiny_dir("llama-gqa", dtype=torch.float32), tmp_path, "b")
    _lopsided(b, 1650.0)
    run_case(tmp_path, "verify", "a", "b", "--no-functional", code=0)
    name = "model.layers.0.self_attn.v_proj.weight"
    hd = read_tensors(b)[0][name].shape[0] // 2                  # rows of kv group 1 start here

    def flip_group_1(t: torch.Tensor) -> torch.Tensor:
        (word,) = struct.unpack("<I", struct.pack("<f", float(t[hd, 0])))
        t[hd, 0] = struct.unpack("<f", struct.pack("<I", word ^ (1 << 14)))[0]
        return t
    set_tensor(b, name, flip_group_1)
    case = run_case(tmp_path, "verify", "a", "b", "--no-functional", code=1)
    assert "layer 0 head 2 W_OV" in case.out or "layer 0 head 3 W_OV" in case.out, case.out
