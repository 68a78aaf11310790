"""Is a checkpoint already in the balanced gauge? Checked by the conditions that define it.

Re-canonicalising a rounded gauge-fixed form can rotate columns whose singular values are close
(by about rounding / gap), so comparing tensors would call a correct bf16 export "not fixed". The
defining conditions are instead stable under rounding; each gives a relative residual:

- bias:   ||b_K[:, U]|| / ||b_K|| (no-op key bias zero); ||b_V|| / max(||b_V||, ||b_O||) where absorbable;
- QK, VO per group (factors X [m, k], Y [n, k] with X Y^T the group's form):
          balance  max(||X^T X - Y^T Y||, ||offdiag X^T X||, ||offdiag Y^T Y||) / mean(||X^T X||, ||Y^T Y||),
          order    max_i (g_{i+1} - g_i)^+ / g_0 over g = diag(X^T X),
          sign     max_j ((|most negative| - most positive)^+ / max |entry|) over the columns of Y;
- planes: | ||Q_p||^2 - ||K_p||^2 | / (||Q_p||^2 + ||K_p||^2), |M_01| / tr M, (M_11 - M_00)^+ / tr M, and
          the sign of K_p's first column.

All are k x k Gram products: O(d d_k^2) per group. Under a q/k norm W_Q, b_Q, W_K, b_K are kept as
stored (no QK conditions, no no-op key bias); the norm gains satisfy the trade rule instead:

- gains:  | ||a[o]|| - ||b[o]|| | / (||a[o]|| + ||b[o]||) per gain class and trade orbit o (rotary
          plane or unrotated dim; a, b the query and key multipliers, :mod:`.qk_gain_trade`), and
          the sign residual of the orbit's key multipliers (largest-magnitude entry positive);
          ||beta_K[:, U]|| / ||beta_K|| for a key bias after the norm's gain (Phi: no-op part zero).
"""

from __future__ import annotations

from ..layer.latent_layer import is_latent
from .latent import latent_gauge_residuals
from typing import NamedTuple

from collections.abc import Iterable

import torch

from ..layer.attention_layer import AttentionLayer
from ..layer.structure import noop_key_bias_columns, require_modelled, unrotated_columns, value_bias_absorbable
from .factors import augment, output_stack, stack_groups
from .qk_gain_trade import gain_balance_residuals, noop_norm_key_bias_residual, trade_orbits
from .qk_centring import centring_residual
from .qk_plane_rotation import rotation_residual

#: Default residual tolerance per stored dtype: about 16 units of rounding (unit roundoff u = eps / 2),
#: and never below 1e-10 (float64 arithmetic in the check itself).
DEFAULT_RTOL = {torch.float64: 1e-10, torch.float32: 16 * 2.0 ** -24, torch.float16: 16 * 2.0 ** -11,
                torch.bfloat16: 16 * 2.0 ** -8}


def default_rtol(dtype: torch.dtype) -> float:
    return DEFAULT_RTOL.get(dtype, DEFAULT_RTOL[torch.float32])


def gauge_residuals(layer: AttentionLayer) -> list[tuple[float, str]]:
    """(residual, where) for every condition of the balanced gauge in ``layer`` (for a multi-head latent
    attention block: how far canonicalising moves each tensor, :func:`latent_gauge_residuals`)."""
    if is_latent(layer):
        return latent_gauge_residuals(layer)
    require_modelled(layer)
    L = layer.to(torch.float64)
    out: list[tuple[float, str]] = []
    at = f"layer {L.index}"
    G, d = L.n_kv_heads, L.d_model
    qk_kept = getattr(L, "qk_norm", None) is not None                     # under a q/k norm the QK side is kept as stored
    cols = list(unrotated_columns(L)) if not qk_kept else []
    key_row = d if noop_key_bias_columns(L) else None   # the key bias row takes part where it is live
    if L.b_K is not None and cols and key_row is not None:
        out.append((_ratio(L.b_K[:, cols].norm(), L.b_K.norm()), f"{at} b_K: no-op (unrotated) part not zero"))
    if value_bias_absorbable(L):
        residual = _ratio(L.b_V.norm(), torch.maximum(L.b_V.norm(), L.b_O.norm()))
        out.append((residual, f"{at} b_V: absorbable value bias not folded"))

    if qk_kept:
        out.append((noop_norm_key_bias_residual(L), f"{at} q/k norm key bias: no-op (unrotated) part not zero"))
        out.append((centring_residual(L), f"{at} W_Q/W_K: LayerNorm centring shift not removed (head means)"))
        out.append((rotation_residual(L), f"{at} W_Q/W_K: plane rotation not on the key's principal axes"))
        for res, name in zip(gain_balance_residuals(L), ("balance", "sign")):
            if res.numel():
                c, o = divmod(int(res.argmax()), res.shape[1])
                orbit = trade_orbits(L)[o]
                what = f"plane {o}" if len(orbit) == 2 else f"unrotated dim {orbit[0]}"
                cls = "all heads" if res.shape[0] == 1 else f"group {c}"
                out.append((float(res.max()), f"{at} {cls} {what} q/k gain {name}"))
    Q = stack_groups(augment(L.W_Q, L.b_Q), G)
    K = augment(L.W_K, L.b_K)
    for g in range(G):
        if cols:
            out += _pair_residuals(Q[g][:, cols], K[g][:key_row, cols], f"{at} group {g} QK")
        if L.positional.kind == "rope" and not qk_kept:
            for p, (i, j) in enumerate(L.positional.rotary.plane_columns()):
                out += _plane_residuals(Q[g][:, [i, j]], K[g][:, [i, j]], f"{at} group {g} plane {p}")
        v_live = L.b_V is not None and not value_bias_absorbable(L)
        V = augment(L.W_V, L.b_V if v_live else None)
        out += _pair_residuals(V[g], output_stack(L.W_O, G)[g], f"{at} group {g} VO")
    return out


