"""Precision that follows the data (issue 20): bfloat16/float16 weights take float32 Gram matrices
where that is as exact as the stored data, and no count, rank or finding depends on it."""

from __future__ import annotations

import pytest
import torch

from idinspect.forms.per_head import spectra
from idinspect.numerics import precision


def _rank_deficient_and_dead(model) -> None:
    """Head 0 of layer 0: W_Q^0 loses a column (rank d_k - 1); head 1: W_O^1 = 0 (a dead head)."""
    attn = model.model.layers[0].self_attn
    dk = attn.head_dim
    with torch.no_grad():
        attn.q_proj.weight[0] = 0.0
        attn.o_proj.weight[:, dk:2 * dk] = 0.0


def _without_values(findings: list[dict]) -> list[dict]:
    """Findings with their floating-point values (singular values, message text) left out."""
    return [{k: v for k, v in f.items() if k not in ("message", "singular_values", "tolerance")
             and not isinstance(v, float)} for f in findings]


def test_float32_condition_limit_follows_the_stored_precision():
    """u_s / (sqrt(m) u_32): ~1,000 for bf16 at m = 4096, 8x less for fp16; none for float32/64."""
    assert precision.float32_condition_limit(torch.bfloat16, 4096) == pytest.approx(2 ** -8 / (64 * 2 ** -24))
    assert precision.float32_condition_limit(torch.float16, 4096) == pytest.approx(
        precision.float32_condition_limit(torch.bfloat16, 4096) / 8)
    assert precision.float32_condition_limit(torch.float32, 4096) == 0.0
    assert precision.float32_condition_limit(torch.bfloat16, 4096, 128) == pytest.approx(2 ** -8 / ((64 + 128) * 2 ** -24))
    assert precision.float32_condition_limit(torch.float64, 4096) == 0.0


def test_heads_over_the_float32_limit_take_the_float64_routes(monkeypatch):
    """A bf16 batch: well-conditioned heads keep the float32 Gram, a head over the float32 limit
    is redone from a float64 Gram, a rank-deficient one by QR; every R gives the singular values of
    the stored weights (to the float32 Gram's accuracy, or float64's)."""
    g = torch.Generator().manual_seed(7)
    W = torch.randn(6, 4096, 8, generator=g, dtype=torch.float64)
    W[1] *= torch.logspace(0, 1, 8, dtype=torch.float64)          # cond ~ 10: under both limits
    W[2] *= torch.logspace(0, 2.2, 8, dtype=torch.float64)        # cond ~ 160: over fp16's float32 limit (114 at k = 8)
    W[3, :, 5] = 0.0                                               # rank 7: QR
    stored = W.to(torch.float16)
    grams = []
    real = spectra.gram_float64
    monkeypatch.setattr(spectra, "gram_float64",
                        lambda t, *a, **k: grams.append((t.shape[0], k.get("accumulate", torch.float64)))
                        or real(t, *a, **k))
    R, finite, _ = spectra._r_factor(stored)
    assert finite.all()
    assert grams[0] == (6, torch.float32) and all(acc == torch.float64 for _, acc in grams[1:])
    assert sum(n for n, _ in grams[1:]) == 2                       # heads 2 and 3 (3 fails Cholesky)
    exact = torch.linalg.svdvals(stored.to(torch.float64))
    got = torch.linalg.svdvals(R)
    assert torch.allclose(got[3], exact[3], rtol=1e-12, atol=1e-12 * float(exact[3, 0]))
    limit = precision.float32_condition_limit(torch.float16, 4096, 8)
    for h in range(6):
        rel = float((got[h] - exact[h]).abs().max() / exact[h, 0])
        assert rel <= precision.unit_roundoff(torch.float16)
    assert float(torch.linalg.cond(stored[2].to(torch.float64))) > limit


def test_certified_cores_take_the_eigenproblem_within_its_bound():
    """core_singular_values: certified cores (bf16/fp16 factors of condition <= 1e3) from core^T core's
    eigenvalues, within eps64 k cond(core) / 2 of s_max of the SVD's, ranks equal; the others the SVD."""
    g = torch.Generator().manual_seed(3)
    R = torch.linalg.qr(torch.randn(6, 64, 64, generator=g, dtype=torch.float64)).R
    R = R * torch.logspace(0, 2.5, 64, dtype=torch.float64)                # cond up to ~1e3 per factor
    core = R @ R[torch.arange(6).flip(0)].transpose(-1, -2)
    certified = torch.tensor([True, True, True, False, True, False])
    got, ref = spectra.core_singular_values(core, certified), torch.linalg.svdvals(core)
    bound = torch.finfo(torch.float64).eps * 64 * (ref[:, 0] / ref[:, -1]) / 2
    assert bool(((got - ref).abs().amax(dim=1) <= bound * ref[:, 0]).all())
    assert torch.equal(got[~certified], ref[~certified])
    assert torch.equal((got > 1e-12 * got[:, :1]).sum(1), (ref > 1e-12 * ref[:, :1]).sum(1))
