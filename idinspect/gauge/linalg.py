"""Small-core linear algebra shared by the gauge steps: never a d x d product.

Every routine works on tall factors A [..., m, k], B [..., n, k] of a product A B^T (m, n ~ d,
k ~ d_k) through thin QR of each factor and an SVD or norm of the k x k core, O((m + n) k^2).
"""

from __future__ import annotations

import torch


def thin_qr(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A [..., m, k] = Q R with Q [..., m, min(m, k)] orthonormal columns, R [..., min(m, k), k]."""
    return torch.linalg.qr(A, mode="reduced")


def balanced_factors(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The balanced thin SVD of A B^T, batched over leading dims.

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
    gets +1. MATH.md step 5.
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
