"""Rounding bounds for "do A and B compute the same function?": how far two parametrisations of one
function may differ once stored in a dtype and run in a compute dtype. One place, used by
``verify`` and by the test suite, so that a tolerance is a bound that follows from rounding and
never a constant that happens to sit above one machine's noise.

Notation: eps(t) = ``torch.finfo(t).eps`` (twice the unit roundoff: one rounding moves a value by at
most eps / 2 relative). For the factors X, Y of one invariant X Y^T (a head's W_QK, a rotary plane's
Q_p K_p^T, a head's W_OV) the *amplification* is

    amp = ||X||_F ||Y||_F / ||X Y^T||_F  >= 1

(1 for a balanced rank-1 head, about sqrt(k) for balanced well-conditioned ones, the square of a
gauge's condition number where a gauge move made the factors lopsided). Rounding X and Y with
relative error eps moves X Y^T by at most about eps amp relative, and so does computing x X Y^T
in a dtype with that eps.

**Invariants** (per head, per plane): ``C (eps_A amp_A + eps_B amp_B)``, raised to a flat floor
(:data:`INVARIANT_FLOOR`) that covers the float64 arithmetic of the check itself.

**Outputs** (logits, or last hidden states): each attention layer l adds its invariants' error to
the residual stream, and the residual path carries it to the output, so over depth the errors add
(the layers' Jacobians are taken as non-expanding: the pre-norm residual form keeps them near 1):

    tol = C [ sum_l ((eps_A + eps_c) amp_A,l + (eps_B + eps_c) amp_B,l)   storage and arithmetic of each layer
              + (2 L + 1) eps_n                                         the 2 L + 1 norms
              + 2 eps_c ]                                               embedding and output head

with amp_l the largest amplification over layer l's heads and invariant kinds, eps_c the compute
dtype's and eps_n = max(eps_c, eps(float32)): transformers computes RMSNorm and several LayerNorms in
float32 even in a float64 model. C = :data:`CONDITION_FACTOR` is the margin for the constants that
the first-order argument leaves out (dot-product length enters as sqrt(n) in practice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..forms.per_head.factors import augment
from ..forms.per_head.qk_gain_trade import gain_product_amplification
from ..forms.per_head.structure import noop_key_bias_columns, unrotated_columns
from ..layer.attention_layer import AttentionLayer

#: Margin on every rounding bound (see the module docstring).
CONDITION_FACTOR = 8.0
#: Invariant checks never demand less than this relative error: the float64 thin-QR arithmetic of
#: the comparison itself (float64) and one float32 rounding of a well-conditioned product (float32).
INVARIANT_FLOOR = {torch.float64: 1e-10, torch.float32: 1e-6}


def eps(dtype: torch.dtype) -> float:
    """``torch.finfo(dtype).eps`` for floating dtypes, 0 for integer ones (stored exactly)."""
    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def invariant_bound(eps_a: float, amp_a: torch.Tensor, eps_b: float, amp_b: torch.Tensor) -> torch.Tensor:
    """``C (eps_A amp_A + eps_B amp_B)``, elementwise over heads / planes."""
    return CONDITION_FACTOR * (eps_a * amp_a + eps_b * amp_b)


@dataclass(frozen=True)
class OutputBound:
    """The output tolerance and the terms it is made of (relative to max |output of A|)."""

    tolerance: float
    layers: float
    norms: float
    ends: float
    depth: int
    largest_amplification: float
    compute: str

    def describe(self) -> str:
        return (f"rounding bound {CONDITION_FACTOR:g} x ({self.layers:.2e} over {self.depth} layers, largest "
                f"amplification {self.largest_amplification:.3g} + {self.norms:.2e} norms + {self.ends:.2e} "
                f"embedding/head) in {self.compute}")


def output_bound(amp_a: Sequence[float], amp_b: Sequence[float], stored_a: torch.dtype, stored_b: torch.dtype,
                 compute: torch.dtype) -> OutputBound:
    """The relative output tolerance for A and B (see the module docstring); ``amp_a``/``amp_b`` hold one
    amplification per attention layer (:func:`layer_amplification`), same length."""
    if len(amp_a) != len(amp_b):
        raise ValueError(f"one amplification per layer on both sides: {len(amp_a)} vs {len(amp_b)}")
    e_a, e_b, e_c = eps(stored_a), eps(stored_b), eps(compute)
    e_n = max(e_c, eps(torch.float32))
    depth = len(amp_a)
    layers = sum((e_a + e_c) * a + (e_b + e_c) * b for a, b in zip(amp_a, amp_b))
    norms, ends = (2 * depth + 1) * e_n, 2 * e_c
    largest = max([*amp_a, *amp_b], default=1.0)
    return OutputBound(CONDITION_FACTOR * (layers + norms + ends), layers, norms, ends, depth, largest,
                       str(compute).removeprefix("torch."))


def head_grams(layer: AttentionLayer, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query head, Q~^T Q~ (Q~ = [W_Q; b_Q], bias row zero where absent) and W_O W_O^T [H, k, k],
    in ``dtype``: what :func:`factor_amplification` reads (float64), and the ``grams_a`` of
    :func:`~idinspect.forms.per_head.invariants.invariant_error_tensors` (one pass over the layer's query and
    output factors for both)."""
    L = layer.to(dtype)
    Q = augment(L.W_Q, L.b_Q if L.b_Q is not None else L.W_Q.new_zeros(L.n_heads, L.d_k))
    return Q.transpose(1, 2) @ Q, L.W_O @ L.W_O.transpose(1, 2)


