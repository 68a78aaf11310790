"""The MLA gauge group as a map: generator coordinates theta -> the moved LatentAttentionLayer.

Written from docs/mathematics.md ("Multi-head latent attention"), independently of
idinspect.forms.latent.structure: per head GL(n) on the no-position query/key columns (A_h = I + X_h),
one complex scalar per rotary plane for every head's rotary query columns and the shared rotary key
(C), per head GL(v) between W_VB and W_O (B_h = I + Z_h), and per latent a rotation O = exp(S - S^T) (S strictly upper triangular)
with a gain trade g -> g exp(delta):  W_A -> W_A O, b_A -> b_A O, W_B -> diag(g')^-1 O^T diag(g) W_B.
``scale=True`` adds each latent's overall scale (W_A, b_A -> e^s W_A, e^s b_A), the nearly-null direction.
"""

from __future__ import annotations

import torch

from idinspect.layer.latent_layer import LatentAttentionLayer


def coordinates(L: LatentAttentionLayer, scale: bool = False) -> int:
    """How many generator coordinates :func:`move` takes."""
    H, n, v, e = L.n_heads, L.d_nope, L.d_v, L.d_rope
    latents = [r for r in (L.q_rank, L.kv_rank) if r]
    return H * n * n + e + H * v * v + sum(r * (r - 1) // 2 + r + (1 if scale else 0) for r in latents)


def _plane_matrix(L: LatentAttentionLayer, coeffs: torch.Tensor) -> torch.Tensor:
    """C [e, e]: plane p's columns (a, b) carry exp(alpha) * rotation(beta), (alpha, beta) = coeffs[2p:2p+2]."""
    e = L.d_rope
    C = torch.zeros(e, e, dtype=coeffs.dtype)
    for p, (a, b) in enumerate(L.positional.rotary.plane_columns()):
        s, t = torch.exp(coeffs[2 * p]), coeffs[2 * p + 1]
        C = C.index_put((torch.tensor([a, a, b, b]), torch.tensor([a, b, a, b])),
                        torch.stack([s * torch.cos(t), s * torch.sin(t), -s * torch.sin(t), s * torch.cos(t)]))
    return C


def move(L: LatentAttentionLayer, theta: torch.Tensor, scale: bool = False) -> LatentAttentionLayer:
    """The float64 layer moved by the group element with coordinates ``theta`` [coordinates(L, scale)]."""
    H, n, v, e = L.n_heads, L.d_nope, L.d_v, L.d_rope
    eye = torch.eye
    it = iter(torch.split(theta, [H * n * n, e, H * v * v] + [c for r in (L.q_rank, L.kv_rank) if r
                                                                for c in (r * (r - 1) // 2, r, 1 if scale else 0)]))
    A = eye(n, dtype=theta.dtype) + next(it).reshape(H, n, n)
    C = _plane_matrix(L, next(it))
    B = eye(v, dtype=theta.dtype) + next(it).reshape(H, v, v)
    A_inv_T, C_inv_T = torch.linalg.inv(A).transpose(1, 2), torch.linalg.inv(C).T
    out = {}

    def latent(W_A, b_A, g, ups):
        r = W_A.shape[1]
        upper = torch.triu_indices(r, r, 1)
        S = torch.zeros(r, r, dtype=theta.dtype).index_put((upper[0], upper[1]), next(it))
        O = torch.matrix_exp(S - S.T)
        g2 = g * torch.exp(next(it))
        s = torch.exp(next(it).sum())                  # an empty chunk (scale=False) gives 1
        M = (O.T * g[None, :]) / g2[:, None]          # diag(g')^-1 O^T diag(g)
        return s * W_A @ O, (s * b_A @ O if b_A is not None else None), g2, [M @ W for W in ups]

    if L.q_rank:
        out["W_QA"], out["b_QA"], out["g_Q"], (W_QB,) = latent(L.W_QA, L.b_QA, L.g_Q, [L.W_QB])
    else:
        W_QB = L.W_Q
    Wq = torch.cat([W_QB[..., :n] @ A, W_QB[..., n:] @ C], dim=-1)
    out["W_QB" if L.q_rank else "W_Q"] = Wq
    out["W_KVA"], out["b_KVA"], out["g_KV"], (W_KB, W_VB) = latent(L.W_KVA, L.b_KVA, L.g_KV, [L.W_KB, L.W_VB])
    out["W_KB"] = W_KB @ A_inv_T
    out["W_VB"] = W_VB @ B
    out["W_O"] = torch.linalg.inv(B) @ L.W_O
    out["W_KR"] = L.W_KR @ C_inv_T
    if L.b_KR is not None:
        out["b_KR"] = L.b_KR @ C_inv_T
    return L.replace(**out)


def flat(L: LatentAttentionLayer) -> torch.Tensor:
    """Every parameter of the layer in one vector (role order of ``tensors()``)."""
    return torch.cat([t.reshape(-1) for t in L.tensors().values()])
