"""Small-core linear algebra shared by the gauge steps: never a d x d product.

Two routes to the balanced thin SVD of a product A B^T (A [..., m, k], B [..., n, k], m, n ~ d,
k ~ d_k), both O((m + n) k^2), side by side:

- fast route (:func:`gram`, :func:`balancing_transforms`): the k x k Gram matrices G_A = A^T A,
  G_B = B^T B, their Cholesky factors and an SVD of the k x k core give k x k transforms T_A, T_B
  with A T_A, B T_B balanced; one batched matmul per factor. Accurate to ~cond(G) eps, so it is
  used only where cond(G) <= :data:`MAX_GRAM_CONDITION`.
- reference route (:func:`balanced_factors`): thin QR of each factor, accurate to ~eps for any
  conditioning and rank; the fallback, and what the tests compare the fast route with.
"""

from __future__ import annotations

import torch

#: The fast route is taken only when every Gram matrix G = A^T A has cond(G) = lambda_max / lambda_min
#: below this (so cond(A) = sqrt(cond(G)) < ~316): the balanced form is then exact to ~1e5 eps ~ 2e-11,
#: inside the float64 tolerance of :func:`~idinspect.gauge.is_gauge_fixed`. Worse-conditioned (or
#: rank-deficient) factors take the reference route. (A bound on the Gram matrix's condition; the
#: analyzer's spectra bound the factor's own, :data:`idinspect.forms.per_head.spectra.MAX_FACTOR_CONDITION`.)
MAX_GRAM_CONDITION = 1e5


# fast route -------------------------------------------------------------------------------------

def gram(Xt: torch.Tensor, row: torch.Tensor | None = None) -> torch.Tensor:
    """X^T X [..., k, k] for X = [Xt^T; row] given transposed Xt [..., k, m] and an optional extra
    row [..., k] (a bias row): one batched matmul, X itself is never concatenated."""
    G = Xt @ Xt.transpose(-1, -2)
    if row is not None:
        G = G + row[..., :, None] * row[..., None, :]
    return G


def well_conditioned(G: torch.Tensor, limit: float = MAX_GRAM_CONDITION) -> torch.Tensor:
    """[...] bool: Gram matrices G [..., k, k] that are finite with lambda_max <= limit * lambda_min."""
    finite = torch.isfinite(G).flatten(-2).all(dim=-1)
    eye = torch.eye(G.shape[-1], dtype=G.dtype, device=G.device)
    lam = torch.linalg.eigvalsh(torch.where(finite[..., None, None], G, eye))       # ascending
    return finite & (lam[..., 0] > 0) & (lam[..., -1] <= limit * lam[..., 0])


