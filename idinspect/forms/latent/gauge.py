"""The gauge-fixed form of multi-head latent attention ("balanced latent", version 1).

In float64, for a :class:`LatentAttentionLayer` (docs/mathematics.md, "Multi-head latent attention"):

1. Each normalised latent (the query one where r_q > 0, then the key/value one): the gains go into
   the up-projections (W_B -> diag(g) W_B for every W_B reading the latent; g = 1), then the
   augmented down-projection A~ = [W_A; b_A] [(d+1), r] is rotated onto its right singular vectors,
   A~ = U S V^T -> A~ V = U S (columns orthogonal, norms descending), W_B -> V^T W_B. The rotation
   passes through the RMSNorm exactly (mean(z^2) is rotation invariant).
2. No-position QK, per head: the balanced thin SVD of Q_h K_h^T (Q_h the head's n no-position query
   columns, K_h = W_KB^h): both factors U S^1/2, V S^1/2.
3. Rotary planes, shared by all heads: Q_p = every head's plane columns stacked, K_p = [W_KR; b_KR]'s
   plane columns; equal Frobenius norms, then the rotation that diagonalises Q_p^T Q_p + K_p^T K_p
   (larger entry first) -- the per-head rule's step 3 with all heads in one group.
4. VO, per head: the balanced thin SVD of W_VB^h W_O^h.
5. Signs: each column's largest-magnitude entry is positive in A~ V (step 1), in K_h (2), in K_p's
   first column (3) and in each row of W_O^h (4); ties to the lowest index.

Steps 2-4 act on W_B's columns, step 1 on its rows, so the order does not matter for the result's
invariance; step 1 comes first because 2 and 4 read W_KB, W_VB, W_QB. Where two singular values (or
a plane's principal values) agree to a relative ``NONUNIQUE_RTOL``, the form is not unique there
(reported as a :class:`Degeneracy`, blocks ``latent_q``/``latent_kv``/``qk``/``plane``/``vo``).
"""

from __future__ import annotations

import torch

from ...gauge.linalg import balanced_factors, key_side_signs
from ...gauge.planes import balance_planes
from ...gauge.report import NONUNIQUE_RTOL, Degeneracy
from ...layer.latent_layer import LatentAttentionLayer
from ..per_head.invariants import InvariantError
from .reference import latent_reference_attention

#: The name export records for this form and its version.
LATENT_GAUGE_NAME = "balanced-latent"
LATENT_GAUGE_VERSION = 1


def _ties(values: torch.Tensor, layer: int, block: str, heads: tuple[int, ...], group: int = 0) -> list[Degeneracy]:
    """Adjacent descending values [k] agreeing to a relative NONUNIQUE_RTOL (zeros excluded)."""
    out = []
    for i in range(values.numel() - 1):
        a, b = float(values[i]), float(values[i + 1])
        if a > 0 and (a - b) <= NONUNIQUE_RTOL * a:
            out.append(Degeneracy(layer, block, group, heads, i, (a - b) / a))
    return out


def _fix_latent(W_A: torch.Tensor, b_A: torch.Tensor | None, g: torch.Tensor, ups: list[torch.Tensor]):
    """Step 1 for one latent: (W_A, b_A, ones, [W_B...], singular values)."""
    A = W_A if b_A is None else torch.cat([W_A, b_A[None, :]])
    ups = [g[:, None] * U for U in ups]
    _, s, vh = torch.linalg.svd(A, full_matrices=False)
    V = vh.T
    A = A @ V
    signs = key_side_signs(A)
    A, V = A * signs, V * signs
    ups = [V.T @ U for U in ups]
    W_A, b_A = (A, None) if b_A is None else (A[:-1], A[-1])
    return W_A, b_A, torch.ones_like(g), ups, s


