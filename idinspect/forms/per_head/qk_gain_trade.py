"""The gain trade under a q/k norm, fixed by a stated rule (docs/mathematics.md, "Normalised queries
and keys", "The gauge-fixed form").

With q^h <- n(q^h) a^h + beta_Q^h and k^g <- n(k^g) b^g + beta_K^g (a, b the multipliers
gain_offset + w, beta the bias a LayerNorm adds after its gain, if any), the only continuous QK
freedom left is, per *trade orbit* (a rotary plane's two columns, or one unrotated column) and
per *gain class* (one class when a single gain vector serves every head; else one per kv group g:
its r query heads and key head g):

    a[o] -> c a[o],  beta_Q[o] -> c beta_Q[o],  b[o] -> b[o] / c,  beta_K[o] -> beta_K[o] / c   (c != 0)

The rule: c = s sqrt(||b[o]|| / ||a[o]||), the norms over the *stored* entries the trade moves (the
class's query multipliers on the orbit's columns, and its key multipliers there), so that afterwards
||a[o]|| = ||b[o]|| = sqrt(||a[o]|| ||b[o]||); s = +-1 makes the largest-magnitude key multiplier of
the orbit positive (the discrete half of the trade, c < 0). The biases follow their gains and take no
part in choosing c. An orbit with a zero query or key multiplier norm is left as stored. Its invariants,
per query head h and orbit o: the outer product [a^h[o], beta_Q^h[o]] (x) [b^g[o], beta_K^g[o]].
The unrotated part of a norm key bias is a no-op under a shift-invariant softmax: zeroed, and left
out of the invariants.
"""

from __future__ import annotations

import dataclasses

import torch

from ...layer.attention_layer import AttentionLayer, QKNorm
from .structure import shift_invariant, unrotated_columns

ROLES = ("q_gain", "k_gain", "q_bias", "k_bias")
_TINY = torch.finfo(torch.float64).tiny


def trade_orbits(layer: AttentionLayer) -> list[list[int]]:
    """Head columns of each trade orbit: every rotary plane (i, j), then every unrotated column."""
    planes = [list(p) for p in layer.positional.rotary.plane_columns()] if layer.positional.kind == "rope" else []
    rd = 2 * len(planes)
    return planes + [[u] for u in range(rd, layer.d_k)]


def tradable(layer: AttentionLayer) -> bool:
    """Does ``layer`` have a q/k norm with gains whose trade can be stored (both shared [d_k], or both
    per head / per projection)?"""
    norm = layer.qk_norm
    if norm is None or norm.q_gain is None or norm.k_gain is None:
        return False
    return (norm.q_gain.numel() == layer.d_k) == (norm.k_gain.numel() == layer.d_k)


def _classes(layer: AttentionLayer, which: str, t: torch.Tensor) -> torch.Tensor:
    """A stored norm tensor as [classes, rows, d_k]: [1, 1, d_k] when shared, else [G, r, d_k]
    (queries) or [G, 1, d_k] (keys)."""
    d_k = layer.d_k
    if t.numel() == d_k:
        return t.reshape(1, 1, d_k)
    rows = layer.group_size if which == "q" else 1
    return t.reshape(layer.n_kv_heads, rows, d_k)


