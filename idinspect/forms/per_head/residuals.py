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

import torch

from ...layer.attention_layer import AttentionLayer
from .factors import augment, output_stack, stack_groups
from .qk_centring import centring_residual
from .qk_gain_trade import (
    gain_balance_residuals,
    noop_norm_key_bias_residual,
    trade_orbits,
)
from .qk_plane_rotation import rotation_residual
from .structure import (
    noop_key_bias_columns,
    require_modelled,
    unrotated_columns,
    value_bias_absorbable,
)


def gauge_residuals(layer: AttentionLayer) -> list[tuple[float, str]]:
    """(residual, where) for every condition of the balanced gauge in the per-head ``layer``."""
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
    v_live = L.b_V is not None and not value_bias_absorbable(L)
    V = augment(L.W_V, L.b_V if v_live else None)
    O = output_stack(L.W_O, G)      # once per layer: each group's slice of one reshape
    o_signs = _column_sign_residuals(O).amax(dim=1).tolist()   # [G]: the VO sign residual of every group
    GV, GO = V.mT @ V, O.mT @ O     # [G, d_v, d_v] each: every group's Grams in one batched product
    if L.positional.kind == "rope" and not qk_kept:
        k_signs = _column_sign_residuals(K)          # [G, d_k]
        GQ, GK = Q.mT @ Q, K.mT @ K                  # [G, d_k, d_k]: every plane's entries
    for g in range(G):
        if cols:
            out += _pair_residuals(Q[g][:, cols], K[g][:key_row, cols], f"{at} group {g} QK")
        if L.positional.kind == "rope" and not qk_kept:
            out += _plane_residuals(GQ[g], GK[g], k_signs[g], L.positional.rotary.plane_columns(), f"{at} group {g}")
        out += _pair_residuals(V[g], O[g], f"{at} group {g} VO", sign=o_signs[g], grams=(GV[g], GO[g]))
    return out


def _ratio(num: torch.Tensor, den: torch.Tensor) -> float:
    num, den = float(num), float(den)
    return 0.0 if num == 0.0 else num / den


def _offdiag(G: torch.Tensor) -> torch.Tensor:
    return G - torch.diag_embed(torch.diagonal(G, dim1=-2, dim2=-1))


def _sign_residual(Y: torch.Tensor) -> float:
    """Largest over columns of (|most negative| - most positive)^+ / max |entry|."""
    return float(_column_sign_residuals(Y).max())


def _column_sign_residuals(Y: torch.Tensor) -> torch.Tensor:
    """(|most negative| - most positive)^+ / max |entry| of every column of Y [..., n, k]: [..., k]
    (0 for a zero column); the largest entry's magnitude is max(most positive, |most negative|)."""
    hi, lo = Y.amax(dim=-2), Y.amin(dim=-2)
    top = torch.maximum(hi, -lo)
    bad = (-lo - hi).clamp(min=0)
    ratio = bad / torch.where(top > 0, top, torch.ones_like(top))
    return torch.where(top > 0, ratio, torch.zeros_like(top))


def _pair_residuals(X: torch.Tensor, Y: torch.Tensor, at: str, sign: float | None = None,
                    grams: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[tuple[float, str]]:
    """Balance, order and sign of one group's factors; ``sign`` (Y's sign residual) and ``grams``
    (X^T X, Y^T Y) where already computed for all groups at once."""
    Gx, Gy = grams if grams is not None else (X.T @ X, Y.T @ Y)
    scale = 0.5 * (Gx.norm() + Gy.norm())
    balance = max(float((Gx - Gy).norm()), float(_offdiag(Gx).norm()), float(_offdiag(Gy).norm()))
    g = torch.diagonal(Gx)
    order = float((g[1:] - g[:-1]).clamp(min=0).max()) if g.numel() > 1 else 0.0
    return [(_ratio(torch.tensor(balance), scale), f"{at} balance"),
            (_ratio(torch.tensor(order), g.max() if g.numel() else torch.tensor(0.0)), f"{at} order"),
            (_sign_residual(Y) if sign is None else sign, f"{at} sign")]


def _plane_residuals(GQ: torch.Tensor, GK: torch.Tensor, k_signs: torch.Tensor, planes: list[tuple[int, int]],
                     at: str) -> list[tuple[float, str]]:
    """The four plane conditions of every rotary plane p = (i, j) of one group at once, from the
    Grams GQ = Q^T Q and GK = K^T K [d_k, d_k] of its stacked factors Q [m, d_k], K [n, d_k]; with Q_p = Q[:, (i, j)], K_p likewise and M = Q_p^T Q_p + K_p^T K_p,
    scale | ||Q_p||^2 - ||K_p||^2 | / (||Q_p||^2 + ||K_p||^2), rotation |M_01| / tr M,
    order (M_11 - M_00)^+ / tr M, half-turn the sign residual of K_p's first column (``k_signs``
    [d_k]: K's column sign residuals, :func:`_column_sign_residuals`). Each is
    read off the Grams (not ~20 small operations per plane)."""
    if not planes:
        return []
    i = torch.tensor([p[0] for p in planes])
    j = torch.tensor([p[1] for p in planes])
    qi, qj, ki, kj = GQ[i, i], GQ[j, j], GK[i, i], GK[j, j]
    nq, nk = qi + qj, ki + kj
    m00, m11, m01 = qi + ki, qj + kj, GQ[i, j] + GK[i, j]
    tr = m00 + m11
    columns = [("scale", _ratios((nq - nk).abs(), nq + nk)), ("rotation", _ratios(m01.abs(), tr)),
               ("order", _ratios((m11 - m00).clamp(min=0), tr)), ("half-turn", k_signs[i].tolist())]
    return [(values[p], f"{at} plane {p} {name}") for p in range(len(planes)) for name, values in columns]


def _ratios(num: torch.Tensor, den: torch.Tensor) -> list[float]:
    """:func:`_ratio` of each entry (0 where the numerator is 0)."""
    safe = torch.where(num == 0, torch.ones_like(den), den)
    return torch.where(num == 0, torch.zeros_like(num), num / safe).tolist()
