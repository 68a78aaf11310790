"""The comparison invariants: unchanged by every gauge move, changed by anything else, rounding
bound that holds and is not vacuous; matching and the lineage test's statistics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from idinspect.compare.invariants import layer_invariants
from idinspect.compare.lineage import lineage_test
from idinspect.compare.matching import assignment
from idinspect.model import load
from tests.support import tiny


def _layer(variant: str, i: int = 0):
    with load(tiny.build(variant)) as m:
        return m.layer(i).to(torch.float64)


def _values(inv) -> list[torch.Tensor]:
    return [inv.qk, inv.ov] + ([inv.planes] if inv.planes is not None else [])


def _gauge(L, gen, rope_planes: bool):
    """A random gauge: per kv group GL on VO, and GL (no RoPE) or scale x rotation per plane (RoPE) on QK."""
    G, dk, dv = L.n_kv_heads, L.d_k, L.d_v
    WQ, WK, WV, WO = L.W_Q.clone(), L.W_K.clone(), L.W_V.clone(), L.W_O.clone()
    for g in range(G):
        heads = range(g * L.group_size, (g + 1) * L.group_size)
        if rope_planes:
            A = torch.zeros(dk, dk, dtype=torch.float64)
            for a, b in L.positional.rotary.plane_columns():
                s, t = float(torch.exp(torch.randn((), generator=gen))), float(torch.rand((), generator=gen)) * 6.28
                M = s * torch.tensor([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]], dtype=torch.float64)
                A[np.ix_([a, b], [a, b])] = M
        else:
            A = torch.eye(dk, dtype=torch.float64) + 0.5 * torch.randn(dk, dk, generator=gen, dtype=torch.float64)
        B = torch.eye(dv, dtype=torch.float64) + 0.5 * torch.randn(dv, dv, generator=gen, dtype=torch.float64)
        WK[g] = WK[g] @ torch.linalg.inv(A).T
        WV[g] = WV[g] @ B
        for h in heads:
            WQ[h] = WQ[h] @ A
            WO[h] = torch.linalg.solve(B, WO[h])
    return L.replace(W_Q=WQ, W_K=WK, W_V=WV, W_O=WO)


def _rotate(L, gain, gen):
    """Residual rotation with the gain folded: W -> R^T diag(g) W for Q, K, V; W_O -> W_O R."""
    q, _ = torch.linalg.qr(torch.randn(L.d_model, L.d_model, generator=gen, dtype=torch.float64))
    fold = lambda W: q.T @ (gain[:, None] * W)   # noqa: E731
    return L.replace(W_Q=fold(L.W_Q), W_K=fold(L.W_K), W_V=fold(L.W_V), W_O=L.W_O @ q)


def test_invariants_can_fail():
    """Not every change is invisible: a general GL gauge breaks the RoPE plane invariants (it does
    not commute with the rotations), the gain matters, and a small weight change shows."""
    gen = torch.Generator().manual_seed(4)
    L = _layer("llama-mha")
    ref = layer_invariants(L, None)
    wrong = layer_invariants(_gauge(L, gen, rope_planes=False), None)
    assert torch.allclose(wrong.qk, ref.qk, rtol=1e-9)                   # the whole-head W_QK survives GL
    assert not torch.allclose(wrong.planes, ref.planes, rtol=1e-3)       # the planes do not
    gain = 0.5 + torch.rand(L.d_model, generator=gen, dtype=torch.float64)
    assert not torch.allclose(layer_invariants(L, gain).qk, ref.qk, rtol=1e-3)
    nudged = L.replace(W_O=L.W_O * (1 + 1e-6 * torch.randn(L.W_O.shape, generator=gen, dtype=torch.float64)))
    delta = (layer_invariants(nudged, None).ov - ref.ov).abs()
    assert float(delta.max()) > float((ref.radius_ov[:, None] * 2).max())   # beyond float64 rounding


def test_assignment_is_optimal():
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 6))
        m = int(rng.integers(n, 7))
        c = rng.random((n, m)).round(1)
        got = assignment(c)
        best = min(sum(c[i, p[i]] for i in range(n)) for p in itertools.permutations(range(m), n))
        assert len(set(got.tolist())) == n
        assert abs(sum(c[i, got[i]] for i in range(n)) - best) < 1e-12


def test_lineage_p_value_is_valid_under_the_null():
    """Unrelated heads (random distances): p < 0.05 in at most ~5 % of trials (it is conservative),
    and the Chatterjee bound is never below the Monte Carlo tail."""
    gen = torch.Generator().manual_seed(6)
    layer = torch.arange(6).repeat_interleave(8)                 # 6 layers x 8 heads
    small = 0
    for trial in range(60):
        D = torch.rand(48, 48, generator=gen, dtype=torch.float64)
        t = lineage_test(D, layer, layer, permutations=2000, seed=trial)
        small += t.p_value < 0.05
        assert t.bound >= t.p_monte_carlo - 3 * (t.p_monte_carlo / 2000) ** 0.5 or t.bound == 1.0
    assert small <= 6
    # a copy: every head's nearest counterpart is itself
    t = lineage_test(torch.rand(48, 48, generator=gen, dtype=torch.float64) + 1 - torch.eye(48, dtype=torch.float64),
                     layer, layer, permutations=2000)
    assert t.statistic == 48 and t.expected == 8.0
    assert t.bound == pytest.approx(2 * np.exp(-40.0 ** 2 / (4 * 8 + 2 * 40)), rel=1e-12)     # 1.25e-6
    assert t.p_value == pytest.approx(2 * t.bound)