def orbit_norms(layer: AttentionLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """(||a[o]||, ||b[o]||) per gain class and orbit, [classes, orbits] each (float64): the norms of
    the class's query and key multipliers (gain_offset + stored gain) over the orbit's columns."""
    norm = layer.qk_norm
    orbits = trade_orbits(layer)
    out = []
    for which, g in (("q", norm.q_gain), ("k", norm.k_gain)):
        m = _classes(layer, which, g.to(torch.float64) + norm.gain_offset)            # [c, rows, d_k]
        sq = m.pow(2).sum(1)                                                          # [c, d_k]
        out.append(torch.stack([sq[:, o].sum(-1) for o in orbits], dim=-1).sqrt())
    return out[0], out[1]


def key_orbit_entries(layer: AttentionLayer) -> list[torch.Tensor]:
    """Per orbit, the class's key multipliers on its columns, [classes, rows |o|] (float64)."""
    norm = layer.qk_norm
    m = _classes(layer, "k", norm.k_gain.to(torch.float64) + norm.gain_offset)       # [c, rows, d_k]
    return [m[:, :, o].flatten(1) for o in trade_orbits(layer)]


def key_lead_signs(layer: AttentionLayer) -> torch.Tensor:
    """[classes, orbits]: the sign of the largest-magnitude key multiplier on each orbit (the first
    such entry on a tie; +1 where all are zero)."""
    signs = []
    for entries in key_orbit_entries(layer):
        lead = entries.gather(1, entries.abs().argmax(dim=1, keepdim=True))[:, 0]
        signs.append(torch.where(lead < 0, -1.0, 1.0).to(torch.float64))
    return torch.stack(signs, dim=-1)


def trade_factors(layer: AttentionLayer) -> torch.Tensor:
    """c per gain class and head column, [classes, d_k]: s sqrt(||b[o]|| / ||a[o]||) on each column of
    orbit o, s the sign of the orbit's largest-magnitude key multiplier (so that it ends positive);
    1 where either norm is zero (or not finite)."""
    nq, nk = orbit_norms(layer)
    ok = (nq > 0) & (nk > 0) & torch.isfinite(nq) & torch.isfinite(nk)
    c = torch.where(ok, key_lead_signs(layer) * (nk / torch.where(ok, nq, torch.ones_like(nq))).sqrt(),
                    torch.ones_like(nq))
    col = torch.empty(c.shape[0], layer.d_k, dtype=torch.float64)
    for o, columns in enumerate(trade_orbits(layer)):
        col[:, columns] = c[:, o:o + 1]
    return col


def trade(layer: AttentionLayer, factors: torch.Tensor) -> QKNorm:
    """The layer's q/k norm moved by the trade ``factors`` [classes, d_k] (queries times c, keys over
    c, each bias with its gain), stored gains as gain_offset + w -> (gain_offset + w) c - gain_offset,
    in float64 and the stored shapes."""
    norm = layer.qk_norm
    new = {}
    for role in ROLES:
        t = getattr(norm, role)
        if t is None:
            continue
        which, offset = role[0], norm.gain_offset if role.endswith("gain") else 0.0
        f = factors[:, None, :] if which == "q" else 1.0 / factors[:, None, :]
        moved = (_classes(layer, which, t.to(torch.float64)) + offset) * f - offset
        new[role] = moved.reshape(t.shape)
    return dataclasses.replace(norm, **new)


def noop_norm_key_bias_columns(layer: AttentionLayer) -> list[int]:
    """Head columns of the norm's key bias (a bias after the gain, Phi) that are a no-op: the unrotated
    ones under a shift-invariant softmax (n(q)_u a_u beta_K,u is the same for every key of a row;
    :func:`~idinspect.forms.per_head.structure.noop_key_bias_dims`); none otherwise."""
    norm = layer.qk_norm
    if norm is None or norm.k_bias is None or not shift_invariant(layer):
        return []
    return list(unrotated_columns(layer))


def balance_gains(layer: AttentionLayer) -> QKNorm | None:
    """The rule applied: ``layer``'s q/k norm with equal query and key multiplier norms on every
    trade orbit of every gain class, and the no-op part of a norm key bias zeroed (float64); the
    norm otherwise unchanged (as float64) where nothing is tradable; None without a norm."""
    if layer.qk_norm is None:
        return None
    norm = trade(layer, trade_factors(layer)) if tradable(layer) else layer.qk_norm.to(torch.float64)
    noop = noop_norm_key_bias_columns(layer)
    if noop:
        k_bias = norm.k_bias.clone()
        k_bias.view(-1, layer.d_k)[:, noop] = 0
        norm = dataclasses.replace(norm, k_bias=k_bias)
    return norm


def noop_norm_key_bias_residual(layer: AttentionLayer) -> float:
    """||beta_K[:, no-op columns]|| / ||beta_K||: 0 once the no-op part is zeroed (or where there is none)."""
    noop = noop_norm_key_bias_columns(layer)
    if not noop:
        return 0.0
    b = layer.qk_norm.k_bias.to(torch.float64).reshape(-1, layer.d_k)
    part, whole = float(b[:, noop].norm()), float(b.norm())
    return 0.0 if part == 0.0 else part / whole


def cast_norm(norm: QKNorm, stored: QKNorm, target: torch.dtype | None) -> QKNorm:
    """``norm`` with each tensor cast to ``target``, or to the dtype ``stored`` keeps it in."""
    return dataclasses.replace(norm, **{role: getattr(norm, role).to(target or getattr(stored, role).dtype, copy=True)
                                        for role in ROLES if getattr(norm, role) is not None})


def gain_balance_residuals(layer: AttentionLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """(balance, sign) per gain class and orbit, [classes, orbits] each; empty where nothing is tradable.

    balance: | ||a[o]|| - ||b[o]|| | / (||a[o]|| + ||b[o]||); sign: (|most negative| - most positive)^+ /
    max |entry| over the orbit's key multipliers. Both 0 on orbits the rule leaves as stored (a zero norm).
    """
    if not tradable(layer):
        empty = torch.zeros(0, 0, dtype=torch.float64)
        return empty, empty
    nq, nk = orbit_norms(layer)
    ok = (nq > 0) & (nk > 0)
    balance = torch.where(ok, (nq - nk).abs() / torch.where(ok, nq + nk, torch.ones_like(nq)), torch.zeros_like(nq))
    sign = []
    for entries in key_orbit_entries(layer):
        top = entries.abs().amax(dim=1)
        bad = (-entries.amin(dim=1) - entries.amax(dim=1)).clamp(min=0)
        sign.append(bad / torch.where(top > 0, top, torch.ones_like(top)))
    return balance, torch.where(ok, torch.stack(sign, dim=-1), torch.zeros_like(nq))


def _augmented(layer: AttentionLayer, which: str, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """([multiplier; bias] [heads, 2, d_k], [stored gain; bias] likewise), float64; bias rows zero
    where there is none."""
    norm = layer.qk_norm
    g = norm.gains(heads, layer.d_k, which).to(torch.float64)
    b = norm.biases(heads, layer.d_k, which)
    b = torch.zeros_like(g) if b is None else b.to(torch.float64, copy=True)
    if which == "k":
        b[:, noop_norm_key_bias_columns(layer)] = 0          # its no-op part is no invariant
    return torch.stack([g, b], 1), torch.stack([g - norm.gain_offset, b], 1)


def gain_product_errors(A: AttentionLayer, B: AttentionLayer) -> torch.Tensor:
    """[H]: per query head, the largest over trade orbits o of the relative change of
    X^h[o] (x) Y^g(h)[o] (X = [a; beta_Q], Y = [b; beta_K] on the orbit's columns):
    ||X_A Y_A^T - X_B Y_B^T||_F / max(||X_A|| ||Y_A||, ||X_B|| ||Y_B||); 0 where both vanish."""
    H, G = A.n_heads, A.n_kv_heads
    kv = torch.arange(H) // A.group_size
    (Xa, _), (Ya, _) = _augmented(A, "q", H), _augmented(A, "k", G)
    (Xb, _), (Yb, _) = _augmented(B, "q", H), _augmented(B, "k", G)
    Ya, Yb = Ya[kv], Yb[kv]
    worst = torch.zeros(H, dtype=torch.float64)
    for cols in trade_orbits(A):
        xa, ya = Xa[:, :, cols].flatten(1), Ya[:, :, cols].flatten(1)               # [H, 2 |o|]
        xb, yb = Xb[:, :, cols].flatten(1), Yb[:, :, cols].flatten(1)
        diff = (xa[:, :, None] * ya[:, None, :] - xb[:, :, None] * yb[:, None, :]).flatten(1).norm(dim=1)
        scale = torch.maximum(xa.norm(dim=1) * ya.norm(dim=1), xb.norm(dim=1) * yb.norm(dim=1))
        worst = torch.maximum(worst, torch.where(scale > 0, diff, torch.zeros_like(diff)) / scale.clamp_min(_TINY))
    return worst


def gain_product_amplification(layer: AttentionLayer) -> torch.Tensor:
    """[H]: how much a relative rounding of the stored gains and biases can move a head's orbit
    products, relative: max over orbits of (||stored X|| / ||X|| + ||stored Y|| / ||Y||) / 2, at least
    1 (1 without a gain offset; large only where gain_offset + w nearly cancels)."""
    H, G = layer.n_heads, layer.n_kv_heads
    kv = torch.arange(H) // layer.group_size
    (X, Xs), (Y, Ys) = _augmented(layer, "q", H), _augmented(layer, "k", G)
    Y, Ys = Y[kv], Ys[kv]
    amp = torch.ones(H, dtype=torch.float64)
    for cols in trade_orbits(layer):
        ratio = sum(_ratio(S[:, :, cols].flatten(1).norm(dim=1), M[:, :, cols].flatten(1).norm(dim=1))
                    for S, M in ((Xs, X), (Ys, Y)))
        amp = torch.maximum(amp, ratio / 2)
    return amp


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.ones_like(den))
