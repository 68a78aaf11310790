"""The bias-augmented, group-stacked factors the gauge steps act on, and back.

    Q~^h = [W_Q^h; b_Q^h]   [d (+1), d_k]    (bias row only if b_Q exists)
    K~^g = [W_K^g; b_K^g]   [d (+1), d_k]    (bias row only if asked for: live under RoPE)
    V~^g = [W_V^g; b_V^g]   [d (+1), d_v]    (bias row only if b_V is live)
    O~^g = [W_O^h1, W_O^h2, ...]  [d_v, r d]  (the group's heads side by side)

Stacking the r query heads of group g one above the other, [G, r (d+1), d_k], makes one gauge
transform per group act on a single tall factor.
"""

from __future__ import annotations

import torch


def augment(W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """W [n, d, k] with b [n, k] appended as row d: [n, d + 1, k] (W itself when b is None)."""
    return W if b is None else torch.cat([W, b[:, None, :]], dim=1)


def split_augmented(A: torch.Tensor, has_bias: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Inverse of :func:`augment`: [n, d (+1), k] -> (W [n, d, k], b [n, k] or None)."""
    if not has_bias:
        return A, None
    return A[:, :-1, :], A[:, -1, :]


def stack_groups(Q: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per-head factors [H, m, k] -> per-group stacks [G, r m, k] (heads g r .. g r + r - 1)."""
    H, m, k = Q.shape
    return Q.reshape(n_groups, (H // n_groups) * m, k)


def unstack_groups(Q: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Inverse of :func:`stack_groups`: [G, r m, k] -> [H, m, k]."""
    G, rm, k = Q.shape
    return Q.reshape(n_heads, rm * G // n_heads, k)


def output_stack(W_O: torch.Tensor, n_groups: int) -> torch.Tensor:
    """W_O [H, d_v, d] -> O~^T [G, r d, d_v]: the transposed side-by-side output factor."""
    H, dv, d = W_O.shape
    return W_O.transpose(1, 2).reshape(n_groups, (H // n_groups) * d, dv)


def output_unstack(OT: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Inverse of :func:`output_stack`: [G, r d, d_v] -> W_O [H, d_v, d]."""
    G, rd, dv = OT.shape
    return OT.reshape(n_heads, rd * G // n_heads, dv).transpose(1, 2)
