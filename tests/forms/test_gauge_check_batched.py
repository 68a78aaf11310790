"""is_gauge_fixed's plane and VO conditions, computed for every plane and group at once (issue 34:
one small-tensor pass per plane made a RoPE check cost ~30 inspections), equal the defining formulas
evaluated plane by plane (docs: idinspect/gauge/check.py's module docstring)."""

import torch

from idinspect.forms.per_head.factors import augment, output_stack, stack_groups


def _sign(Y):
    top = Y.abs().amax(dim=0)
    bad = (-Y.amin(dim=0) - Y.amax(dim=0)).clamp(min=0)
    return max((float(b / t) if t > 0 else 0.0) for b, t in zip(bad, top))


def _rel(num, den):
    return 0.0 if float(num) == 0.0 else float(num) / float(den)


def reference(L):
    """plane p of group g: scale, rotation, order, half-turn; VO sign, straight from the definitions."""
    L = L.to(torch.float64)
    G = L.n_kv_heads
    Q, K = stack_groups(augment(L.W_Q, L.b_Q), G), augment(L.W_K, L.b_K)
    O = output_stack(L.W_O, G)
    out = {}
    for g in range(G):
        for p, (i, j) in enumerate(L.positional.rotary.plane_columns()):
            Qp, Kp = Q[g][:, [i, j]], K[g][:, [i, j]]
            nq, nk = Qp.pow(2).sum(), Kp.pow(2).sum()
            M = Qp.T @ Qp + Kp.T @ Kp
            tr = M[0, 0] + M[1, 1]
            at = f"layer {L.index} group {g} plane {p}"
            out[f"{at} scale"] = _rel((nq - nk).abs(), nq + nk)
            out[f"{at} rotation"] = _rel(M[0, 1].abs(), tr)
            out[f"{at} order"] = _rel((M[1, 1] - M[0, 0]).clamp(min=0), tr)
            out[f"{at} half-turn"] = _sign(Kp[:, :1])
        out[f"layer {L.index} group {g} VO sign"] = _sign(O[g])
    return out
