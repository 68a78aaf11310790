"""diff's fast route for bf16 pairs (issue 23's speed): the step's products from the stored weights
(exact products, float32 sums) and the invariants without an alignment fit give what the float64
route gives on the same numbers, for small, large, zero and pure-gauge steps."""

from __future__ import annotations

import pytest
import torch

import idinspect
from idinspect.numerics import low_precision_gemm
from idinspect.training import diff as diff_module
from idinspect.training import step_products
from idinspect.training.live import snapshot, write_layer
from tests.support.gauge_moves import gauge_move
from tests.support.tiny import build, save

pytestmark = pytest.mark.skipif(not low_precision_gemm.available(torch.bfloat16),
                                reason="no bf16 matrix units with MKL's mixed-precision gemm on this machine")


def _pair(variant: str, tmp_path, step: str):
    """Checkpoints A and B, both stored in bf16 (B = A plus the step, rounded to bf16)."""
    model = build(variant, dtype=torch.float32)
    a = save(model, tmp_path / "a", dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        if step == "large":
            model = build(variant, dtype=torch.float32, seed=1)
        elif step == "small":
            for p in model.parameters():
                p.add_(1e-3 * p.abs().mean() * torch.randn(p.shape, generator=g))
        elif step == "gauge":
            model = model.to(torch.float64)
            for layer in snapshot(model):
                write_layer(model, gauge_move(layer, g, 0.3))
    return a, save(model, tmp_path / "b", dtype=torch.bfloat16)


def _records(a, b, fast: bool, monkeypatch) -> list[dict]:
    """diff_layer of every layer pair: fast route, or the float64 route on the same (widened) numbers."""
    out = []
    with idinspect.load(str(a)) as A, idinspect.load(str(b)) as B:
        for i in range(A.num_layers):
            la, lb = A.layer(i), B.layer(i)
            if not fast:
                la, lb = la.to(torch.float64), lb.to(torch.float64)
            record = diff_module.diff_layer(la, lb)
            record["scale"] = sum(float(t.double().norm()) ** 2 for L in (la, lb) for t in L.tensors().values())
            out.append(record)
    return out


def _close(x, y, rel, abs_):
    return x is None and y is None or abs(x - y) <= abs_ + rel * max(abs(x), abs(y))


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
