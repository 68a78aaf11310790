"""Per-unit invariants of gated MLPs (``compare --whole-model``): evidence beyond attention.

The attention invariants (:mod:`.invariants`) do not see the MLP at all: two checkpoints with the
same attention and different MLPs would pass them. For a pre-RMSNorm gated MLP (Llama, Mistral,
Qwen2, Granite), unit i reads the post-attention norm (gain gamma) through gate row g_i and up row
u_i and writes down column w_i. With the gain folded (G_i = gamma * g_i, U_i = gamma * u_i), three
numbers per unit are unchanged by every whole-model symmetry that touches the MLP:

- ``gate``   ||G_i||                 (a residual rotation keeps norms; the gate cannot be rescaled)
- ``scale``  ||U_i|| ||w_i||         (up row * a, down column / a leaves the product)
- ``cosine`` |<G_i, U_i>| / (||G_i|| ||U_i||)   (rotation-invariant; |.| for a negative a)

and a permutation of the units permutes them all, so each quantity is compared as a sorted list
(sorting moves no value by more than the largest per-value change, so the bound below carries over).

Rounding radius, for a side stored with unit roundoff u (folded: eps = u_g + u_W + u_g u_W):
|d||G_i||| <= eps_G ||G_i||; |d scale| <= ((1 + eps_U)(1 + u_w) - 1) scale; |d cosine| <=
2.5 (eps_G + eps_U) (first order: the inner product moves by at most (eps_G + eps_U) ||G|| ||U||,
each norm by its eps); each radius plus 1e-12 relative for the float64 computation. Two sides agree
up to rounding where |x_A - x_B| <= r_A + r_B for every value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..analysis.whole_model import PRE_RMS_GATED
from ..analysis.whole_model_read import FORM_BY_TYPE, GATED_MLP_NAMES
from .invariants import unit_roundoff

QUANTITIES = ("gate", "scale", "cosine")
#: Relative accuracy of the float64 computation of each quantity.
COMPUTE_RTOL = 1e-12


@dataclass
class LayerMLPInvariants:
    """One layer's sorted unit quantities [f] each (float64, descending) and their radii [f]."""

    index: int
    values: dict[str, torch.Tensor]
    radii: dict[str, torch.Tensor]


def why_not_covered(model) -> str | None:
    """Why ``model``'s MLP has no unit invariants (None: it has)."""
    mt = model.config.model_type
    if FORM_BY_TYPE.get(mt) != PRE_RMS_GATED or mt in ("phi3", "mixtral"):
        return (f"model_type {mt!r}: MLP unit invariants cover dense gated MLPs with separate gate/up/down "
                "projections after RMSNorm only")
    first = f"{model.adapter.prefix}layers.0."
    missing = [n for n in GATED_MLP_NAMES.values() if f"{first}{n}" not in model.reader]
    if missing:
        return f"tensor {first}{missing[0]} is not stored: no MLP unit invariants"
    return None


def _folded(weight: torch.Tensor, gain: torch.Tensor) -> tuple[torch.Tensor, float]:
    u_w, u_g = unit_roundoff(weight.dtype), unit_roundoff(gain.dtype)
    return weight.to(torch.float64) * gain.to(torch.float64), u_w + u_g + u_w * u_g


def layer_mlp_invariants(index: int, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                         gain: torch.Tensor) -> LayerMLPInvariants:
    """The unit invariants of one layer: gate, up (f, d), down (d, f) as stored, gain (d,) the post-attention norm's."""
    G, eps_g = _folded(gate, gain)
    U, eps_u = _folded(up, gain)
    W, u_w = down.to(torch.float64), unit_roundoff(down.dtype)
    ng, nu, nw = (torch.linalg.vector_norm(G, dim=1), torch.linalg.vector_norm(U, dim=1),
                  torch.linalg.vector_norm(W, dim=0))
    denom = ng * nu
    cosine = torch.where(denom > 0, (G * U).sum(1).abs() / torch.where(denom > 0, denom, 1.0), torch.zeros_like(denom))
    raw = {"gate": (ng, eps_g + COMPUTE_RTOL, 0.0),
           "scale": (nu * nw, (1 + eps_u) * (1 + u_w) - 1 + COMPUTE_RTOL, 0.0),
           "cosine": (cosine.clamp(max=1.0), 0.0, 2.5 * (eps_g + eps_u) + COMPUTE_RTOL)}
    values, radii = {}, {}
    for name, (v, rel, absolute) in raw.items():
        v = v.sort(descending=True).values
        values[name], radii[name] = v, rel * v.abs() + absolute
    return LayerMLPInvariants(index, values, radii)


def model_mlp_invariants(model) -> tuple[list[LayerMLPInvariants], list[str]]:
    """Every layer's unit invariants and the stored dtypes they came from (reads each layer's gate, up,
    down and post-attention gain; call only after :func:`why_not_covered` returned None)."""
    out, dtypes = [], set()
    for i in range(model.num_layers):
        stem = f"{model.adapter.prefix}layers.{i}."
        t = {role: model.reader.get(stem + name) for role, name in GATED_MLP_NAMES.items()}
        dtypes.update(str(v.dtype).removeprefix("torch.") for v in t.values())
        out.append(layer_mlp_invariants(i, t["gate"], t["up"], t["down"], t["norm"]))
    return out, sorted(dtypes)


def compare_mlp(a: list[LayerMLPInvariants], b: list[LayerMLPInvariants], rtol_a: float = 0.0,
                rtol_b: float = 0.0) -> dict:
    """{"holds", "worst": {"ratio", "layer", "quantity", "error", "tolerance"}} over every layer and unit;
    different layer counts or widths do not hold (with the reason). ``rtol_*``: relative rounding of
    the stored values themselves (2^-24 for a fingerprint's float32)."""
    if len(a) != len(b):
        return {"holds": False, "reason": f"MLP layers differ: {len(a)} vs {len(b)}"}
    worst = {"ratio": 0.0}
    for A, B in zip(a, b):
        for q in QUANTITIES:
            xa, xb = A.values[q], B.values[q]
            if xa.shape != xb.shape:
                return {"holds": False, "reason": f"layer {A.index}: MLP widths differ: {xa.numel()} vs {xb.numel()}"}
            err, tol = (xa - xb).abs(), A.radii[q] + B.radii[q] + rtol_a * xa.abs() + rtol_b * xb.abs()
            ratio = torch.where(tol > 0, err / torch.where(tol > 0, tol, 1.0), torch.where(err > 0, torch.inf, 0.0))
            ratio = torch.nan_to_num(ratio, nan=float("inf"))
            if ratio.numel() and float(ratio.max()) > worst["ratio"]:
                k = int(ratio.argmax())
                worst = {"ratio": float(ratio[k]), "layer": A.index, "quantity": q, "error": float(err[k]),
                         "tolerance": float(tol[k])}
    return {"holds": worst["ratio"] <= 1.0, "worst": worst}


__all__ = ["QUANTITIES", "LayerMLPInvariants", "compare_mlp", "layer_mlp_invariants", "model_mlp_invariants",
           "why_not_covered"]
