"""The library as a Python user meets it: a readable ``Model`` repr, and every yes/no function
returns an object whose truth value is the answer (``if idinspect.verify(a, b):``)."""

from __future__ import annotations

import torch

import idinspect
from idinspect.audit.policy import Policy
from idinspect.audit.run import run_audit
from tests.support import tiny


def test_model_repr_names_source_family_and_shape(tiny_dir):
    path = tiny_dir("llama-gqa")
    with idinspect.load(str(path)) as model:
        text = repr(model)
    assert text.startswith(f"<idinspect.Model {str(path)!r}: llama (LlamaForCausalLM), ")
    assert "H=4, G=2, d_k=4, d=16, rope>" in text and "blocks" in text
    with idinspect.load(tiny.build("bert")) as model:  # a model in memory
        assert "bert (" in repr(model) and "absolute>" in repr(model)


def test_verify_and_is_gauge_fixed_are_truthy_exactly_when_the_answer_is_yes(tiny_dir, tmp_path):
    src = tiny_dir("llama-gqa")
    out = tmp_path / "fixed"
    idinspect.export(str(src), str(out))
    same = idinspect.verify(str(src), str(out), functional=False)
    assert bool(same) is True and same.equivalent
    hf = tiny.build("llama-gqa")
    with torch.no_grad():
        hf.model.layers[0].self_attn.o_proj.weight.mul_(1.5)   # another function
    other = tiny.save(hf, tmp_path / "other")
    differs = idinspect.verify(str(src), str(other), functional=False)
    assert bool(differs) is False and not differs.equivalent
    with idinspect.load(str(out)) as fixed, idinspect.load(str(src)) as raw:
        assert bool(idinspect.is_gauge_fixed(fixed)) is True
        assert bool(idinspect.is_gauge_fixed(raw)) is False


def test_audit_result_is_truthy_when_the_models_pass(tiny_dir, minilm_dir):
    clean = run_audit([str(tiny_dir("llama-gqa"))], Policy())
    assert clean.verdict() == "pass" and bool(clean) is True
    flagged = run_audit([str(minilm_dir)], Policy(cli_fail_on="warning"))   # its key biases are no-ops (warning)
    assert flagged.verdict() == "fail" and bool(flagged) is False
