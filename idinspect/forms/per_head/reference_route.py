"""The reference route to the balanced form: the recipe of docs/mathematics.md, step by step.

Explicit bias-augmented, group-stacked factors, thin QR and small SVDs, in the order of "The
gauge-fixed form" (step 1, the biases, is done by the caller for both routes):

2. QK on the unrotated dims, per kv group: Q~ [G, r (d+1), n] (the group's stacked query columns)
   and K~ [G, d, n] (n = the unrotated dims; the no-op key bias is zero there, so no bias row):
   thin SVD Q~ K~^T = U S V^T, Q~ = U S^1/2, K~ = V S^1/2;
3. each rotary plane p, per group: scale so ||Q_p|| = ||K_p||, then the rotation that makes
   Q_p^T Q_p + K_p^T K_p diagonal, larger entry first (:func:`~.planes.balance_planes`);
4. VO, per group: V~ [G, d (+1), d_v] (bias row only while b_V is live) and O~^T [G, r d, d_v]:
   thin SVD V~ O~ = U S W^T, V~ = U S^1/2, O~ = S^1/2 W^T;
5. signs inside each step: every column pair so that the key-side column (K~, O~^T) leads
   positive; each plane so that K_p's first column does.

Steps 2 and 4 are one operation, :func:`balanced_pair`: any A in GL(n) with (Q~ A)(K~ A^-T)^T =
Q~ K~^T (any B in GL(d_v) with (V~ B)(B^-1 O~)) gives the same result. Accurate to float64
rounding for any conditioning and rank (zero columns past a rank bound), at O(d d_k^2) per group
like the fast route (:mod:`.fast_route`), but several times slower; :func:`~.canonicalize.canonicalize`
takes it where a Gram matrix is too ill-conditioned for the fast route, and the tests compare
the two routes.
"""

from __future__ import annotations

import torch

from ...gauge.linalg import balanced_factors
from ...gauge.planes import balance_planes
from ...gauge.signs import fix_column_signs
from ...layer.attention_layer import AttentionLayer
from .balanced import Balanced
from .factors import (
    augment,
    output_stack,
    output_unstack,
    split_augmented,
    stack_groups,
    unstack_groups,
)
from .structure import noop_key_bias_columns, unrotated_columns


def balanced_pair(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps 2 and 4: balanced (A~, B~, S) of the product A B^T for A [G, m, k], B [G, n, k], signs
    fixed on B's side (step 5); S [G, k] descending."""
    A2, B2, s = balanced_factors(A, B)
    A2, B2 = fix_column_signs(A2, B2)
    return A2, B2, s


def balance_reference(L: AttentionLayer, v_live: bool) -> Balanced:
    """Steps 2-5 on a float64 layer whose biases are already fixed (step 1)."""
    H, G = L.n_heads, L.n_kv_heads
    d = L.d_model
    Q = stack_groups(augment(L.W_Q, L.b_Q), G).clone()          # [G, r m, d_k]
    K = augment(L.W_K, L.b_K).clone()                           # [G, d (+1), d_k]
    s_qk = principal = dead = None

    cols = list(unrotated_columns(L))                           # step 2
    if cols:
        k_rows = d if noop_key_bias_columns(L) else K.shape[1]   # a live key bias row is balanced with W_K
        Q2, K2, s_qk = balanced_pair(Q[:, :, cols], K[:, :k_rows, cols])
        Q[:, :, cols] = Q2
        K[:, :k_rows, cols] = K2

    if L.positional.kind == "rope":                             # step 3
        idx = torch.tensor(L.positional.rotary.plane_columns())  # [P, 2]
        Qp = Q[:, :, idx].permute(0, 2, 1, 3)                      # [G, P, r m, 2]
        Kp = K[:, :, idx].permute(0, 2, 1, 3)                      # [G, P, d (+1), 2]
        Qp, Kp, principal, dead = balance_planes(Qp, Kp)
        Q[:, :, idx] = Qp.permute(0, 2, 1, 3)
        K[:, :, idx] = Kp.permute(0, 2, 1, 3)

    W_Q, b_Q = split_augmented(unstack_groups(Q, H), L.b_Q is not None)
    W_K, b_K = split_augmented(K, L.b_K is not None)
    V = augment(L.W_V, L.b_V if v_live else None)               # step 4
    V2, OT2, s_vo = balanced_pair(V, output_stack(L.W_O, G))
    W_V, b_V = split_augmented(V2, v_live)
    return Balanced(W_Q=W_Q, b_Q=b_Q, W_K=W_K, b_K=b_K, W_V=W_V, b_V=b_V, W_O=output_unstack(OT2, H),
                    s_qk=s_qk, principal=principal, dead=dead, s_vo=s_vo)
