"""The gauge-fixed form "balanced", version 1 (docs/mathematics.md), of one canonical layer.

Order: biases (step 1), unrotated QK dims (2), rotary planes (3), VO (4); signs and half-turns (5)
inside each. A layer with a q/k norm keeps W_Q, b_Q, W_K, b_K exactly as stored (the norm leaves no GL gauge
there) and fixes the gain trade that remains by the rule of :mod:`.qk_gain_trade` (equal query and
key gain norms on every rotary plane and unrotated dim of every gain class; docs/mathematics.md,
"Normalised queries and keys"); VO is balanced as everywhere. Float64 throughout; the caller casts once at the end (the adapter writer). Cost per
kv group O(d d_k^2), never a d x d product: the fast route (:mod:`.fast_route`: k x k Gram
matrices, Cholesky and small SVDs, one batched matmul per factor) where every Gram matrix is
well-conditioned, else the reference route (:mod:`.reference_route`: thin QR of the tall factors,
the recipe of docs/mathematics.md step by step).
"""

from __future__ import annotations

import torch

from ...gauge.report import (
    NONUNIQUE_RTOL,
    Degeneracy,
    GaugeReport,
    close_pairs,
    group_heads,
)
from ...layer.attention_layer import AttentionLayer
from ...layer.buffers import Float64Buffers
from .biases import fix_biases
from .fast_route import balance_fast
from .qk_centring import centre_qk, centres
from .qk_gain_trade import balance_gains
from .qk_plane_rotation import rotate_planes, rotates
from .reference_route import balance_reference
from .structure import require_modelled

GAUGE_NAME = "balanced"
GAUGE_VERSION = 1


def canonicalize(layer: AttentionLayer, *, rtol: float = NONUNIQUE_RTOL,
                 workspace: Float64Buffers | None = None,
                 apply_dtype: torch.dtype = torch.float64) -> tuple[AttentionLayer, GaugeReport]:
    """The balanced gauge-fixed form of ``layer`` (float64) and a report of where it is not unique.

    Every invariant (each head's W_QK on the unrotated dims, each plane's Q_p K_p^T and
    Q_p J K_p^T, each head's W_OV, the effective output bias; under a q/k norm W_Q, W_K and the
    per-orbit products of query and key gains) is unchanged; the no-op key bias is
    zeroed and an absorbable value bias is folded into b_O. ``rtol`` is the relative gap below
    which two singular values (or a plane's principal values) are reported as tied. The result
    shares no tensor with ``layer`` (a caller may overwrite it in place); with a ``workspace``
    its W_Q and W_O live in the workspace's buffers, overwritten by the next call using it.
    ``apply_dtype`` float32 (export of a bfloat16/float16 layer to bfloat16/float16,
    :func:`~.fast_route.apply_precision`): the fast route applies its float64 transforms to the
    four weight factors in float32 and returns those in float32 (biases, Grams and transforms
    stay float64); a layer with a q/k norm, or one taking the reference route, stays float64.
    Raises :class:`~idinspect.errors.UnsupportedLayerError` for layers the mathematics does not model.
    """
    layer.validate()
    require_modelled(layer)
    L, zeroed, folded = fix_biases(layer.to(torch.float64))
    v_live = L.b_V is not None and not folded
    qk_kept = getattr(L, "qk_norm", None) is not None
    b = balance_fast(L, v_live, workspace, torch.float64 if qk_kept else apply_dtype)
    if b is None:
        b = balance_reference(L, v_live)
    report = GaugeReport(layer.index, zeroed_key_bias_dims=zeroed, folded_value_bias=folded, head_grams=b.head_grams)

    r = L.group_size
    if b.s_qk is not None and not qk_kept:
        _note(report, "qk", close_pairs(b.s_qk, rtol), r)
    if b.principal is not None and not qk_kept:
        report.dead_planes.extend((g, p) for g, p in b.dead.nonzero().tolist())
        P = b.principal.shape[1]
        _note(report, "plane", [(row // P, row % P, gap) for row, _, gap in close_pairs(b.principal.reshape(-1, 2), rtol)],
              r)
    _note(report, "vo", close_pairs(b.s_vo, rtol), r)

    kept = {role: None if t is None else t.clone() for role, t in (("b_V", L.b_V), ("b_O", L.b_O))}
    if qk_kept:
        if centres(L):
            qk = centre_qk(L)
        elif rotates(L):
            qk = rotate_planes(L)
        else:
            qk = {role: None if t is None else t.clone() for role, t in
                  (("W_Q", L.W_Q), ("W_K", L.W_K), ("b_Q", L.b_Q), ("b_K", L.b_K))}
        qk["qk_norm"] = balance_gains(L)
        if workspace is not None:            # the contract: W_Q lives in the workspace's buffer
            b.W_Q.copy_(qk["W_Q"])
            qk["W_Q"] = b.W_Q
    else:
        qk = {"W_Q": b.W_Q, "W_K": b.W_K, "b_Q": b.b_Q, "b_K": b.b_K}
    fixed = L.replace(**qk, W_V=b.W_V, W_O=b.W_O, b_V=b.b_V if v_live else kept["b_V"], b_O=kept["b_O"])
    return fixed, report


def _note(report: GaugeReport, block: str, pairs: list[tuple[int, int, float]], r: int) -> None:
    for g, i, gap in pairs:
        report.degeneracies.append(Degeneracy(layer=report.layer, block=block, group=g,
                                              heads=group_heads(g, r), index=i, relative_gap=gap))
