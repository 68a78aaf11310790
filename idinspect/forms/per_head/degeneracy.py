"""What the actual weights add to the structural count: exact extra freedom of degenerate factors.

The structural count assumes full-rank factors. Per kv group g (r query heads, width k), the
tangent space of the map from factors to the invariants has dimension (derivation in the docstring
of :func:`_bilinear_kernel`)

    kernel(A_1..A_r, B -> A_i B^T) = r m_A (k - rank B) + m_B (k - rank [A_1; ..; A_r]) + rank[A] rank B

where A_i [m_A, k] are per-head factors and B [m_B, k] the shared one. Full rank gives k^2, the
gauge. Applied to

- QK, unrotated dims: A_i = [W_Q^h; b_Q^h] (bias row if present), B = W_K^g (b_K is a no-op there;
  under soft-capping or sinks it is live and B = [W_K^g; b_K^g]);
- QK, each RoPE plane: the same over C with k = 1 (a plane's two columns as one complex column;
  the plane gauge is one complex scalar), B = [W_K^g; b_K^g] (rotated key biases are live);
  real dimension = 2 x the complex one;
- VO (transposed): A_i = W_O^hT [d, k], B = W_V^g; a live value bias (no b_O) couples the groups
  through one d-vector and is handled by :func:`_live_value_bias_extra`. With sinks each head sees
  its b_V^g W_O^h on its own: B = [W_V^g; b_V^g].

A head whose W_OV is exactly zero ("dead") passes nothing to the output, so its whole query factor
is free and it is left out of its group's QK stack. Ranks use the rule of :data:`spectra.RANK_RULE`,
on the small R factors of :func:`spectra.head_spectra` (W = Q R, so [W; b] has the singular
values of [R; b]).

Assumptions, stated in the report: generic inputs, and heads not duplicating each other (two heads
with equal W_QK would only identify the sum of their W_OV); those are not detected.
"""

from __future__ import annotations

import torch

from ...layer.attention_layer import AttentionLayer
from . import structure
from .spectra import HeadSpectra


def _bilinear_kernel(r: torch.Tensor, m_a: int, m_b: int, k: int, rank_a: torch.Tensor,
                     rank_b: torch.Tensor) -> torch.Tensor:
    """dim ker of (X_i, Y) -> (X_i B^T + A_i Y^T)_i, per group.

    Image = {(X_i B^T)} + {(A Y^T)}: dimensions r m_a rank B and rank A * m_b, meeting in
    rank A * rank B; the kernel is the domain r m_a k + m_b k minus the image.
    """
    return r * m_a * (k - rank_b) + m_b * (k - rank_a) + rank_a * rank_b


def _rank(stack: torch.Tensor, rtol: float) -> torch.Tensor:
    """Numerical rank of each [m, k] matrix of a batch [..., m, k] (s_i > rtol s_max)."""
    s = torch.linalg.svdvals(stack)
    return (s > rtol * s[..., :1]).sum(dim=-1)


def _full_or_rank(stack: torch.Tensor, full: torch.Tensor, rtol: float) -> torch.Tensor:
    """:func:`_rank` of each matrix of ``stack`` [n, m, k], taking k without an SVD where ``full``
    [n] says the matrix has full column rank (it holds a factor whose condition was certified)."""
    full = full.to(stack.device)
    out = torch.full(full.shape, stack.shape[-1], dtype=torch.long, device=stack.device)
    if not bool(full.all()):
        rest = (~full).nonzero().flatten()
        out[rest] = _rank(stack[rest], rtol)
    return out


def _nonzero(part: torch.Tensor, whole: torch.Tensor, rtol: float) -> torch.Tensor:
    """1 where ||part|| > rtol ||whole|| over the last two dims, else 0 (complex rank of one column)."""
    return (torch.linalg.vector_norm(part, dim=(-2, -1)) > rtol * torch.linalg.vector_norm(whole, dim=(-2, -1))).long()


