"""The k x k products the orbit metrics need, for every kv group of a layer at once.

For each side the factor pair of group g is (L, R) as :func:`.metrics.group_factors` stacks it;
the metrics of :func:`.metrics.side_metrics_all` depend on it only through

    GL = L^T L,  GR = R^T R          (at A, and GL_b, GR_b at B)
    ML = L^T dL, MR = R^T dR         (dL = L_B - L_A, dR = R_B - R_A)
    step_sq = ||dL||^2 + ||dR||^2

A stacked factor is a sum over heads (L^T L = sum_h Q~_h^T Q~_h for the queries of a group, R^T R =
sum_h W_O^h W_O^hT for the outputs), so every product is one batched matmul over all heads or
groups of the layer, in the checkpoint's own head layout (W^T [n, k, d], no stacking copy), bias
rows added as outer products, then summed per group. Products in ``dtype`` (float32 for
bfloat16/float16 layers), results in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..forms.per_head.step_invariants import with_row
from ..layer.attention_layer import AttentionLayer


@dataclass
class GroupGrams:
    """Per group [G, k, k] (float64): GL, GR at A; GL_b, GR_b, ML, MR and step_sq [G] with a step
    (None without); ``rows`` = (rows of L, rows of R) of one group's pair."""

    GL: torch.Tensor
    GR: torch.Tensor
    rows: tuple[int, int]
    GL_b: torch.Tensor | None = None
    GR_b: torch.Tensor | None = None
    ML: torch.Tensor | None = None
    MR: torch.Tensor | None = None
    step_sq: torch.Tensor | None = None
    #: The per-head factor's own Grams at A before the group sum [H, k, k] (queries with their bias
    #: row for qk, W_O^h W_O^hT for vo): :func:`~idinspect.forms.per_head.invariants.invariant_errors`'s ``grams_a``.
    heads_a: torch.Tensor | None = None


#: Per side, (role, bias role) of L and of R, and whether that factor is per head (a group's r
#: members) or per group (one).
_PAIRS = {"qk": (("W_Q", "b_Q", True), ("W_K", "b_K", False)), "vo": (("W_V", "b_V", False), ("W_O", None, True))}


def _factors(layer: AttentionLayer, side: str, dtype: torch.dtype):
    """((Lt [n_L, k, d], l_row [n_L, k] or None, heads per group of L), (Rt, r_row, heads per group of R)):
    the per-head (or per-group) pieces whose products sum to the group's Grams."""
    out = []
    for role, bias, per_head in _PAIRS[side]:
        W = getattr(layer, role).to(dtype)
        Xt = W if role == "W_O" else W.transpose(1, 2)          # W_O [H, d_v, d] is W_O^hT's transpose already
        row = None if bias is None or getattr(layer, bias) is None else getattr(layer, bias).to(dtype)
        out.append((Xt, row, layer.group_size if per_head else 1))
    return tuple(out)


def _per_member(Xt: torch.Tensor, x_row, Yt: torch.Tensor, y_row) -> torch.Tensor:
    """X^T Y [n, k, k] in float64 for each head (or group) n, X = [Xt^T; x_row]."""
    P = Xt @ Yt.transpose(1, 2)
    if x_row is not None:
        P = P + x_row[:, :, None] * y_row[:, None, :]
    return P.to(torch.float64)


def _group_sum(P: torch.Tensor, per_group: int) -> torch.Tensor:
    n, k, _ = P.shape
    return P.reshape(n // per_group, per_group, k, k).sum(1)


def _product(Xt: torch.Tensor, x_row, Yt: torch.Tensor, y_row, per_group: int) -> torch.Tensor:
    """sum over the group's members of X^T Y [G, k, k] in float64."""
    return _group_sum(_per_member(Xt, x_row, Yt, y_row), per_group)


def _sq_norms(Xt: torch.Tensor, x_row, per_group: int) -> torch.Tensor:
    sq = torch.linalg.vector_norm(Xt, dim=(1, 2)).to(torch.float64) ** 2
    if x_row is not None:
        sq = sq + torch.linalg.vector_norm(x_row, dim=1).to(torch.float64) ** 2
    return sq.reshape(-1, per_group).sum(1)


def group_grams(a: AttentionLayer, side: str, b: AttentionLayer | None = None,
                dtype: torch.dtype = torch.float64) -> GroupGrams:
    """The products of the module doc for every kv group of ``side`` ("qk" or "vo")."""
    (La, la, rl), (Ra, ra, rr) = _factors(a, side, dtype)
    d = a.d_model
    rows = (rl * (d + (la is not None)), rr * (d + (ra is not None)))
    GLh, GRh = _per_member(La, la, La, la), _per_member(Ra, ra, Ra, ra)
    out = GroupGrams(_group_sum(GLh, rl), _group_sum(GRh, rr), rows, heads_a=GLh if side == "qk" else GRh)
    if b is None:
        return out
    (Lb, lb, _), (Rb, rb, _) = _factors(b, side, dtype)
    dL, dl = Lb - La, None if la is None else lb - la
    dR, dr = Rb - Ra, None if ra is None else rb - ra
    out.GL_b, out.GR_b = _product(Lb, lb, Lb, lb, rl), _product(Rb, rb, Rb, rb, rr)
    out.ML, out.MR = _product(La, la, dL, dl, rl), _product(Ra, ra, dR, dr, rr)
    out.step_sq = _sq_norms(dL, dl, rl) + _sq_norms(dR, dr, rr)
    return out


def group_grams_from_products(a: AttentionLayer, b: AttentionLayer, side: str, factors: dict) -> GroupGrams:
    """:func:`group_grams` of the pair from the per-member products of its weights (``factors``: role ->
    (GA, GB, M, D) [n, k, k] float64 with GA = X_a^T X_a, GB = X_b^T X_b, M = X_a^T dX, D = dX^T dX,
    W_O as W_O^hT; :mod:`.step_products`), the bias rows added as rank-one terms."""
    parts, rows = [], []
    for role, bias, per_head in _PAIRS[side]:
        biases = (None, None) if bias is None else (getattr(a, bias), getattr(b, bias))
        GA, GB, M, D = with_row(factors[role], *biases)
        per = a.group_size if per_head else 1
        parts.append((per, GA, GB, M, D))
        rows.append(per * (a.d_model + (biases[0] is not None)))
    (rl, GLh, GLb, ML, DL), (rr, GRh, GRb, MR, DR) = parts
    trace = lambda G, per: G.diagonal(dim1=-2, dim2=-1).sum(-1).reshape(-1, per).sum(1)  # noqa: E731
    return GroupGrams(GL=_group_sum(GLh, rl), GR=_group_sum(GRh, rr), rows=(rows[0], rows[1]),
                      GL_b=_group_sum(GLb, rl), GR_b=_group_sum(GRb, rr), ML=_group_sum(ML, rl),
                      MR=_group_sum(MR, rr), step_sq=trace(DL, rl) + trace(DR, rr),
                      heads_a=GLh if side == "qk" else GRh)
