"""Projection of a parameter step onto the tangent space of the gauge orbit, and the imbalance.

One kv group's factors, in row-vector notation and bias-augmented (see
:mod:`idinspect.gauge.factors`), form a pair (L [m, k], R [n, k]) on which the gauge acts as
L -> L A, R -> R A^-T:

- QK: L = Q~ (the group's query heads [W_Q^h; b_Q^h] stacked), R = K~ = [W_K^g; b_K^g], k = d_k;
- VO: L = V~ = [W_V^g; b_V^g], R = O~^T (the group's W_O^h side by side, transposed), k = d_v
  (W_V B, B^-1 W_O^h is the same action on (V~, O~^T)).

The tangent space at (L, R) is {(L X, -R X^T)} for X in the gauge algebra: all of gl(k), or with
RoPE (QK only) one complex scalar a I + b J per rotary plane plus gl on the unrotated columns.
For a step (dL, dR) the closest tangent vector solves

    min_X ||dL - L X||_F^2 + ||dR + R X^T||_F^2,

whose normal equations are the Sylvester equation (L^T L) X + X (R^T R) = L^T dL - dR^T R.
With L^T L = U diag(a) U^T and R^T R = V diag(b) V^T it is solved entrywise:
X = U [(U^T C V)_ij / (a_i + b_j)] V^T. Only k x k matrices appear: O(m k^2) per group.
Where a_i + b_j vanishes the entry is set to zero (the minimum-norm least-squares X); the
projection T X itself is unique in every case. rho = ||T X||^2 / ||(dL, dR)||^2 is the share of
the step's squared length that moves along the orbit.

The imbalance D = L^T L - R^T R [k, k] is conserved by gradient flow along every direction of the
gauge algebra: beta = ||P(D)||_F with P the orthogonal projection onto the algebra (the identity
without RoPE; per rotary plane only the trace survives), tau = trace(D).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: a_i + b_j below this fraction of the largest Gram eigenvalue counts as zero (the direction is
#: not determined: the projection is ill-posed there).
ILL_POSED_RTOL = 1e-10


@dataclass(frozen=True)
class Algebra:
    """The gauge algebra on k columns: ``planes`` are (i, j) column pairs acting as complex scalars,
    ``free`` the columns carrying a full gl (all k without RoPE)."""

    k: int
    planes: tuple[tuple[int, int], ...] = ()
    free: tuple[int, ...] | None = None

    @property
    def free_columns(self) -> list[int]:
        return list(range(self.k)) if self.free is None else list(self.free)

    @property
    def dimension(self) -> int:
        return 2 * len(self.planes) + len(self.free_columns) ** 2


@dataclass(frozen=True)
class Projection:
    """The least-squares tangent vector of one step on one factor pair (all float).

    ``step_sq`` = ||dL||^2 + ||dR||^2; ``along_sq`` = ||L X||^2 + ||R X^T||^2 (the part of the
    step that changes no function, to first order); ``mu`` the smallest eigenvalue of the normal
    operator X -> L^T L X + X R^T R on the algebra; ``ill_posed`` when mu is zero relative to the
    largest; ``X`` [k, k] the minimum-norm solution.
    """

    step_sq: float
    along_sq: float
    mu: float
    ill_posed: bool
    X: torch.Tensor

    @property
    def rho(self) -> float:
        """Share of the step along the orbit, in [0, 1] (0 for a zero step)."""
        return self.along_sq / self.step_sq if self.step_sq > 0 else 0.0


def sylvester_solve(GL: torch.Tensor, GR: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """Minimum-norm solution of GL X + X GR = C for symmetric PSD GL, GR [k, k] (float64).

    Returns (X, mu = lambda_min(GL) + lambda_min(GR), top = lambda_max(GL) + lambda_max(GR));
    entries with a_i + b_j <= ILL_POSED_RTOL * top are set to zero.
    """
    a, U = torch.linalg.eigh(GL)
    b, V = torch.linalg.eigh(GR)
    a, b = a.clamp_min(0), b.clamp_min(0)
    denom = a[:, None] + b[None, :]
    top = float(a[-1] + b[-1]) if a.numel() else 0.0
    keep = denom > ILL_POSED_RTOL * top
    Xt = torch.where(keep, (U.T @ C @ V) / torch.where(keep, denom, torch.ones_like(denom)), torch.zeros_like(denom))
    return U @ Xt @ V.T, float(a[0] + b[0]) if a.numel() else 0.0, top


_J = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)


def project_step(L: torch.Tensor, R: torch.Tensor, dL: torch.Tensor, dR: torch.Tensor,
                 algebra: Algebra | None = None) -> Projection:
    """Project the step (dL [m, k], dR [n, k]) onto the orbit tangent at (L, R) (all float64).

    Without RoPE (``algebra`` None or all columns free) one Sylvester solve; with planes, each
    plane's complex scalar in closed form (its two basis directions (L_p, -R_p) and (L_p J, R_p J)
    are orthogonal with the same squared length ||L_p||^2 + ||R_p||^2) and a Sylvester solve on
    the free columns; the blocks touch disjoint columns, so their projections add.
    """
    k = L.shape[1]
    algebra = algebra or Algebra(k)
    X = torch.zeros(k, k, dtype=L.dtype)
    mus, tops = [], []
    free = algebra.free_columns
    if free:
        Lf, Rf = L[:, free], R[:, free]
        Xf, mu, top = sylvester_solve(Lf.T @ Lf, Rf.T @ Rf, Lf.T @ dL[:, free] - dR[:, free].T @ Rf)
        X[torch.tensor(free)[:, None], torch.tensor(free)[None, :]] = Xf
        mus.append(mu)
        tops.append(top)
    plane_norms = [float((L[:, [i, j]] ** 2).sum() + (R[:, [i, j]] ** 2).sum()) for i, j in algebra.planes]
    # basis X = I: (L_p, -R_p); X = J: (L_p J, -R_p J^T) = (L_p J, R_p J); both of squared length
    # norm_sq for ||X||_F^2 = 2 and orthogonal, so the normal operator's eigenvalue is norm_sq / 2.
    mus += [n / 2 for n in plane_norms]
    tops += [n / 2 for n in plane_norms]
    top = max(tops) if tops else 0.0
    for (i, j), norm_sq in zip(algebra.planes, plane_norms):
        if norm_sq / 2 <= ILL_POSED_RTOL * top:
            continue
        Lp, Rp, dLp, dRp = L[:, [i, j]], R[:, [i, j]], dL[:, [i, j]], dR[:, [i, j]]
        a = float((Lp * dLp).sum() - (Rp * dRp).sum()) / norm_sq
        b = float(((Lp @ _J) * dLp).sum() + ((Rp @ _J) * dRp).sum()) / norm_sq
        X[[i, i, j, j], [i, j, i, j]] = torch.tensor([a, -b, b, a], dtype=L.dtype)
    TL, TR = L @ X, R @ X.T
    step_sq = float((dL * dL).sum() + (dR * dR).sum())
    along_sq = float((TL * TL).sum() + (TR * TR).sum())
    mu = min(mus) if mus else 0.0
    return Projection(step_sq, along_sq, mu, mu <= ILL_POSED_RTOL * top, X)


def imbalance(L: torch.Tensor, R: torch.Tensor, algebra: Algebra | None = None) -> tuple[float, float, float]:
    """(beta, tau, beta_full) of D = L^T L - R^T R [k, k]: beta = ||P(D)||_F on the gauge algebra,
    tau = trace(D), beta_full = ||D||_F (the two betas agree without RoPE)."""
    D = L.T @ L - R.T @ R
    full = float(torch.linalg.matrix_norm(D))
    tau = float(torch.trace(D))
    algebra = algebra or Algebra(L.shape[1])
    free = algebra.free_columns
    sq = float((D[free][:, free] ** 2).sum()) if free else 0.0
    for i, j in algebra.planes:
        sq += 0.5 * float(D[i, i] + D[j, j]) ** 2          # ||(tr D_p / 2) I_2||^2
    return sq ** 0.5, tau, full
