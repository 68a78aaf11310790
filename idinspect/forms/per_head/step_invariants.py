"""Invariant changes between two layers from the products of their step, with no alignment fit.

:mod:`.aligned` compares P_a S_a^T with P_b S_b^T through the Gram matrices of dP = P_a - P~ and
dS = S_a - S~ after a fitted gauge Y (P~ = P_b Y^-T, S~ = S_b Y). With Y = I, dP and dS are the
step itself (sign aside), and every matrix :class:`.aligned.Alignment` needs is a product of the
step's factors: for a factor X (per head P, per group S) with dX = X_b - X_a,

    GA = X_a^T X_a,  GB = X_b^T X_b,  M = X_a^T dX,  D = dX^T dX
    G1 = dP^T dP = D_P,   G2 = dP^T P_b = -(M_P^T + D_P),   G3 = Gb = GB_P,
    S_a^T S_a = GA_S,  S_b^T S_a = GA_S + M_S^T,  dS^T S_a = -M_S^T,
    dS^T S_b = -(M_S^T + D_S),  dS^T dS = D_S,

all as small as the step where they must be, so nothing cancels when the step is small. When the
step is large but the invariants barely move (a gauge move of one checkpoint) the difference is not
resolved; :meth:`.aligned.Alignment.errors` tests that per block, and the caller then takes the
fitted alignment. Products: ``(GA, GB, M, D)`` [n, k, k] float64 per factor, with ``gamma`` the
resolution test's rounding unit: each Gram matrix above is off by at most gamma times the norms
of its two factors (:func:`idinspect.training.step_products.step_products` gives it).
"""

from __future__ import annotations

import torch

from ...gauge.linalg import relative
from ...layer.attention_layer import AttentionLayer
from .aligned import Alignment
from .biases import effective_output_bias
from .invariants import InvariantError, _check_comparable, _plane_j, worst_entry
from .structure import noop_key_bias_columns, unrotated_columns

#: A factor's products: GA, GB, M, D [n, k, k] (float64).
Products = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def with_row(p: Products, row_a: torch.Tensor | None, row_b: torch.Tensor | None) -> Products:
    """The products of X~ = [X; r] (one extra row per member, e.g. a bias; rows [n, k], either may be
    None for zero): rank-one terms added in float64."""
    if row_a is None and row_b is None:
        return p
    GA, GB, M, D = p
    ra = torch.zeros(GA.shape[:-1], dtype=GA.dtype) if row_a is None else row_a.to(GA.dtype)
    rb = torch.zeros(GA.shape[:-1], dtype=GA.dtype) if row_b is None else row_b.to(GA.dtype)
    dr = rb - ra
    outer = lambda x, y: x[:, :, None] * y[:, None, :]  # noqa: E731
    return GA + outer(ra, ra), GB + outer(rb, rb), M + outer(ra, dr), D + outer(dr, dr)


def identity_alignment(P: Products, S: Products, kv: torch.Tensor, gamma: float) -> Alignment:
    """The :class:`.aligned.Alignment` with Y = I of per-head factors P and per-group factors S."""
    GA_P, GB_P, M_P, D_P = P
    GA_S, GB_S, M_S, D_S = S
    Mt = M_S.transpose(-1, -2)
    eye = torch.eye(GA_S.shape[-1], dtype=GA_S.dtype).expand_as(GA_S)
    G2 = torch.add(D_P, M_P.transpose(-1, -2)).neg_()          # in D_P's (contiguous) layout
    return Alignment(G1=D_P, G2=G2, G3=GB_P, Gb=GB_P, Y=eye.clone(), Ga=GA_P,
                     SaSa=GA_S, SbSb=GB_S, SbSa=GA_S + Mt, dSSa=-Mt, dSSb=-(Mt + D_S), dSdS=D_S, kv=kv,
                     gamma=gamma)


def step_invariant_errors(a: AttentionLayer, b: AttentionLayer, factors: dict[str, Products],
                          gamma: float) -> dict[str, InvariantError] | None:
    """The worst relative change of every invariant kind (as :func:`.invariants.invariant_errors`) of
    layers without a q/k norm, from the products of their weights ``factors`` ("W_Q" [H], "W_K" [G],
    "W_V" [G], "W_O" [H] of W_O^hT; no bias rows); None where a difference is not resolved."""
    _check_comparable(a, b)
    kv = torch.arange(a.n_heads) // a.group_size
    out: dict[str, torch.Tensor] = {}
    sinks = a.sinks is not None
    qa, qb = a.b_Q, b.b_Q
    noop = list(noop_key_bias_columns(a))
    ka, kb = (None if t is None else t.clone() for t in (a.b_K, b.b_K))
    for t in (ka, kb):
        if t is not None and noop:
            t[:, noop] = 0
    qk = identity_alignment(with_row(factors["W_Q"], qa, qb), with_row(factors["W_K"], ka, kb), kv, gamma)
    cols = list(unrotated_columns(a))
    if cols:
        out["W_QK"] = qk.errors(torch.tensor(cols)[None])[:, 0]
    if a.positional.kind == "rope":
        planes = torch.tensor(a.positional.rotary.plane_columns())
        out["plane_QK"] = qk.errors(planes)
        out["plane_QJK"] = qk.errors(planes, *_plane_j(a.d_k, planes))
    V = with_row(factors["W_V"], a.b_V, b.b_V) if sinks else factors["W_V"]
    ov = identity_alignment(factors["W_O"], V, kv, gamma)
    out["W_OV"] = ov.errors(torch.arange(a.d_v)[None])[:, 0]
    if qk.uncertain or ov.uncertain:
        return None
    if sinks:
        sa, sb = a.sinks.double(), b.sinks.double()
        out["sinks"] = relative((sa - sb).norm(), sa.norm(), sb.norm())
        ea, eb = (_bias_or_zero(L) for L in (a, b))
    else:
        ea, eb = (_output_bias(L) for L in (a, b))
    out["output_bias"] = relative((ea - eb).norm(), ea.norm(), eb.norm())
    return {kind: worst_entry(kind, err.to(torch.float64)) for kind, err in out.items()}


def _bias_or_zero(layer: AttentionLayer) -> torch.Tensor:
    return torch.zeros(layer.d_model, dtype=torch.float64) if layer.b_O is None else layer.b_O.double()


def _output_bias(layer: AttentionLayer) -> torch.Tensor:
    """b_O + sum_h b_V^g(h) W_O^h in float64 (:func:`.biases.effective_output_bias`; W_O is widened
    only where a value bias needs it)."""
    if layer.b_V is None:
        return _bias_or_zero(layer)
    return effective_output_bias(layer.replace(W_O=layer.W_O.double(), b_V=layer.b_V.double(),
                                               b_O=None if layer.b_O is None else layer.b_O.double()))
