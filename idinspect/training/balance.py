"""Rebalancing: the balanced point of each group's gauge orbit closest to the current weights.

Per kv group and side, with the factor pair (L, R) of :mod:`.orbit` (QK: stacked [W_Q; b_Q], [W_K; b_K];
VO: [W_V; b_V], stacked W_O^T):

1. thin QR L = Q_L R_L, R = Q_R R_R; SVD of the small core R_L R_R^T = U S V^T;
2. balanced representative L' = Q_L U S^1/2, R' = Q_R V S^1/2 (L' R'^T = L R^T and
   L'^T L' = R'^T R' = S: beta = 0);
3. the orthogonal freedom left (L' Z, R' Z, Z in O(k)) is fixed by orthogonal Procrustes:
   Z = P W^T from the SVD L'^T L + R'^T R = P Sigma W^T minimises ||L' Z - L||^2 + ||R' Z - R||^2.

With RoPE the QK algebra is one complex scalar per rotary plane (plus gl on unrotated columns):
each plane is scaled so that ||L_p||_F = ||R_p||_F (the only balance the commutant allows: the
plane's trace of D vanishes), and the closest rotation is the identity (tr(Z^T C) over SO(2) for a
symmetric C peaks at Z = I); the unrotated columns go through steps 1-3.
Every invariant (each head's W_Q W_K^T per plane, W_V W_O^h) is unchanged.
"""

from __future__ import annotations

import torch

from ..layer.attention_layer import AttentionLayer
from .metrics import SIDES, check_modelled, group_factors, set_group_factors, side_algebra
from .orbit import Algebra


def balance_pair(L: torch.Tensor, R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1-3 for a full gl(k) gauge: L [m, k], R [n, k] (float64) -> (L' Z, R' Z)."""
    k = L.shape[1]
    QL, RL = torch.linalg.qr(L)
    QR, RR = torch.linalg.qr(R)
    U, S, Vh = torch.linalg.svd(RL @ RR.T, full_matrices=False)
    root = S.sqrt()
    Lb = torch.zeros(L.shape[0], k, dtype=L.dtype)
    Rb = torch.zeros(R.shape[0], k, dtype=R.dtype)
    s = S.numel()
    Lb[:, :s] = QL @ (U * root)
    Rb[:, :s] = QR @ (Vh.T * root)
    P, _, Wh = torch.linalg.svd(Lb.T @ L + Rb.T @ R)
    Z = P @ Wh
    return Lb @ Z, Rb @ Z


def balance_factors(L: torch.Tensor, R: torch.Tensor, algebra: Algebra) -> tuple[torch.Tensor, torch.Tensor]:
    """The balanced pair closest to (L, R) within the gauge ``algebra`` (planes scaled, free columns balanced)."""
    L, R = L.clone(), R.clone()
    free = algebra.free_columns
    if free:
        L[:, free], R[:, free] = balance_pair(L[:, free], R[:, free])
    for i, j in algebra.planes:
        nl = float(L[:, [i, j]].norm())
        nr = float(R[:, [i, j]].norm())
        if nl == 0 or nr == 0:
            continue
        c = (nr / nl) ** 0.5
        L[:, [i, j]] *= c
        R[:, [i, j]] /= c
    return L, R


def rebalanced_layer(layer: AttentionLayer, sides: tuple[str, ...] = SIDES) -> AttentionLayer:
    """``layer`` with every kv group's ``sides`` replaced by the balanced representative closest to
    it; tensors in float64 (the caller casts when writing back)."""
    check_modelled(layer)
    f64 = layer.to(torch.float64)
    new = {role: t.clone() for role, t in f64.tensors().items()}
    for g in range(layer.n_kv_heads):
        for side in sides:
            L, R = balance_factors(*group_factors(f64, g, side), side_algebra(layer, side))
            set_group_factors(new, layer, g, side, L, R)
    return f64.replace(**new)
