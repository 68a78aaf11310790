"""Projection of a parameter step onto the tangent space of the gauge orbit, and the imbalance.

One kv group's factors, in row-vector notation and bias-augmented (see
:mod:`idinspect.forms.per_head.factors`), form a pair (L [m, k], R [n, k]) on which the gauge acts as
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

    def free_block(self, M: torch.Tensor) -> torch.Tensor:
        """M [..., k, k] restricted to the free columns (rows and columns): M itself when they are all k."""
        free = self.free_columns
        if free == list(range(self.k)):
            return M
        f = torch.tensor(free, device=M.device)
        return M.index_select(-2, f).index_select(-1, f)

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


def sylvester_solve(GL: torch.Tensor, GR: torch.Tensor, C: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Minimum-norm solution of GL X + X GR = C for symmetric PSD GL, GR [..., k, k] (float64),
    batched over leading dims.

    Returns (X, mu = lambda_min(GL) + lambda_min(GR), top = lambda_max(GL) + lambda_max(GR)), mu and
    top [...]; entries with a_i + b_j <= ILL_POSED_RTOL * top are set to zero.
    """
    a, U = torch.linalg.eigh(GL)
    b, V = torch.linalg.eigh(GR)
    a, b = a.clamp_min(0), b.clamp_min(0)
    denom = a[..., :, None] + b[..., None, :]
    top = a[..., -1] + b[..., -1]
    keep = denom > ILL_POSED_RTOL * top[..., None, None]
    Xt = torch.where(keep, (U.transpose(-1, -2) @ C @ V) / torch.where(keep, denom, torch.ones_like(denom)),
                     torch.zeros_like(denom))
    return U @ Xt @ V.transpose(-1, -2), a[..., 0] + b[..., 0], top


def project_step(L: torch.Tensor, R: torch.Tensor, dL: torch.Tensor, dR: torch.Tensor,
                 algebra: Algebra | None = None) -> Projection:
    """Project the step (dL [m, k], dR [n, k]) onto the orbit tangent at (L, R) (all float64).

    Forms the four k x k products L^T L, R^T R, L^T dL, R^T dR and solves from them
    (:func:`project_from_grams`); nothing larger than k x k is formed besides them.
    """
    step_sq = float(torch.linalg.vector_norm(dL) ** 2 + torch.linalg.vector_norm(dR) ** 2)
    return project_from_grams(L.T @ L, R.T @ R, L.T @ dL, R.T @ dR, step_sq, algebra)


def project_from_grams(GL: torch.Tensor, GR: torch.Tensor, ML: torch.Tensor, MR: torch.Tensor, step_sq: float,
                       algebra: Algebra | None = None) -> Projection:
    """The projection of :func:`project_step` from GL = L^T L, GR = R^T R, ML = L^T dL, MR = R^T dR
    [k, k] and ``step_sq`` = ||dL||^2 + ||dR||^2 (one group of :func:`project_from_grams_batch`)."""
    step = torch.tensor([float(step_sq)], dtype=torch.float64)
    return project_from_grams_batch(GL[None], GR[None], ML[None], MR[None], step, algebra)[0]


