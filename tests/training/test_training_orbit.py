"""rho, the tangent projection, against a dense least-squares solve over every coordinate of X."""

from __future__ import annotations

import pytest
import torch

from idinspect.training.orbit import Algebra, imbalance, project_step

f64 = torch.float64


def _basis(algebra: Algebra) -> list[torch.Tensor]:
    """A basis of the gauge algebra as k x k matrices."""
    k, out = algebra.k, []
    for i in algebra.free_columns:
        for j in algebra.free_columns:
            E = torch.zeros(k, k, dtype=f64)
            E[i, j] = 1
            out.append(E)
    for i, j in algebra.planes:
        I2, J2 = torch.zeros(k, k, dtype=f64), torch.zeros(k, k, dtype=f64)
        I2[i, i] = I2[j, j] = 1
        J2[i, j], J2[j, i] = -1, 1
        out += [I2, J2]
    return out


def brute_force_rho(L, R, dL, dR, algebra: Algebra) -> float:
    """Dense lstsq: columns are the tangent vectors (L E, -R E^T) of every basis element E."""
    T = torch.stack([torch.cat([(L @ E).reshape(-1), (-R @ E.T).reshape(-1)]) for E in _basis(algebra)], dim=1)
    y = torch.cat([dL.reshape(-1), dR.reshape(-1)])
    c = torch.linalg.lstsq(T, y, driver="gelsd").solution
    fit = T @ c
    return float(fit @ fit / (y @ y))


ALGEBRAS = {
    "gl": lambda k: Algebra(k),
    "rope-half": lambda k: Algebra(k, tuple((p, p + k // 2) for p in range(k // 2)), ()),
    "rope-interleaved-partial": lambda k: Algebra(k, ((0, 1), (2, 3)), tuple(range(4, k))),
}


@pytest.mark.parametrize("name", list(ALGEBRAS))
@pytest.mark.parametrize("m,n,k", [(10, 7, 6), (15, 6, 6), (24, 9, 6)])   # (24, 9): a GQA stack of 3 heads
def test_rho_matches_dense_least_squares(name, m, n, k):
    g = torch.Generator().manual_seed(m * 100 + n)
    L, R = torch.randn(m, k, generator=g, dtype=f64), torch.randn(n, k, generator=g, dtype=f64)
    dL, dR = torch.randn(m, k, generator=g, dtype=f64), torch.randn(n, k, generator=g, dtype=f64)
    algebra = ALGEBRAS[name](k)
    proj = project_step(L, R, dL, dR, algebra)
    expected = brute_force_rho(L, R, dL, dR, algebra)
    assert proj.rho == pytest.approx(expected, rel=1e-10, abs=1e-13)
    assert 0 < proj.rho < 1
    assert not proj.ill_posed


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_pure_tangent_step_has_rho_one_and_orthogonal_step_rho_zero(name):
    g = torch.Generator().manual_seed(7)
    k = 6
    L, R = torch.randn(11, k, generator=g, dtype=f64), torch.randn(8, k, generator=g, dtype=f64)
    algebra = ALGEBRAS[name](k)
    X = sum(torch.randn((), generator=g, dtype=f64) * E for E in _basis(algebra))
    along = project_step(L, R, L @ X, -R @ X.T, algebra)
    assert abs(along.rho - 1) < 1e-12
    assert torch.allclose(along.X, X, atol=1e-10)
    dL, dR = torch.randn(11, k, generator=g, dtype=f64), torch.randn(8, k, generator=g, dtype=f64)
    p = project_step(L, R, dL, dR, algebra)
    ortho = project_step(L, R, dL - L @ p.X, dR + R @ p.X.T, algebra)
    assert ortho.rho < 1e-24
    # and the dense solver agrees that nothing of it lies on the tangent space
    assert brute_force_rho(L, R, dL - L @ p.X, dR + R @ p.X.T, algebra) < 1e-24


def test_rank_deficient_pair_is_ill_posed_and_rho_still_the_dense_value():
    g = torch.Generator().manual_seed(3)
    k = 5
    L = torch.randn(9, 3, generator=g, dtype=f64) @ torch.randn(3, k, generator=g, dtype=f64)
    R = torch.randn(7, 3, generator=g, dtype=f64) @ torch.randn(3, k, generator=g, dtype=f64)
    L[:, 4] = R[:, 4] = 0          # a direction no factor sees: mu = 0
    dL, dR = torch.randn(9, k, generator=g, dtype=f64), torch.randn(7, k, generator=g, dtype=f64)
    proj = project_step(L, R, dL, dR, Algebra(k))
    assert proj.ill_posed and proj.mu < 1e-10
    assert proj.rho == pytest.approx(brute_force_rho(L, R, dL, dR, Algebra(k)), rel=1e-8)


def test_imbalance_is_conserved_by_gradient_flow_of_a_bilinear_loss():
    """Tiny gradient-flow steps on L R^T (any loss of the product): D = L^T L - R^T R barely moves,
    and what moves shrinks like the step size squared (the discretisation)."""
    g = torch.Generator().manual_seed(5)
    L0, R0 = torch.randn(8, 4, generator=g, dtype=f64), torch.randn(6, 4, generator=g, dtype=f64)
    target = torch.randn(8, 6, generator=g, dtype=f64)
    drift = []
    for lr in (1e-3, 5e-4):
        L, R = L0.clone(), R0.clone()
        for _ in range(int(0.2 / lr)):
            G = L @ R.T - target                      # dLoss/dM for 1/2 ||M - target||^2
            L, R = L - lr * G @ R, R - lr * G.T @ L
        drift.append(abs(imbalance(L, R)[0] - imbalance(L0, R0)[0]))
    assert drift[0] > 0 and drift[1] / drift[0] == pytest.approx(0.5, rel=0.1)   # same time, half the step: half the drift
