"""Random gauge transforms of canonical layers (test helper): per kv group A in the QK gauge group
(RoPE: a complex scalar per plane, GL on unrotated dims) and B in GL(d_v)."""

from __future__ import annotations

import torch

from idinspect.layer.attention_layer import AttentionLayer
from idinspect.training.metrics import qk_algebra


def random_generator(k: int, algebra, gen: torch.Generator, eps: float) -> torch.Tensor:
    """A random element X of the gauge algebra with entries ~ eps."""
    X = torch.zeros(k, k, dtype=torch.float64)
    free = algebra.free_columns
    if free:
        idx = torch.tensor(free)
        X[idx[:, None], idx[None, :]] = eps * torch.randn(len(free), len(free), generator=gen, dtype=torch.float64)
    for i, j in algebra.planes:
        a, b = (eps * torch.randn(2, generator=gen, dtype=torch.float64)).tolist()
        X[i, i] = X[j, j] = a
        X[i, j], X[j, i] = -b, b
    return X


def gauge_move(layer: AttentionLayer, gen: torch.Generator, eps: float) -> AttentionLayer:
    """layer (float64) moved by A = exp(X_QK), B = exp(X_VO) per group: the same function. Under a
    q/k norm no GL move of W_Q, W_K is a gauge (its gain trades move the norm gains): A = I."""
    L = layer.to(torch.float64)
    G, r = L.n_kv_heads, L.group_size
    A = torch.stack([torch.linalg.matrix_exp(random_generator(L.d_k, qk_algebra(L), gen, eps)) for _ in range(G)])
    if L.qk_norm is not None:
        A = torch.eye(L.d_k, dtype=torch.float64).expand(G, -1, -1).clone()
    B = torch.stack([torch.linalg.matrix_exp(random_generator(L.d_v, qk_algebra(L).__class__(L.d_v), gen, eps))
                     for _ in range(G)])
    Ah, Bh = A.repeat_interleave(r, 0), B.repeat_interleave(r, 0)
    AinvT = torch.linalg.inv(A).transpose(1, 2)
    new = dict(W_Q=L.W_Q @ Ah, W_K=L.W_K @ AinvT, W_V=L.W_V @ B, W_O=torch.linalg.solve(Bh, L.W_O))
    if L.b_Q is not None:
        new["b_Q"] = (L.b_Q[:, None, :] @ Ah)[:, 0]
    if L.b_K is not None:
        new["b_K"] = (L.b_K[:, None, :] @ AinvT)[:, 0]
    if L.b_V is not None:
        new["b_V"] = (L.b_V[:, None, :] @ B)[:, 0]
    return L.replace(**new)