def balancing_transforms(Ga: torch.Tensor, Gb: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """k x k transforms that balance A B^T, from the Gram matrices alone; batched.

    Ga = A^T A, Gb = B^T B [..., k, k]. With Ga = L_a L_a^T, Gb = L_b L_b^T (Cholesky; R = L^T is
    the R factor of the thin QR) and the core L_a^T L_b = u S w^T:

        T_A = L_a^-T u S^1/2,   T_B = L_b^-T w S^1/2     [..., k, k]

    so (A T_A)(B T_B)^T = A B^T, (A T_A)^T (A T_A) = (B T_B)^T (B T_B) = diag(S), S [..., k]
    descending. Returns (T_A, T_B, S, ok [...]): ok is False where a Gram matrix is too
    ill-conditioned for this route (:func:`well_conditioned`); those entries are meaningless.
    """
    ok = well_conditioned(Ga) & well_conditioned(Gb)
    eye = torch.eye(Ga.shape[-1], dtype=Ga.dtype, device=Ga.device)
    La, ia = torch.linalg.cholesky_ex(torch.where(ok[..., None, None], Ga, eye))
    Lb, ib = torch.linalg.cholesky_ex(torch.where(ok[..., None, None], Gb, eye))
    ok = ok & (ia == 0) & (ib == 0)
    u, s, wh = torch.linalg.svd(La.transpose(-1, -2) @ Lb)
    root = s.sqrt()[..., None, :]
    Ta = torch.linalg.solve_triangular(La.transpose(-1, -2), u, upper=True) * root
    Tb = torch.linalg.solve_triangular(Lb.transpose(-1, -2), wh.transpose(-1, -2), upper=True) * root
    return Ta, Tb, s, ok


def blocks(M: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Diagonal blocks of M [..., k, k] at index [nb, bs] (block i = rows and columns index[i]):
    [..., nb, bs, bs]; a view of M when the one block is all of it in order (read-only use)."""
    return blocks_of(index, M)[0]


def blocks_of(index: torch.Tensor, *Ms: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """:func:`blocks` of several matrices [..., k, k] (same k and device) at one index [nb, bs]."""
    k = Ms[0].shape[-1]
    nb, bs = index.shape
    if nb == 1 and bs == k and bool((index[0] == torch.arange(k, device=index.device)).all()):
        return tuple(M.unsqueeze(-3) for M in Ms)
    flat = (index[:, :, None] * k + index[:, None, :]).reshape(-1).to(Ms[0].device)
    return tuple(M.flatten(-2).index_select(-1, flat).view(*M.shape[:-2], nb, bs, bs) for M in Ms)


def put_blocks(M: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> None:
    """Inverse of :func:`blocks`: write values [..., nb, bs, bs] into M [..., k, k] in place."""
    M[..., index[:, :, None], index[:, None, :]] = values


def block_traces(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """tr(X_b Y_b) [..., nb] for blocks X, Y [..., nb, bs, bs]."""
    return (X * Y.transpose(-1, -2)).sum(dim=(-2, -1))


# reference route ----------------------------------------------------------------------------------

def thin_qr(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A [..., m, k] = Q R with Q [..., m, min(m, k)] orthonormal columns, R [..., min(m, k), k]."""
    return torch.linalg.qr(A, mode="reduced")


def balanced_factors(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The balanced thin SVD of A B^T, batched over leading dims (the reference route).

    A [..., m, k], B [..., n, k]. With A = Q_a R_a, B = Q_b R_b and the core R_a R_b^T = u S w^T,
    A B^T = U S V^T with U = Q_a u, V = Q_b w. Returns (U S^1/2, V S^1/2, S): factors [..., m, k] and
    [..., n, k] (zero columns past the rank bound min(m, n, k)) whose Gram matrices are both diag(S),
    S [..., k] descending. Signs are LAPACK's; fix them with :func:`key_side_signs`.
    """
    Qa, Ra = thin_qr(A)
    Qb, Rb = thin_qr(B)
    u, s, wh = torch.linalg.svd(Ra @ Rb.transpose(-1, -2), full_matrices=False)
    root = s.sqrt()
    A2 = (Qa @ u) * root[..., None, :]
    B2 = (Qb @ wh.transpose(-1, -2)) * root[..., None, :]
    k = A.shape[-1]
    c = s.shape[-1]
    if c < k:  # rank bound below k: pad with zero columns (zero singular values)
        A2 = torch.cat([A2, A2.new_zeros(*A2.shape[:-1], k - c)], dim=-1)
        B2 = torch.cat([B2, B2.new_zeros(*B2.shape[:-1], k - c)], dim=-1)
        s = torch.cat([s, s.new_zeros(*s.shape[:-1], k - c)], dim=-1)
    return A2, B2, s


def key_side_signs(B: torch.Tensor) -> torch.Tensor:
    """±1 per column of B [..., n, k]: +1 where the largest-magnitude entry is positive.

    Ties go to the lowest row index (``argmax`` returns the first maximum); an all-zero column
    gets +1. Step 5 of docs/mathematics.md ("The gauge-fixed form").
    """
    idx = B.abs().argmax(dim=-2, keepdim=True)
    lead = torch.gather(B, -2, idx).squeeze(-2)
    return torch.where(lead < 0, -torch.ones_like(lead), torch.ones_like(lead))


def r_factor(A: torch.Tensor) -> torch.Tensor:
    """R [..., min(m, k), k] of the thin QR of A [..., m, k] (Q is never formed)."""
    return torch.linalg.qr(A, mode="r")[1]


def product_norms(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(||A B^T||_F, ||C D^T||_F, ||A B^T - C D^T||_F) [...] without forming any product.

    A, C [..., m, k], B, D [..., n, k]. With [A, C] = Q_1 R_1 and [B, -D] = Q_2 R_2 (thin QR),
    A B^T - C D^T = Q_1 R_1 R_2^T Q_2^T, so the difference norm is ||R_1 R_2^T||_F; the column
    blocks of R_1, R_2 are R factors of A, C and B, -D, which give the other two norms. This is the
    Gram-matrix identity ||X||_F^2 = tr(G_1 G_2) done through QR, avoiding the cancellation of
    subtracting two large traces: the error stays at the rounding of the factors.
    """
    k = A.shape[-1]
    R1 = r_factor(torch.cat([A, C], dim=-1))
    R2 = r_factor(torch.cat([B, -D], dim=-1))
    norm = torch.linalg.matrix_norm
    ab = norm(R1[..., :, :k] @ R2[..., :, :k].transpose(-1, -2))
    cd = norm(R1[..., :, k:] @ R2[..., :, k:].transpose(-1, -2))
    return ab, cd, norm(R1 @ R2.transpose(-1, -2))


def relative(diff: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """diff / max(a, b), with 0 / 0 = 0 (both invariants zero: unchanged)."""
    scale = torch.maximum(a, b)
    return torch.where(scale > 0, diff / torch.where(scale > 0, scale, torch.ones_like(scale)), torch.zeros_like(diff))
