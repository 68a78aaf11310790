"""The gauge-fixed form "balanced", version 1 (../shared/MATH.md), of one canonical layer.

Order: biases (step 1), unrotated QK dims (2), rotary planes (3), VO (4); signs and half-turns (5)
inside each. Float64 throughout; the caller casts once at the end (the adapter writer). Cost per
kv group O(d d_k^2): thin QR of the tall factors and SVDs / 2 x 2 rotations of small cores.
"""

from __future__ import annotations

import torch

from ..canonical import AttentionLayer
from ..structure import require_modelled, unrotated_columns
from .biases import fix_biases
from .factors import augment, output_stack, output_unstack, split_augmented, stack_groups, unstack_groups
from .planes import balance_planes
from .qk import balance_qk
from .report import NONUNIQUE_RTOL, Degeneracy, GaugeReport, close_pairs, group_heads
from .vo import balance_vo

GAUGE_NAME = "balanced"
GAUGE_VERSION = 1


def canonicalize(layer: AttentionLayer, *, rtol: float = NONUNIQUE_RTOL) -> tuple[AttentionLayer, GaugeReport]:
    """The balanced gauge-fixed form of ``layer`` (float64) and a report of where it is not unique.

    Every invariant (each head's W_QK on the unrotated dims, each plane's Q_p K_p^T and
    Q_p J K_p^T, each head's W_OV, the effective output bias) is unchanged; the no-op key bias is
    zeroed and an absorbable value bias is folded into b_O. ``rtol`` is the relative gap below
    which two singular values (or a plane's principal values) are reported as tied.
    Raises :class:`~idinspect.errors.UnsupportedLayerError` for layers the mathematics does not model.
    """
    layer.validate()
    require_modelled(layer)
    L, zeroed, folded = fix_biases(layer.to(torch.float64))
    report = GaugeReport(layer.index, zeroed_key_bias_dims=zeroed, folded_value_bias=folded)
    H, G, r = L.n_heads, L.n_kv_heads, L.group_size

    Q = stack_groups(augment(L.W_Q, L.b_Q), G).clone()          # [G, r m, d_k]
    K = augment(L.W_K, L.b_K).clone()                           # [G, d (+1), d_k]
    has_kb = L.b_K is not None
    d = L.d_model

    cols = list(unrotated_columns(L))
    if cols:
        Q2, K2, s = balance_qk(Q[:, :, cols], K[:, :d, cols])
        Q[:, :, cols] = Q2
        K[:, :d, cols] = K2
        _note(report, "qk", close_pairs(s, rtol), r)

    if L.positional.kind == "rope":
        idx = torch.tensor(L.positional.rotary.plane_columns())  # [P, 2]
        Qp = Q[:, :, idx].permute(0, 2, 1, 3)                      # [G, P, r m, 2]
        Kp = K[:, :, idx].permute(0, 2, 1, 3)                      # [G, P, d (+1), 2]
        Qp, Kp, principal, dead = balance_planes(Qp, Kp)
        Q[:, :, idx] = Qp.permute(0, 2, 1, 3)
        K[:, :, idx] = Kp.permute(0, 2, 1, 3)
        for g, p in dead.nonzero().tolist():
            report.dead_planes.append((g, p))
        flat = principal.reshape(-1, 2)
        _note(report, "plane", [(row // principal.shape[1], row % principal.shape[1], gap)
                                for row, _, gap in close_pairs(flat, rtol)], r)

    W_Q, b_Q = split_augmented(unstack_groups(Q, H), L.b_Q is not None)
    W_K, b_K = split_augmented(K, has_kb)

    v_live = L.b_V is not None and not folded
    V = augment(L.W_V, L.b_V if v_live else None)
    V2, OT2, s = balance_vo(V, output_stack(L.W_O, G))
    _note(report, "vo", close_pairs(s, rtol), r)
    W_V, b_V = split_augmented(V2, v_live)
    if not v_live:
        b_V = L.b_V
    W_O = output_unstack(OT2, H)

    fixed = L.replace(W_Q=W_Q.contiguous(), W_K=W_K.contiguous(), W_V=W_V.contiguous(), W_O=W_O.contiguous(),
                      b_Q=None if b_Q is None else b_Q.contiguous(), b_K=None if b_K is None else b_K.contiguous(),
                      b_V=b_V, b_O=L.b_O)
    return fixed, report


def _note(report: GaugeReport, block: str, pairs: list[tuple[int, int, float]], r: int) -> None:
    for g, i, gap in pairs:
        report.degeneracies.append(Degeneracy(layer=report.layer, block=block, group=g,
                                              heads=group_heads(g, r), index=i, relative_gap=gap))
