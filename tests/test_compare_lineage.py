"""The verdicts the issue asks for, on a small trained Llama (8 layers x 8 heads) and on the real
all-MiniLM-L6-v2: disguised copies are the same function, fine-tuned and quantised copies the
same lineage, independently trained models unrelated."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers as tf

from idinspect.compare import compare
from tests import compare_models as cm
from tests.cli import run_cli


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    """Saved checkpoints: A (trained 150 steps), its disguise in bf16, a 200-step fine-tune of A,
    an int8 round trip of A, and C (independently initialised and trained 150 steps)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                      # tiny matrices: one thread is fastest
    try:
        root = tmp_path_factory.mktemp("llamas")
        A = cm.train(cm.small_llama(0), 150, 3e-3, seed=0)
        C = cm.train(cm.small_llama(1), 150, 3e-3, seed=1)
        F = cm.train(copy.deepcopy(A), 200, 3e-4, seed=7)
        D = cm.disguise_llama(A, seed=1)
        ids = torch.randint(0, A.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            same = (copy.deepcopy(A).double()(input_ids=ids).logits - D(input_ids=ids).logits).abs().max()
        paths = {}
        for name, model, dtype in (("A", A, None), ("C", C, None), ("F", F, None), ("D", D, torch.bfloat16),
                                   ("Q", cm.quantise_int8(A), None)):
            paths[name] = root / name
            (model.to(dtype) if dtype else model).save_pretrained(paths[name])
        paths["function_error"] = float(same)
        return paths
    finally:
        torch.set_num_threads(threads)


def test_disguise_keeps_the_function(llamas):
    # float64 logits of A and of its disguise (transformers' RMSNorm normalises in float32: ~1e-7)
    assert llamas["function_error"] < 1e-5


def test_disguised_bf16_copy_is_same_function(llamas):
    r = compare(llamas["A"], llamas["D"])
    assert r.verdict == "same-function", r.same_function
    assert r.same_function["worst"]["ratio"] < 1.0
    assert r.lineage.p_value < 1e-6
    res = run_cli("compare", llamas["A"], llamas["D"])
    assert res.code == 0 and "verdict: same-function" in res.stdout


def test_fine_tuned_copy_is_same_lineage(llamas):
    r = compare(llamas["A"], llamas["F"])
    assert r.verdict == "same-lineage"
    assert r.lineage.p_value < 1e-6
    assert not r.same_function["holds"]
    assert run_cli("compare", llamas["A"], llamas["F"]).code == 1                       # not the same function
    assert run_cli("compare", llamas["A"], llamas["F"], "--expect", "same-lineage").code == 0


def test_quantised_copy_is_same_lineage(llamas):
    r = compare(llamas["A"], llamas["Q"])
    assert r.verdict == "same-lineage" and r.lineage.p_value < 1e-6


def test_independent_models_are_unrelated(llamas):
    r = compare(llamas["A"], llamas["C"])
    assert r.verdict == "unrelated"
    assert r.lineage.p_value > 1e-3
    assert run_cli("compare", llamas["A"], llamas["C"], "--expect", "same-lineage").code == 1
    assert run_cli("compare", llamas["A"], llamas["C"], "--expect", "unrelated").code == 0


@pytest.fixture(scope="module")
def minilm_variants(minilm_dir, tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("minilm")
        M = tf.BertModel.from_pretrained(minilm_dir).float().eval()
        D = cm.disguise_bert(M, seed=3)
        ids = torch.randint(0, 1000, (2, 10), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            err = (copy.deepcopy(M).double()(input_ids=ids).last_hidden_state - D(input_ids=ids).last_hidden_state)
        out = {"function_error": float(err.abs().max())}
        F = cm.regress(copy.deepcopy(M), 12, 1e-4, seed=0)
        torch.manual_seed(5)
        C = cm.regress(tf.BertModel(copy.deepcopy(M.config)), 5, 1e-3, seed=1)
        for name, model, dtype in (("D", D, torch.bfloat16), ("F", F, None), ("Q", cm.quantise_int8(M), None), ("C", C, None)):
            out[name] = root / name
            (model.to(dtype) if dtype else model).save_pretrained(out[name])
        return out
    finally:
        torch.set_num_threads(threads)


def test_minilm_verdicts(minilm_dir, minilm_variants):
    v = minilm_variants
    assert v["function_error"] < 1e-9
    got = {name: compare(minilm_dir, v[name]) for name in ("D", "F", "Q", "C")}
    assert got["D"].verdict == "same-function", got["D"].same_function
    assert got["F"].verdict == "same-lineage" and got["F"].lineage.p_value < 1e-6
    assert got["Q"].verdict == "same-lineage" and got["Q"].lineage.p_value < 1e-6
    assert got["C"].verdict == "unrelated" and got["C"].lineage.p_value > 1e-3
