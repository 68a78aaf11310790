"""Normalised queries and keys without gains (Llama 4's L2 norm after RoPE): each rotary plane's
rotation fixed by the key plane's principal axes.

Without gains the norm only sees |q|, which a rotation of a plane leaves alone, and a plane rotation
commutes with RoPE: rotating plane p of a kv group's query heads and its key by the same angle
changes nothing, G rd/2 exact directions (docs/mathematics.md, "Llama 4"). The balanced form takes,
per group and plane, the rotation V in SO(2) that puts the key plane's Gram matrix
K~_p^T K~_p (K~ = [W_K; b_K]) on its principal axes, the larger first, with the half-turn fixed
by the sign of the largest-magnitude entry of the first rotated key column (made positive). A
plane whose key Gram is a multiple of the identity has no principal axes and is left as stored.
"""

from __future__ import annotations

import torch

from ...layer.attention_layer import AttentionLayer
from .factors import augment


def rotates(layer: AttentionLayer) -> bool:
    """The layer's q/k norm has no gains and its positions are rotary: plane rotations are its gauge."""
    norm = getattr(layer, "qk_norm", None)
    return norm is not None and norm.kind == "l2" and norm.q_gain is None and layer.positional.kind == "rope"


def plane_rotations(layer: AttentionLayer) -> torch.Tensor:
    """V [G, P, 2, 2] (float64, det +1): the rotation of each group's plane p (module doc)."""
    cols = torch.tensor(layer.positional.rotary.plane_columns())                     # [P, 2]
    K = augment(layer.W_K, layer.b_K).to(torch.float64)                              # [G, m, d_k]
    Kp = K[:, :, cols].permute(0, 2, 1, 3)                                           # [G, P, m, 2]
    M = Kp.transpose(-1, -2) @ Kp                                                    # [G, P, 2, 2]
    lam, V = torch.linalg.eigh(M)
    V = V.flip(-1)                                                                   # larger axis first
    V[..., 1] *= torch.sign(torch.linalg.det(V))[..., None]                          # a rotation, not a reflection
    first = (Kp @ V)[..., 0]                                                         # [G, P, m]
    lead = first.gather(-1, first.abs().argmax(dim=-1, keepdim=True))[..., 0]
    V = V * torch.where(lead < 0, -1.0, 1.0)[..., None, None]                        # the half-turn
    round_ = (lam[..., 1] - lam[..., 0]) <= 1e-12 * lam[..., 1].abs()               # no principal axes
    eye = torch.eye(2, dtype=V.dtype)
    return torch.where(round_[..., None, None], eye, V)


def rotate_planes(layer: AttentionLayer) -> dict[str, torch.Tensor | None]:
    """W_Q, b_Q, W_K, b_K (float64) with every group's planes rotated by :func:`plane_rotations`."""
    V = plane_rotations(layer)
    cols = torch.tensor(layer.positional.rotary.plane_columns())
    kv = torch.arange(layer.n_heads) // layer.group_size
    out = {}
    for role, per_head in (("W_Q", True), ("b_Q", True), ("W_K", False), ("b_K", False)):
        t = getattr(layer, role)
        if t is None:
            out[role] = None
            continue
        t = t.to(torch.float64).clone()
        Vh = V[kv] if per_head else V                                                # [n, P, 2, 2]
        x = t[..., cols]                                                             # [n, (d,) P, 2]
        if t.dim() == 3:
            t[..., cols] = torch.einsum("ndpi,npij->ndpj", x, Vh)
        else:
            t[..., cols] = torch.einsum("npi,npij->npj", x, Vh)
        out[role] = t
    return out


def rotation_residual(layer: AttentionLayer) -> float:
    """Largest ||V - I||_F of :func:`plane_rotations`: 0 once every plane is on its principal axes."""
    if not rotates(layer):
        return 0.0
    V = plane_rotations(layer)
    return float((V - torch.eye(2, dtype=V.dtype)).flatten(-2).norm(dim=-1).max())
