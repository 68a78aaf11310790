"""The per-variant contract of tests/compare/test_diff_step_products.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/compare/."""

from __future__ import annotations

import pytest
import torch

from idinspect.numerics import low_precision_gemm
from idinspect.training import diff as diff_module
from idinspect.training import step_products
from tests.compare.test_diff_step_products import _close, _pair, _records  # noqa: F401

pytestmark = pytest.mark.skipif(not low_precision_gemm.available(torch.bfloat16),
                                reason="no bf16 matrix units with MKL's mixed-precision gemm on this machine")


@pytest.mark.parametrize("step", ["small", "large", "zero", "gauge"])
@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2", "qwen2", "gpt-oss", "gemma2-softcap", "phi3-partial-mqa"])
def test_fast_route_matches_float64(variant, step, tmp_path, monkeypatch):
    a, b = _pair(variant, tmp_path, step)
    calls, small = [], []
    real, real_small = diff_module.step_invariant_errors, step_products._small_step
    monkeypatch.setattr(diff_module, "step_invariant_errors", lambda *args: calls.append(real(*args)) or calls[-1])
    monkeypatch.setattr(step_products, "_small_step", lambda *args: small.append(1) or real_small(*args))
    fast = _records(a, b, True, monkeypatch)
    assert calls, "the fast route was not taken"
    # small steps split dX into pieces, large ones do not; a pure gauge move is not resolved without
    # the fitted alignment, so those layers fall back to it
    if step != "gauge":
        assert bool(small) == (step in ("small", "zero"))
    assert (None in calls) == (step == "gauge")
    ref = _records(a, b, False, monkeypatch)
    for f, r in zip(fast, ref):
        assert _close(f["raw_change"]["absolute"], r["raw_change"]["absolute"], 1e-6, 1e-12)
        assert _close(f["rho"], r["rho"], 1e-4, 1e-6)
        for side in ("qk", "vo"):
            for key in ("beta_a", "beta_b", "tau_a", "tau_b", "mu_min"):
                # Gram-sized quantities (differences of them): float32 sums are good to ~1e-7 of ||A||^2
                assert _close(f[side][key], r[side][key], 1e-5, 1e-6 * r["scale"]), (side, key)
            assert f[side]["ill_posed_groups"] == r[side]["ill_posed_groups"]
        assert f["invariant_change"].keys() == r["invariant_change"].keys()
        for kind, err in r["invariant_change"].items():
            assert _close(f["invariant_change"][kind], err, 1e-3, 1e-5), (kind, f["invariant_change"][kind], err)
        if step == "zero":
            assert f["invariant_change_max"] == 0.0 and f["raw_change"]["absolute"] == 0.0
        if step == "gauge":           # function unchanged to the bf16 rounding of B
            assert f["invariant_change_max"] < 2e-2