class GaugeCheck(NamedTuple):
    """(fixed, worst residual, where); its truth value is ``fixed`` (``if is_gauge_fixed(m):`` works)."""

    fixed: bool
    worst: float
    where: str

    def __bool__(self) -> bool:
        return bool(self.fixed)


def is_gauge_fixed(model_or_layer, rtol: float | None = None) -> GaugeCheck:
    """(fixed, worst residual, where) for a layer, an iterable of layers or an open Model
    (``idinspect.load(source)``; the caller closes it); true exactly when fixed.

    ``fixed`` is True when every residual of :func:`gauge_residuals` is at most ``rtol``
    (default: :data:`DEFAULT_RTOL` for each layer's stored dtype). ``where`` names the worst
    condition, e.g. ``"layer 3 group 1 QK balance"``.
    """
    worst, where, fixed = 0.0, "", True
    for layer in _layers(model_or_layer):
        tol = default_rtol(layer.dtype) if rtol is None else rtol
        for value, place in gauge_residuals(layer):
            if value > tol:
                fixed = False
            if value > worst or not where:
                worst, where = value, place
    return GaugeCheck(fixed, worst, where)


def _layers(obj) -> Iterable[AttentionLayer]:
    if isinstance(obj, AttentionLayer) or is_latent(obj):
        return [obj]
    if hasattr(obj, "layers") and callable(obj.layers):   # an open Model: read lazily, one at a time
        return obj.layers()
    if isinstance(obj, (str, bytes)) or not isinstance(obj, Iterable):
        raise TypeError(f"is_gauge_fixed() takes a layer, layers or an open Model, not {type(obj).__name__}: "
                        "use idinspect.load(source) first")
    return obj


def _ratio(num: torch.Tensor, den: torch.Tensor) -> float:
    num, den = float(num), float(den)
    return 0.0 if num == 0.0 else num / den


def _offdiag(G: torch.Tensor) -> torch.Tensor:
    return G - torch.diag_embed(torch.diagonal(G, dim1=-2, dim2=-1))


def _sign_residual(Y: torch.Tensor) -> float:
    """Largest over columns of (|most negative| - most positive)^+ / max |entry|."""
    top = Y.abs().amax(dim=0)
    bad = (-Y.amin(dim=0) - Y.amax(dim=0)).clamp(min=0)
    ratio = bad / torch.where(top > 0, top, torch.ones_like(top))
    return float(torch.where(top > 0, ratio, torch.zeros_like(top)).max())


def _pair_residuals(X: torch.Tensor, Y: torch.Tensor, at: str) -> list[tuple[float, str]]:
    Gx, Gy = X.T @ X, Y.T @ Y
    scale = 0.5 * (Gx.norm() + Gy.norm())
    balance = max(float((Gx - Gy).norm()), float(_offdiag(Gx).norm()), float(_offdiag(Gy).norm()))
    g = torch.diagonal(Gx)
    order = float((g[1:] - g[:-1]).clamp(min=0).max()) if g.numel() > 1 else 0.0
    return [(_ratio(torch.tensor(balance), scale), f"{at} balance"),
            (_ratio(torch.tensor(order), g.max() if g.numel() else torch.tensor(0.0)), f"{at} order"),
            (_sign_residual(Y), f"{at} sign")]


def _plane_residuals(Qp: torch.Tensor, Kp: torch.Tensor, at: str) -> list[tuple[float, str]]:
    nq, nk = Qp.pow(2).sum(), Kp.pow(2).sum()
    M = Qp.T @ Qp + Kp.T @ Kp
    tr = M[0, 0] + M[1, 1]
    return [(_ratio((nq - nk).abs(), nq + nk), f"{at} scale"),
            (_ratio(M[0, 1].abs(), tr), f"{at} rotation"),
            (_ratio((M[1, 1] - M[0, 0]).clamp(min=0), tr), f"{at} order"),
            (_sign_residual(Kp[:, :1]), f"{at} half-turn")]