def extra_unidentified(layer: AttentionLayer, s: HeadSpectra) -> dict | None:
    """``{"qk": [G], "vo": [G], "dead_heads": [...], "total"}`` extra unidentified dims, or None
    if a factor is non-finite (then nothing about its freedom can be said) or the layer normalises
    queries and keys (the bilinear kernel below does not describe a norm's tangent space: not measured)."""
    if getattr(layer, "qk_norm", None) is not None:
        return None
    if s.factors is None or not (bool(s.qk_ok.all()) and bool(s.ov_ok.all())):
        return None
    R_Q, R_K, R_V, R_O = (s.factors[n] for n in ("R_Q", "R_K", "R_V", "R_O"))
    G, r, d, dk, dv = layer.n_kv_heads, layer.group_size, layer.d_model, layer.d_k, layer.d_v
    dev, rtol = R_Q.device, s.rtol

    dead = (s.ov_rank == 0).to(dev)                                   # [H]
    known = s.certified or {}
    cert = {n: known[n].to(dev) if n in known else torch.zeros(len(s.factors[n]), dtype=torch.bool, device=dev)
            for n in ("R_Q", "R_K", "R_V", "R_O")}
    q_full = (cert["R_Q"] & ~dead).reshape(G, r).any(dim=1)          # a certified live head: stack rank k
    r_live = (~dead).reshape(G, r).sum(dim=1)                         # [G]
    Qt = R_Q if layer.b_Q is None else torch.cat([R_Q, layer.b_Q[:, None, :]], dim=1)   # [H, m_q, dk]
    m_q = Qt.shape[1] - dk + d                                        # d or d + 1 rows in W space
    Qt = Qt * (~dead)[:, None, None]
    Qg = Qt.reshape(G, r * Qt.shape[1], dk)                           # group stacks of live heads

    rd = structure.rotary_dim(layer)
    ku = dk - rd
    qk_kernel = torch.zeros(G, dtype=torch.long, device=dev)
    if ku:
        U = slice(rd, dk)
        key_live = layer.b_K is not None and not structure.shift_invariant(layer)
        Ku = torch.cat([R_K, layer.b_K[:, None, :]], dim=1) if key_live else R_K
        qk_kernel += _bilinear_kernel(r_live, m_q, d + key_live, ku, _full_or_rank(Qg[:, :, U], q_full, rtol),
                                      _full_or_rank(Ku[:, :, U], cert["R_K"], rtol))
    if rd:
        Kt = R_K if layer.b_K is None else torch.cat([R_K, layer.b_K[:, None, :]], dim=1)
        m_k = d + (layer.b_K is not None)
        cols = torch.tensor(layer.positional.rotary.plane_columns(), device=dev)       # [planes, 2]
        a_p = _nonzero(Qg[:, :, cols].movedim(1, -2), Qg[:, None], rtol)             # [G, planes]
        b_p = _nonzero(Kt[:, :, cols].movedim(1, -2), Kt[:, None], rtol)
        qk_kernel += 2 * _bilinear_kernel(r_live[:, None], m_q, m_k, 1, a_p, b_p).sum(dim=1)
    qk_kernel += (r - r_live) * m_q * dk                              # dead heads' query factors
    qk_extra = qk_kernel - structure.qk_gauge_dim_per_group(layer)

    Og = R_O.reshape(G, r * dv, dv)
    r_full = torch.full((G,), r, device=dev)
    per_head_bias = layer.b_V is not None and not structure.rows_sum_to_one(layer)
    Vt = torch.cat([R_V, layer.b_V[:, None, :]], dim=1) if per_head_bias else R_V
    o_full = cert["R_O"].reshape(G, r).any(dim=1)
    vo_kernel = _bilinear_kernel(r_full, d, d + per_head_bias, dv, _full_or_rank(Og, o_full, rtol),
                                 _full_or_rank(Vt, cert["R_V"], rtol))
    vo_extra = vo_kernel - dv ** 2
    bias_extra = _live_value_bias_extra(layer, R_V, cert["R_V"], rtol) if _value_bias_live(layer) else 0

    qk_list, vo_list = qk_extra.cpu().tolist(), vo_extra.cpu().tolist()
    return {"qk": qk_list, "vo": vo_list, "value_bias": bias_extra,
            "dead_heads": dead.nonzero().flatten().cpu().tolist(),
            "total": int(sum(qk_list) + sum(vo_list) + bias_extra)}


def _value_bias_live(layer: AttentionLayer) -> bool:
    """b_V acts through the one d-vector sum_h b_V W_O^h (no b_O, rows summing to one)."""
    return layer.b_V is not None and layer.b_O is None and structure.rows_sum_to_one(layer)


def _live_value_bias_extra(layer: AttentionLayer, R_V: torch.Tensor, v_full: torch.Tensor, rtol: float) -> int:
    """Extra null dims from a live b_V beyond ``structure.redundant_value_bias_dims``.

    b_V reaches the output only through c = sum_g b_V^g S_g, S_g = sum_{h in g} W_O^h; let
    t = rank [S_1; ..; S_G]. The kernel gains G d_v - t value-bias dims, and loses d - t when some
    b_V^g leaves the row space of its W_V^g: then a direction dW_O^h = n w^T with W_V^g n = 0
    (free in the VO count) moves c by (b_V^g . n) w, which b_V can follow only inside range S.
    Relative to the structural max(0, G d_v - d): (min(G d_v, d) - t) - [flag] (d - t).
    """
    G, r, dv, d = layer.n_kv_heads, layer.group_size, layer.d_v, layer.d_model
    S = layer.W_O.to(torch.float64).reshape(G, r, dv, d).sum(dim=1).reshape(G * dv, d)
    t = int(_rank(S, rtol))
    V = torch.cat([R_V, layer.b_V[:, None, :]], dim=1)
    escapes = _full_or_rank(V, v_full, rtol) > _full_or_rank(R_V, v_full, rtol)
    return (min(G * dv, d) - t) - (d - t) * int(bool(escapes.any()))
