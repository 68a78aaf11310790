"""The fast routes agree with the reference ones: the Gram route to the balanced form with the QR
route, the aligned Gram comparison of invariants with the thin-QR one, the max/min sign rule with
the arg-max one (ties included); ill-conditioned layers fall back and stay correct."""

from __future__ import annotations

import pytest
import torch

from idinspect.forms.per_head import (
    canonicalize,
    gauge_residuals,
    invariant_errors,
    structure,
)
from idinspect.forms.per_head import invariants as inv
from idinspect.forms.per_head.biases import fix_biases
from idinspect.forms.per_head.fast_route import balance_fast
from idinspect.forms.per_head.reference_route import balance_reference
from idinspect.forms.per_head.structure import unrotated_columns
from idinspect.gauge.linalg import key_side_signs
from idinspect.gauge.signs import leading_signs
from tests.forms.test_gauge import (
    _gain_orbits,
    random_gauge,
    synthetic_layer,
)

FIELDS = ("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "W_O", "s_qk", "principal", "s_vo")


def _routes(layer):
    L, _, folded = fix_biases(layer.to(torch.float64))
    v_live = L.b_V is not None and not folded
    return balance_fast(L, v_live), balance_reference(L, v_live)


def _qr_errors(a, b) -> dict[str, float]:
    """Every invariant kind through thin-QR cores (the reference comparison)."""
    A, B = a.to(torch.float64), b.to(torch.float64)
    kv = torch.arange(A.n_heads) // A.group_size
    if A.qk_norm is not None:     # the factors themselves, head by head
        out = {"qk_factors": _factor_error(A, B)}
        if A.qk_norm.q_gain is not None:
            out["qk_gains"] = _gain_product_error(A, B)
    else:
        out = {k: float(e.max()) for k, e in inv._qk_errors_by_qr(A, B, kv, list(unrotated_columns(A))).items()}
    Va, Vb = A.W_V, B.W_V
    if A.sinks is not None:               # each head's b_V^g W_O^h is an invariant of its own
        Va, Vb = inv.augment(A.W_V, A.b_V), inv.augment(B.W_V, B.b_V)
    out["W_OV"] = float(inv._rel(Va[kv], A.W_O.transpose(1, 2), Vb[kv], B.W_O.transpose(1, 2)).max())
    return out


def _gain_product_error(A, B) -> float:
    """max over heads h and trade orbits o of the relative change of the outer product
    [a^h[o], beta_Q^h[o]] (x) [b^g[o], beta_K^g[o]], head by head and orbit by orbit (beta_K's
    unrotated part, a no-op under a shift-invariant softmax, left out)."""
    worst = 0.0
    for h in range(A.n_heads):
        g = h // A.group_size
        for o in _gain_orbits(A):
            prods = []
            for L in (A, B):
                n = L.qk_norm
                x = torch.cat([n.gains(L.n_heads, L.d_k, "q")[h, o]] + ([n.biases(L.n_heads, L.d_k, "q")[h, o]]
                                                                         if n.q_bias is not None else []))
                kb = n.biases(L.n_kv_heads, L.d_k, "k")[g].clone() if n.k_bias is not None else None
                if kb is not None and structure.shift_invariant(L):
                    kb[list(unrotated_columns(L))] = 0                     # the no-op part is no invariant
                y = torch.cat([n.gains(L.n_kv_heads, L.d_k, "k")[g, o]] + ([kb[o]] if kb is not None else []))
                prods.append(torch.outer(x.double(), y.double()))
            scale = max(float(prods[0].norm()), float(prods[1].norm()))
            worst = max(worst, float((prods[0] - prods[1]).norm()) / scale if scale else 0.0)
    return worst


def _factor_error(A, B) -> float:
    """max over heads of ||[W; b]_A - [W; b]_B||_F / max norm, queries and keys (q/k-norm layers); a
    LayerNorm ignores each row's mean over the head's d_k columns, so those are compared centred."""
    worst = 0.0
    layer_norm = A.qk_norm.kind == "layer"
    for W, b in (("W_Q", "b_Q"), ("W_K", "b_K")):
        for h in range(getattr(A, W).shape[0]):
            rows = [torch.cat([getattr(L, W)[h]] + ([getattr(L, b)[h][None]] if getattr(L, b) is not None else []))
                    for L in (A, B)]                                               # [d (+1), d_k]
            if layer_norm:
                rows = [x - x.sum(dim=1, keepdim=True) / x.shape[1] for x in rows]
            xa, xb = (x.flatten() for x in rows)
            worst = max(worst, float((xa - xb).norm()) / max(float(xa.norm()), float(xb.norm())))
    return worst


def _ill_conditioned(layer):
    """Key columns nearly dependent: cond(W_K^T W_K) ~ 1e14, far past the Gram route's limit."""
    W_K = layer.W_K.clone()
    W_K[:, :, -1] = W_K[:, :, -2] + 1e-7 * W_K[:, :, -1]
    return layer.replace(W_K=W_K)


@pytest.mark.parametrize("kw", [{}, {"rotary_dim": 2, "d": 12, "H": 2, "G": 2, "dk": 6}], ids=["no-rope", "partial-rope"])
def test_ill_conditioned_layers_take_the_qr_route_and_stay_correct(kw):
    layer = _ill_conditioned(synthetic_layer(**kw))
    assert _routes(layer)[0] is None
    fixed, _ = canonicalize(layer)
    assert max(e.error for e in invariant_errors(layer, fixed).values()) <= 1e-9
    assert max(v for v, _ in gauge_residuals(fixed)) <= 1e-9
    twice, _ = canonicalize(fixed)
    assert all(float((getattr(twice, r) - t).norm()) <= 1e-6 * float(t.norm()) for r, t in fixed.tensors().items())


def test_unalignable_layers_are_compared_through_qr():
    """A zero key column makes the least-squares alignment singular: the QR comparison takes over."""
    layer = synthetic_layer()
    W_K = layer.W_K.clone()
    W_K[:, :, 0] = 0
    layer = layer.replace(W_K=W_K)
    moved = random_gauge(layer, 2)
    errors = invariant_errors(layer, moved)
    assert max(e.error for e in errors.values()) <= 1e-12
    rounded = {k: e.error for k, e in invariant_errors(layer, moved.to(torch.bfloat16)).items()
               if k not in ("output_bias", "sinks")}
    assert rounded == pytest.approx(_qr_errors(layer, moved.to(torch.bfloat16)), rel=1e-12)


def _stack(Xt: torch.Tensor, n_groups: int) -> torch.Tensor:
    """[G r, k, m] transposed blocks -> the explicit stacks [G, r m, k]."""
    N, k, m = Xt.shape
    return Xt.transpose(1, 2).reshape(n_groups, (N // n_groups) * m, k)


def test_leading_signs_follow_the_argmax_rule_with_ties():
    g = torch.Generator().manual_seed(0)
    Xt = torch.randn(6, 4, 5, generator=g, dtype=torch.float64)      # G = 2 groups of r = 3 blocks
    Xt[0, 0, :] = torch.tensor([0.5, -3.0, 3.0, 1.0, 0.0])            # +a and -a in one row: -a comes first
    Xt[3, 1, :] = torch.tensor([3.0, 0.1, -3.0, 0.0, 0.0])            # +a first
    Xt[1, 2, :] = 0
    Xt[0, 2, :] = 0
    Xt[2, 2, :] = 0                                                   # an all-zero column of group 0
    Xt[4, 3, :] = -Xt[3, 3, :].abs().max() - 1                        # two blocks, same magnitude, opposite signs:
    Xt[5, 3, :] = Xt[4, 3, :].abs()                                   # the earlier block decides
    Xt[3, 3, :] = 0
    expected = key_side_signs(_stack(Xt, 2))
    assert torch.equal(leading_signs(Xt, 2), expected)
    assert expected[0, 0] == -1 and expected[1, 1] == 1 and expected[0, 2] == 1 and expected[1, 3] == -1
    row = torch.tensor([[9.0, -9.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    with_row = torch.cat([_stack(Xt, 2), row[:, None, :]], dim=1)
    assert torch.equal(leading_signs(Xt, 2, row), key_side_signs(with_row))


def test_workspace_buffers_never_reach_the_result():
    """With a workspace, the float64 form lives in reused buffers; fix_layer's cast result does not."""
    from idinspect.exporting.layers import fix_layer
    from idinspect.layer.buffers import Float64Buffers

    layers = [synthetic_layer(rotary_dim=6, biases="qkv", seed=s) for s in (0, 1)]
    ws = Float64Buffers()
    first = fix_layer(layers[0], torch.float64, ws)
    kept = {r: t.clone() for r, t in first.cast.tensors().items()}
    fix_layer(layers[1], torch.float64, ws)                    # reuses every buffer
    assert all(torch.equal(t, kept[r]) for r, t in first.cast.tensors().items())
    alone = fix_layer(layers[0], torch.float64)
    assert all(torch.equal(t, getattr(alone.cast, r)) for r, t in first.cast.tensors().items())