def canonicalize_latent(layer: LatentAttentionLayer) -> tuple[LatentAttentionLayer, list[Degeneracy]]:
    """(the gauge-fixed float64 layer, where it is not unique)."""
    L = layer.to(torch.float64)
    n, i = L.d_nope, L.index
    H = L.n_heads
    heads = tuple(range(H))
    out: dict[str, torch.Tensor] = {}
    notes: list[Degeneracy] = []
    if L.q_rank:
        out["W_QA"], out["b_QA"], out["g_Q"], (Wq,), s = _fix_latent(L.W_QA, L.b_QA, L.g_Q, [L.W_QB])
        notes += _ties(s, i, "latent_q", heads)
    else:
        Wq = L.W_Q
    W_KVA, b_KVA, out["g_KV"], (W_KB, W_VB), s = _fix_latent(L.W_KVA, L.b_KVA, L.g_KV, [L.W_KB, L.W_VB])
    out["W_KVA"], out["b_KVA"] = W_KVA, b_KVA
    notes += _ties(s, i, "latent_kv", heads)

    Qn, Kn, S = balanced_factors(Wq[..., :n], W_KB)
    signs = key_side_signs(Kn)[:, None, :]
    Qn, Kn = Qn * signs, Kn * signs
    for h in range(H):
        notes += _ties(S[h], i, "qk", (h,), h)

    cols = L.positional.rotary.plane_columns()
    R = Wq[..., n:]                                             # [H, m, e]
    m = R.shape[1]
    K = L.W_KR if L.b_KR is None else torch.cat([L.W_KR, L.b_KR[None, :]])
    Qp = torch.stack([R[..., list(c)].reshape(H * m, 2) for c in cols])
    Kp = torch.stack([K[:, list(c)] for c in cols])
    Qp, Kp, principal, _ = balance_planes(Qp, Kp)
    R, K = R.clone(), K.clone()
    for p, c in enumerate(cols):
        R[..., list(c)] = Qp[p].reshape(H, m, 2)
        K[:, list(c)] = Kp[p]
        a, b = float(principal[p, 0]), float(principal[p, 1])
        if a > 0 and a - b <= NONUNIQUE_RTOL * a:
            notes.append(Degeneracy(i, "plane", 0, heads, p, (a - b) / a))
    out["W_KR"], out["b_KR"] = (K, None) if L.b_KR is None else (K[:-1], K[-1])

    V, Ot, S = balanced_factors(W_VB, L.W_O.transpose(1, 2))
    signs = key_side_signs(Ot)[:, None, :]
    V, Ot = V * signs, Ot * signs
    for h in range(H):
        notes += _ties(S[h], i, "vo", (h,), h)
    out["W_VB"], out["W_O"], out["W_KB"] = V, Ot.transpose(1, 2), Kn
    out["W_QB" if L.q_rank else "W_Q"] = torch.cat([Qn, R], dim=-1)
    return L.replace(**out), notes


def latent_output_error(a: LatentAttentionLayer, b: LatentAttentionLayer, seed: int = 0) -> InvariantError:
    """MLA has no thin per-head invariants (the latent gauge mixes every head's factors): the largest
    relative change of the block's output, in float64, on N(0, 1) hidden states of 2 x 8 tokens."""
    x = torch.randn(2, 8, a.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    ya, yb = latent_reference_attention(a, x), latent_reference_attention(b, x)
    scale = float(ya.abs().max()) or 1.0
    return InvariantError("output", float((ya - yb).abs().max()) / scale)


def latent_gauge_residuals(layer: LatentAttentionLayer) -> list[tuple[float, str]]:
    """(largest relative change of a tensor under canonicalisation, where): 0 for a gauge-fixed layer."""
    fixed, _ = canonicalize_latent(layer)
    L = layer.to(torch.float64)
    out = []
    for role, t in L.tensors().items():
        u = getattr(fixed, role)
        scale = float(t.norm()) or 1.0
        out.append((float((t - u).norm()) / scale, f"layer {layer.index} {layer.tensor_names.get(role, role)}"))
    return out
