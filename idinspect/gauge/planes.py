"""Step 3 of the balanced gauge: each rotary plane, per kv group.

RoPE's commutant on a plane is the complex scalars c = s R(theta) (scale times rotation), acting
as Q_p -> Q_p c, K_p -> K_p c^-T = K_p R(theta) / s. For Q_p [r (d+1), 2], K_p [d (+1), 2]:

1. scale: rho = sqrt(||K_p||_F / ||Q_p||_F); Q_p *= rho, K_p /= rho (equal Frobenius norms);
2. rotate both by the proper rotation R = [e1, e2] that diagonalises
   M = Q_p^T Q_p + K_p^T K_p = [[a, b], [b, c]], larger entry first: e1 = (cos t, sin t) with
   t = atan2(2b, a - c) / 2, e2 = e1 turned by +90 degrees (det R = +1);
3. half-turn (step 5): negate the plane where K_p's first column leads negative.

A plane where one factor is zero has Q_p K_p^T = Q_p J K_p^T = 0: both factors are set to zero
(every invariant is unchanged and the result is unique).

Everything but the half-turn depends on the factors only through their 2 x 2 Gram matrices:
:func:`plane_transforms` works on those (the fast route); :func:`balance_planes` on the factors
(the reference route).
"""

from __future__ import annotations

import torch

from .signs import fix_half_turns


def plane_transforms(Gq: torch.Tensor, Gk: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 1-2 as 2 x 2 transforms, from the plane Gram matrices Gq = Q_p^T Q_p, Gk = K_p^T K_p [..., 2, 2].

    Returns (T_Q = rho R, T_K = R / rho [..., 2, 2], principal [..., 2] = diagonal of the rotated M,
    descending, dead [...] bool); dead planes get T_Q = T_K = 0. The half-turn is the caller's: it
    needs K_p T_K's first column.
    """
    nq = (Gq[..., 0, 0] + Gq[..., 1, 1]).sqrt()
    nk = (Gk[..., 0, 0] + Gk[..., 1, 1]).sqrt()
    dead = (nq == 0) | (nk == 0)
    rho2 = torch.where(dead, torch.ones_like(nk), nk) / torch.where(dead, torch.ones_like(nq), nq)   # rho^2
    M = Gq * rho2[..., None, None] + Gk / rho2[..., None, None]
    a, b, c = M[..., 0, 0], M[..., 0, 1], M[..., 1, 1]
    t = 0.5 * torch.atan2(2 * b, a - c)
    cos, sin = t.cos(), t.sin()
    R = torch.stack([torch.stack([cos, -sin], dim=-1), torch.stack([sin, cos], dim=-1)], dim=-2)  # columns e1, e2
    rho = rho2.sqrt()[..., None, None]
    keep = (~dead).to(R.dtype)[..., None, None]
    mean = 0.5 * (a + c)
    radius = torch.sqrt((0.5 * (a - c)) ** 2 + b ** 2)
    principal = torch.stack([mean + radius, mean - radius], dim=-1) * keep[..., 0]
    return R * rho * keep, R / rho * keep, principal, dead


def balance_planes(Qp: torch.Tensor, Kp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gauge-fix planes Qp [..., m, 2], Kp [..., n, 2] (the reference route's explicit version).

    Returns (Qp, Kp, principal [..., 2] = diagonal of M after rotation, descending; dead [...] bool).
    """
    nq = torch.linalg.matrix_norm(Qp)
    nk = torch.linalg.matrix_norm(Kp)
    dead = (nq == 0) | (nk == 0)
    safe_q = torch.where(dead, torch.ones_like(nq), nq)
    safe_k = torch.where(dead, torch.ones_like(nk), nk)
    rho = (safe_k / safe_q).sqrt()
    Qp = Qp * rho[..., None, None]
    Kp = Kp / rho[..., None, None]

    M = Qp.transpose(-1, -2) @ Qp + Kp.transpose(-1, -2) @ Kp
    a, b, c = M[..., 0, 0], M[..., 0, 1], M[..., 1, 1]
    t = 0.5 * torch.atan2(2 * b, a - c)
    cos, sin = t.cos(), t.sin()
    R = torch.stack([torch.stack([cos, -sin], dim=-1), torch.stack([sin, cos], dim=-1)], dim=-2)  # columns e1, e2
    Qp = Qp @ R
    Kp = Kp @ R
    Qp, Kp = fix_half_turns(Qp, Kp)

    mean = 0.5 * (a + c)
    radius = torch.sqrt((0.5 * (a - c)) ** 2 + b ** 2)
    principal = torch.stack([mean + radius, mean - radius], dim=-1)

    zero = torch.zeros((), dtype=Qp.dtype)
    Qp = torch.where(dead[..., None, None], zero, Qp)
    Kp = torch.where(dead[..., None, None], zero, Kp)
    principal = torch.where(dead[..., None], zero, principal)
    return Qp, Kp, principal, dead
