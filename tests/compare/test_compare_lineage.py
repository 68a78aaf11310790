"""The verdicts the issue asks for, on a small trained Llama (8 layers x 8 heads) and on the real
all-MiniLM-L6-v2: disguised copies are the same function, fine-tuned and quantised copies the
same lineage, independently trained models unrelated."""

from __future__ import annotations

import pytest

from idinspect.compare import compare
from tests.support import compare_models as cm
from tests.support.cli import run_cli


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    return cm.llama_set(tmp_path_factory.mktemp("llamas"))


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
    return cm.minilm_set(tmp_path_factory.mktemp("minilm"), minilm_dir)


def test_minilm_verdicts(minilm_dir, minilm_variants):
    v = minilm_variants
    assert v["function_error"] < 1e-9
    got = {name: compare(minilm_dir, v[name]) for name in ("D", "F", "Q", "C")}
    assert got["D"].verdict == "same-function", got["D"].same_function
    assert got["F"].verdict == "same-lineage" and got["F"].lineage.p_value < 1e-6
    assert got["Q"].verdict == "same-lineage" and got["Q"].lineage.p_value < 1e-6
    assert got["C"].verdict == "unrelated" and got["C"].lineage.p_value > 1e-3
