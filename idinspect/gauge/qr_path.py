"""The QR route to the balanced form: explicit stacked factors, thin QR and small SVDs.

Accurate to float64 rounding for any conditioning and rank (zero columns past a rank bound), at
O(d d_k^2) per group like the Gram route (:mod:`.gram_path`), but several times slower; used where
a Gram matrix is too ill-conditioned for Cholesky.
"""

from __future__ import annotations

import torch

from ..layer.attention_layer import AttentionLayer
from ..layer.structure import unrotated_columns
from .balanced import Balanced
from .factors import (
    augment,
    output_stack,
    output_unstack,
    split_augmented,
    stack_groups,
    unstack_groups,
)
from .planes import balance_planes
from .qk import balance_qk
from .vo import balance_vo


def balance_by_qr(L: AttentionLayer, v_live: bool) -> Balanced:
    """Steps 2-5 on a float64 layer whose biases are already fixed (step 1)."""
    H, G = L.n_heads, L.n_kv_heads
    d = L.d_model
    Q = stack_groups(augment(L.W_Q, L.b_Q), G).clone()          # [G, r m, d_k]
    K = augment(L.W_K, L.b_K).clone()                           # [G, d (+1), d_k]
    s_qk = principal = dead = None

    cols = list(unrotated_columns(L))
    if cols:
        Q2, K2, s_qk = balance_qk(Q[:, :, cols], K[:, :d, cols])
        Q[:, :, cols] = Q2
        K[:, :d, cols] = K2

    if L.positional.kind == "rope":
        idx = torch.tensor(L.positional.rotary.plane_columns())  # [P, 2]
        Qp = Q[:, :, idx].permute(0, 2, 1, 3)                      # [G, P, r m, 2]
        Kp = K[:, :, idx].permute(0, 2, 1, 3)                      # [G, P, d (+1), 2]
        Qp, Kp, principal, dead = balance_planes(Qp, Kp)
        Q[:, :, idx] = Qp.permute(0, 2, 1, 3)
        K[:, :, idx] = Kp.permute(0, 2, 1, 3)

    W_Q, b_Q = split_augmented(unstack_groups(Q, H), L.b_Q is not None)
    W_K, b_K = split_augmented(K, L.b_K is not None)
    V = augment(L.W_V, L.b_V if v_live else None)
    V2, OT2, s_vo = balance_vo(V, output_stack(L.W_O, G))
    W_V, b_V = split_augmented(V2, v_live)
    return Balanced(W_Q=W_Q, b_Q=b_Q, W_K=W_K, b_K=b_K, W_V=W_V, b_V=b_V, W_O=output_unstack(OT2, H),
                    s_qk=s_qk, principal=principal, dead=dead, s_vo=s_vo)