def project_from_grams_batch(GL: torch.Tensor, GR: torch.Tensor, ML: torch.Tensor, MR: torch.Tensor,
                             step_sq: torch.Tensor, algebra: Algebra | None = None) -> list[Projection]:
    """:func:`project_from_grams` of every group at once: GL, GR, ML, MR [G, k, k], step_sq [G].

    Without RoPE (``algebra`` None or all columns free) one Sylvester solve with C = ML - MR^T
    (= L^T dL - dR^T R); with planes, each plane's complex scalar in closed form: its two basis
    directions (L_p, -R_p) and (L_p J, R_p J) (L_p J = (L_j, -L_i)) are orthogonal with the same
    squared length n_p = GL_ii + GL_jj + GR_ii + GR_jj, so a = (ML_ii + ML_jj - MR_ii - MR_jj) / n_p and
    b = (ML_ji - ML_ij + MR_ji - MR_ij) / n_p; the blocks touch disjoint columns, so their
    projections add. ||T X||^2 = <GL X, X> + <X GR, X>.
    """
    n, k = GL.shape[0], GL.shape[-1]
    algebra = algebra or Algebra(k)
    X = torch.zeros(n, k, k, dtype=GL.dtype)
    mus, tops = [], []
    free = algebra.free_columns
    if free:
        sub = algebra.free_block
        Xf, mu, top = sylvester_solve(sub(GL), sub(GR), sub(ML) - sub(MR).transpose(-1, -2))
        if len(free) == k:
            X = Xf
        else:
            f = torch.tensor(free)
            X[:, f[:, None], f[None, :]] = Xf
        mus.append(mu)
        tops.append(top)
    if algebra.planes:
        pi = torch.tensor([i for i, _ in algebra.planes])
        pj = torch.tensor([j for _, j in algebra.planes])
        # entries (i, i), (j, j), (i, j), (j, i) of every plane of GL, GR, ML, MR in one gather: [4, 4, G, P]
        flat = torch.cat((pi * k + pi, pj * k + pj, pi * k + pj, pj * k + pi))
        entries = torch.stack((GL, GR, ML, MR)).flatten(-2).index_select(-1, flat).unflatten(-1, (4, -1))
        (GLii, GLjj, _, _), (GRii, GRjj, _, _), (MLii, MLjj, MLij, MLji), (MRii, MRjj, MRij, MRji) = \
            entries.transpose(1, 2)
        norm_sq = GLii + GLjj + GRii + GRjj
        half = norm_sq / 2      # the normal operator's eigenvalue on the plane (||X_p||_F^2 = 2)
        tops.append(half.max(dim=-1).values)
        top = torch.stack(tops).max(dim=0).values
        mus.append(half.min(dim=-1).values)
        live = half > ILL_POSED_RTOL * top[:, None]
        safe = torch.where(live, norm_sq, torch.ones_like(norm_sq))
        a = torch.where(live, (MLii + MLjj - MRii - MRjj) / safe, 0.0)
        b = torch.where(live, (MLji - MLij + MRji - MRij) / safe, 0.0)
        X[:, pi, pi], X[:, pi, pj], X[:, pj, pi], X[:, pj, pj] = a, -b, b, a
    else:
        top = torch.stack(tops).max(dim=0).values if tops else torch.zeros(n, dtype=GL.dtype)
    along_sq = ((GL @ X) * X).sum((-2, -1)) + ((X @ GR) * X).sum((-2, -1))
    mu = torch.stack(mus).min(dim=0).values if mus else torch.zeros(n, dtype=GL.dtype)
    ill = mu <= ILL_POSED_RTOL * top
    return [Projection(s, max(0.0, t), m, i, x)
            for s, t, m, i, x in zip(step_sq.tolist(), along_sq.tolist(), mu.tolist(), ill.tolist(), X.unbind(0))]


def imbalance(L: torch.Tensor, R: torch.Tensor, algebra: Algebra | None = None) -> tuple[float, float, float]:
    """(beta, tau, beta_full) of D = L^T L - R^T R [k, k]: beta = ||P(D)||_F on the gauge algebra,
    tau = trace(D), beta_full = ||D||_F (the two betas agree without RoPE)."""
    return imbalance_of(L.T @ L - R.T @ R, algebra)


def imbalance_of(D: torch.Tensor, algebra: Algebra | None = None) -> tuple[float, float, float]:
    """:func:`imbalance` of a given D = L^T L - R^T R [k, k]."""
    beta, tau, full = imbalance_batch(D[None], algebra)
    return float(beta[0]), float(tau[0]), float(full[0])


def imbalance_batch(D: torch.Tensor, algebra: Algebra | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(beta, tau, beta_full) [G] of every group's D [G, k, k] (see :func:`imbalance`)."""
    k = D.shape[-1]
    full = torch.linalg.vector_norm(D, dim=(-2, -1))
    diag = D.diagonal(dim1=-2, dim2=-1)
    tau = diag.sum(-1)
    algebra = algebra or Algebra(k)
    free = algebra.free_columns
    sq = torch.zeros_like(tau)
    if free:
        sq = sq + (algebra.free_block(D) ** 2).sum((-2, -1))
    if algebra.planes:
        pi = torch.tensor([i for i, _ in algebra.planes])
        pj = torch.tensor([j for _, j in algebra.planes])
        sq = sq + 0.5 * ((diag[:, pi] + diag[:, pj]) ** 2).sum(-1)          # sum_p ||(tr D_p / 2) I_2||^2
    return sq.sqrt(), tau, full