def factor_amplification(layer: AttentionLayer,
                         grams: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """How much a relative rounding of the stored factors can move each invariant, shaped as
    :func:`~idinspect.forms.per_head.invariants.invariant_error_tensors`: ``W_QK``, ``W_OV`` [H],
    ``plane_QK``, ``plane_QJK`` [H, P], ``output_bias`` [] (the worst head's); ``qk_factors`` [H] = 1
    under a q/k norm (the factors are compared themselves: a relative rounding moves them by as much),
    and ``qk_gains`` [H] where it has gains (:func:`~idinspect.forms.per_head.qk_gain_trade.gain_product_amplification`).

    amp = ||X||_F ||Y||_F / ||X Y^T||_F for the factors X, Y of that head's (or plane's) invariant,
    from k x k Grams: ||X Y^T||_F^2 = tr(X^T X Y^T Y), never a d x d product. ``grams``: the layer's
    :func:`head_grams`, when already computed.
    """
    L = layer.to(torch.float64)
    gq, go = grams if grams is not None else head_grams(L)
    kv = torch.arange(L.n_heads) // L.group_size
    cols = list(unrotated_columns(L))
    noop = list(noop_key_bias_columns(L))
    key_bias = L.b_K.clone() if L.b_K is not None else None
    if key_bias is not None and noop:
        key_bias[:, noop] = 0                                          # the no-op part is not a factor
    K = augment(L.W_K, key_bias) if key_bias is not None else L.W_K
    gk = (K.transpose(1, 2) @ K)[kv]                                               # [H, d_k, d_k]
    out: dict[str, torch.Tensor] = {}
    if getattr(L, "qk_norm", None) is not None:
        out["qk_factors"] = torch.ones(L.n_heads, dtype=torch.float64)
        if L.qk_norm.q_gain is not None:
            out["qk_gains"] = gain_product_amplification(L)
    if cols:
        U = torch.tensor(cols)
        out["W_QK"] = _amplification(gq[:, U][:, :, U], gk[:, U][:, :, U])
    if L.positional.kind == "rope":
        planes = torch.tensor(L.positional.rotary.plane_columns())                # [P, 2]
        px = gq[:, planes[:, :, None], planes[:, None, :]]                         # [H, P, 2, 2]
        py = gk[:, planes[:, :, None], planes[:, None, :]]
        J = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
        out["plane_QK"] = _amplification(px, py)
        out["plane_QJK"] = _amplification(px, py, J.T @ px @ J)
    V = augment(L.W_V, L.b_V) if L.sinks is not None and L.b_V is not None else L.W_V   # per-head b_V under sinks
    gv = (V.transpose(1, 2) @ V)[kv]
    out["W_OV"] = _amplification(go, gv)
    out["output_bias"] = out["W_OV"].max()
    if L.sinks is not None:
        out["sinks"] = torch.tensor(1.0, dtype=torch.float64)          # stored as they are: nothing amplifies
    return out


def layer_amplification(layer: AttentionLayer) -> float:
    """The largest amplification over the layer's heads, planes and invariant kinds (1 at least)."""
    return largest_amplification(factor_amplification(layer))


def largest_amplification(amp: dict[str, torch.Tensor]) -> float:
    """The largest entry of a :func:`factor_amplification` result (1 at least)."""
    return max([1.0, *(float(t.max()) for t in amp.values() if t.numel())])


def _amplification(gx: torch.Tensor, gy: torch.Tensor, gx_product: torch.Tensor | None = None) -> torch.Tensor:
    """sqrt(tr Gx tr Gy / tr(Gx' Gy)) over the last two dims (Gx' = Gx, or its J-twisted form); 1
    where the product vanishes or is not finite (nothing to amplify)."""
    gxp = gx if gx_product is None else gx_product
    product = (gxp * gy.transpose(-1, -2)).sum(dim=(-1, -2)).clamp_min(0).sqrt()
    factors = (gx.diagonal(dim1=-2, dim2=-1).sum(-1) * gy.diagonal(dim1=-2, dim2=-1).sum(-1)).clamp_min(0).sqrt()
    amp = torch.where(product > 0, factors / torch.where(product > 0, product, torch.ones_like(product)),
                      torch.ones_like(product))
    return torch.nan_to_num(amp, nan=1.0, posinf=1.0)


__all__ = ["CONDITION_FACTOR", "INVARIANT_FLOOR", "OutputBound", "eps", "factor_amplification", "head_grams",
           "invariant_bound", "largest_amplification", "layer_amplification", "output_bound"]
