"""Comparisons of bfloat16/float16 layers in float32 (issue 20): the invariant check of ``diff`` and
of a bf16 -> bf16 export aligns in float32 where that resolves far below the stored precision, and
falls back to float64 where a block cannot be aligned in float32."""

from __future__ import annotations

import pytest
import torch

import idinspect
from idinspect.exporting.layers import fix_layer
from idinspect.forms.per_head import invariant_error_tensors
from idinspect.numerics.precision import comparison_precision
from tests.support import tiny


def _pair(variant: str, dtype: torch.dtype, tmp_path, step: float = 1e-2):
    model = tiny.build(variant, dtype=torch.float32)
    path = tiny.save(model, tmp_path / "m", dtype=dtype)
    with idinspect.load(path) as m:
        a = m.layer(0)
    g = torch.Generator().manual_seed(1)
    b = a.replace(**{r: (t.float() * (1 + step * torch.randn(t.shape, generator=g))).to(dtype)
                     for r, t in a.tensors().items()})
    return a, b


def test_precision_follows_the_stored_dtypes():
    assert comparison_precision(torch.bfloat16, torch.float16) == torch.float32
    assert comparison_precision(torch.bfloat16, torch.float32) == torch.float64
    assert comparison_precision(torch.float64) == torch.float64


def test_a_gauge_move_float32_cannot_resolve_is_measured_in_float64(tmp_path):
    """B = A moved by a GL gauge of condition 1024 (GPT-2, no RoPE: keys' column 0 x 1024, queries'
    / 1024, exact in bf16; no invariant changes): float32 can neither align it (condition > 100) nor
    resolve the zero change with Y = I, so the float32 request gives the float64 answer, bit for bit."""
    a, _ = _pair("gpt2", torch.bfloat16, tmp_path)
    W_K, W_Q, b_Q = a.W_K.clone(), a.W_Q.clone(), a.b_Q.clone()
    W_K[..., 0] *= 1024
    W_Q[..., 0] /= 1024
    b_Q[..., 0] /= 1024
    b = a.replace(W_K=W_K, W_Q=W_Q, b_Q=b_Q)
    e64 = invariant_error_tensors(a, b)
    e32 = invariant_error_tensors(a, b, precision=torch.float32)
    assert all(torch.equal(e32[k], e64[k]) for k in e64)
    assert float(e64["W_QK"].max()) < 1e-12


def test_unrelated_layers_stay_in_float32_and_agree(tmp_path):
    """Two independent random layers (nothing to align: Y = I): float32 agrees with float64 to 1e-4."""
    a, _ = _pair("llama-gqa", torch.bfloat16, tmp_path)
    g = torch.Generator().manual_seed(5)
    b = a.replace(**{r: (torch.randn(t.shape, generator=g) * t.float().std()).to(t.dtype) for r, t in a.tensors().items()})
    e64 = invariant_error_tensors(a, b)
    e32 = invariant_error_tensors(a, b, precision=torch.float32)
    assert all(torch.allclose(e32[k], e64[k], rtol=1e-4, atol=1e-6) for k in e64)
    assert min(float(v.min()) for k, v in e64.items() if k != "output_bias") > 0.5


def test_bf16_export_check_agrees_with_the_float64_check(tmp_path):
    """fix_layer's check on a bf16 -> bf16 layer (float32) reports the float64 check's error."""
    model = tiny.build("llama-gqa", dtype=torch.float32)
    path = tiny.save(model, tmp_path / "m", dtype=torch.bfloat16)
    with idinspect.load(path) as m:
        layer = m.layer(0)
    fixed = fix_layer(layer, None)
    expected = max(invariant_error_tensors(layer, fixed.cast)[fixed.error.invariant].max().item(), 0.0)
    assert fixed.error.error > 1e-4                     # bf16 rounding of the balanced form
    assert fixed.error.error == pytest.approx(expected, rel=1e-4)


def test_bf16_diff_matches_the_float64_diff_of_the_same_values(tmp_path):
    """``idinspect diff`` of two bf16 checkpoints (float32 products) against the same values stored
    in float32 (float64 route): rho, beta, tau and the invariant change agree to 1e-4."""
    from idinspect.training.diff import diff

    model = tiny.build("llama-gqa", dtype=torch.float32).to(torch.bfloat16)
    a16 = tiny.save(model, tmp_path / "a16")
    a32 = tiny.save(model.to(torch.float32), tmp_path / "a32")
    torch.manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p.float()).to(p.dtype) * p.abs().mean())
    b16 = tiny.save(model.to(torch.bfloat16), tmp_path / "b16")
    b32 = tiny.save(model.to(torch.float32), tmp_path / "b32")
    low, wide = diff(str(a16), str(b16)), diff(str(a32), str(b32))
    for la, lw in zip(low["layers"], wide["layers"]):
        assert la["rho"] == pytest.approx(lw["rho"], rel=1e-4)
        for side in ("qk", "vo"):
            for key in ("rho", "beta_a", "beta_b", "tau_a", "tau_b"):
                assert la[side][key] == pytest.approx(lw[side][key], rel=1e-4, abs=1e-9), (side, key)
        assert la["invariant_change_max"] == pytest.approx(lw["invariant_change_max"], rel=1e-4)
        assert la["raw_change"]["absolute"] == pytest.approx(lw["raw_change"]["absolute"], rel=1e-5)
