"""The per-variant contract of tests/verify/test_verify.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/verify/."""

from __future__ import annotations

import pytest
import torch

import idinspect
from idinspect.equivalence.verify import output_tolerance
from tests.contract.test_export import export_ok
from tests.support.cli import run_cli
from tests.verify.test_verify import _checks  # noqa: F401


@pytest.mark.parametrize("variant", ["llama3-rope", "bert", "llama4-text", "gemma3-text"])
def test_an_export_verifies(variant, tiny_dir, tmp_path):
    src = tiny_dir(variant)
    export_ok(src, tmp_path / "out")
    result = run_cli("verify", src, tmp_path / "out", "--format", "json")
    assert result.code == 0, result.stdout + result.stderr
    checks = _checks(result.stdout)
    assert all(c["passed"] for c in checks.values())
    assert checks["invariants"]["error"] <= 1e-12 and checks["invariants"]["tolerance"] == 1e-10
    assert checks["functional"]["tolerance"] == output_tolerance(src, tmp_path / "out").tolerance
    assert checks["functional"]["error"] <= checks["functional"]["tolerance"]
    if variant == "llama3-rope":
        assert "identical" in checks["decode"]["detail"]
        assert set(checks["invariants"]["extra"]["per_invariant"]) == {"plane_QK", "plane_QJK", "W_OV", "output_bias"}
    if variant == "gemma3-text":                     # q/k norm: the traded gains verify by their products
        assert set(checks["invariants"]["extra"]["per_invariant"]) == {"qk_factors", "qk_gains", "W_OV", "output_bias"}


@pytest.mark.parametrize("variant", ["llama3-rope", "gpt2", "bert", "t5"])
def test_streamed_forward_equals_the_float64_model_in_memory(variant, tmp_path, monkeypatch):
    """A model loaded in its stored dtype with each module widened to float64 for its own forward
    computes what the whole float64 model computes (issue 20: verify's peak is one stored model
    plus a module), logits and greedy tokens alike."""
    from idinspect.equivalence import functional as fn
    from tests.support import tiny

    src = tiny.save(tiny.build(variant), tmp_path / "m", dtype=torch.float32)
    config = idinspect.load(src).hf_config
    ids = fn.probe_ids(config, 8, 3, 0)
    decode = 3 if fn.is_causal_lm(config) else 0
    whole = fn.run_model(src, ids, decode, fn.LoadPlan(offload=False, compute_dtype=torch.float64))
    monkeypatch.setattr(fn, "LINEAR_CHUNK_ELEMENTS", 50)       # the vocabulary head in row chunks too
    streamed = fn.run_model(src, ids, decode, fn.LoadPlan(offload=False, compute_dtype=torch.float64, streamed=True))
    assert streamed.kind == whole.kind and streamed.values.dtype == torch.float64
    assert torch.allclose(streamed.values, whole.values, rtol=1e-12, atol=1e-12 * float(whole.values.abs().max()))
    assert (streamed.decoded is None and whole.decoded is None) or torch.equal(streamed.decoded, whole.decoded)
