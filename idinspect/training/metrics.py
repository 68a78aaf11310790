"""Per-layer, per-kv-group gauge metrics: imbalance (beta, tau, mu) and the orbit share rho of a step.

Works on canonical :class:`~idinspect.layer.attention_layer.AttentionLayer` objects, whatever they
came from (a checkpoint, or a live model through ``idinspect.load(model)``). Each group's factors
are cast to float64 one group at a time, so memory stays at a few group slices per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ..errors import IdinspectError
from ..forms.per_head.factors import augment
from ..forms.per_head.structure import unrotated_columns
from ..layer.attention_layer import AttentionLayer
from .group_grams import GroupGrams, group_grams
from .orbit import Algebra, imbalance_batch, project_from_grams_batch

SIDES = ("qk", "vo")


def qk_algebra(layer: AttentionLayer) -> Algebra:
    """The QK gauge algebra of ``layer``: gl(d_k), or with RoPE one complex scalar per rotary plane
    and gl on the unrotated columns."""
    rotary = layer.positional.rotary if layer.positional.kind == "rope" else None
    if rotary is None:
        return Algebra(layer.d_k)
    return Algebra(layer.d_k, tuple(rotary.plane_columns()), tuple(unrotated_columns(layer)))


def check_modelled(layer: AttentionLayer) -> None:
    """Refuse layers whose gauge the mathematics does not model (qk-norm, clipping; soft-capping and sinks keep the gauge group and are accepted)."""
    if layer.flags:
        names = ", ".join(sorted(layer.flags))
        raise IdinspectError(f"layer {layer.index} carries {names}; the gauge orbit of such layers is not modelled "
                             "(rho and beta would be wrong), so it is refused")


def group_factors(layer: AttentionLayer, g: int, side: str, dtype: torch.dtype = torch.float64
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, R) of kv group ``g`` in ``dtype`` (float64 by default; see :mod:`.orbit`).

    qk: L = [W_Q^h; b_Q^h] of the group's r heads stacked [r (d+1), d_k], R = [W_K^g; b_K^g] [d (+1), d_k];
    vo: L = [W_V^g; b_V^g] [d (+1), d_v], R = [W_O^h1, ..., W_O^hr]^T [r d, d_v].
    """
    r = layer.group_size
    heads = slice(g * r, (g + 1) * r)
    f64 = dtype
    if side == "qk":
        bq = layer.b_Q[heads].to(f64) if layer.b_Q is not None else None
        L = augment(layer.W_Q[heads].to(f64), bq).reshape(-1, layer.d_k)
        bk = layer.b_K[g:g + 1].to(f64) if layer.b_K is not None else None
        R = augment(layer.W_K[g:g + 1].to(f64), bk)[0]
        return L, R
    bv = layer.b_V[g:g + 1].to(f64) if layer.b_V is not None else None
    L = augment(layer.W_V[g:g + 1].to(f64), bv)[0]
    R = layer.W_O[heads].to(f64).transpose(1, 2).reshape(-1, layer.d_v)
    return L, R


def set_group_factors(tensors: dict[str, torch.Tensor], layer: AttentionLayer, g: int, side: str,
                      L: torch.Tensor, R: torch.Tensor) -> None:
    """Inverse of :func:`group_factors`: write (L, R) of group ``g``'s ``side`` into ``tensors``
    (role -> tensor of ``layer``'s shapes, modified in place)."""
    r, d = layer.group_size, layer.d_model
    heads = slice(g * r, (g + 1) * r)
    if side == "qk":
        Lh = L.reshape(r, -1, layer.d_k)
        tensors["W_Q"][heads] = Lh[:, :d]
        if layer.b_Q is not None:
            tensors["b_Q"][heads] = Lh[:, d]
        tensors["W_K"][g] = R[:d]
        if layer.b_K is not None:
            tensors["b_K"][g] = R[d]
    else:
        tensors["W_V"][g] = L[:d]
        if layer.b_V is not None:
            tensors["b_V"][g] = L[d]
        tensors["W_O"][heads] = R.reshape(r, d, layer.d_v).transpose(1, 2)


def side_algebra(layer: AttentionLayer, side: str) -> Algebra:
    """The gauge algebra of ``side``: :func:`qk_algebra` for qk, gl(d_v) for vo."""
    return qk_algebra(layer) if side == "qk" else Algebra(layer.d_v)


@dataclass
class SideMetrics:
    """One side (qk or vo) of one kv group. Step fields are None without a second layer.

    beta/tau/beta_full of A (``_a``) and B (``_b``); mu of A; rho = along_sq / step_sq;
    reference = gauge dimension / parameters of the pair (1/(2H) for bias-free multi-head QK).
    """

    beta_a: float
    tau_a: float
    beta_full_a: float
    mu: float
    ill_posed: bool
    reference: float
    beta_b: float | None = None
    tau_b: float | None = None
    beta_full_b: float | None = None
    rho: float | None = None
    step_sq: float | None = None
    along_sq: float | None = None

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}    # flat: no recursive asdict copy


def side_metrics_all(a: AttentionLayer, side: str, b: AttentionLayer | None = None,
                     dtype: torch.dtype = torch.float64, grams: GroupGrams | None = None) -> list[SideMetrics]:
    """Metrics of every group's ``side`` at ``a`` and, with ``b``, of the step b - a.

    The factor-sized products (Gram matrices, L^T dL; :mod:`.group_grams`, all groups at once) are
    formed in ``dtype`` (float32 only for bfloat16/float16 layers,
    :func:`~idinspect.numerics.precision.comparison_precision`), everything from the k x k matrices
    on in float64, batched over the groups. ``grams``: that result for the layer, when the caller
    already has it."""
    algebra = side_algebra(a, side)
    grams = grams if grams is not None else group_grams(a, side, b, dtype)
    GL, GR = grams.GL, grams.GR
    reference = algebra.dimension / (sum(grams.rows) * GL.shape[-1])
    if b is None:
        beta, tau, full = (t.tolist() for t in imbalance_batch(GL - GR, algebra))
        zero = torch.zeros_like(GL)
        projs = project_from_grams_batch(GL, GR, zero, zero, torch.zeros(GL.shape[0], dtype=GL.dtype), algebra)
        return [SideMetrics(beta[g], tau[g], full[g], p.mu, p.ill_posed, reference) for g, p in enumerate(projs)]
    n = GL.shape[0]                               # A's groups, then B's, in one batch
    imbalances = imbalance_batch(torch.cat((GL - GR, grams.GL_b - grams.GR_b)), algebra)
    (beta, tau, full), (beta_b, tau_b, full_b) = ((t[:n].tolist() for t in imbalances),
                                                  (t[n:].tolist() for t in imbalances))
    projs = project_from_grams_batch(GL, GR, grams.ML, grams.MR, grams.step_sq, algebra)
    return [SideMetrics(beta[g], tau[g], full[g], p.mu, p.ill_posed, reference, beta_b[g], tau_b[g], full_b[g],
                        p.rho, p.step_sq, p.along_sq) for g, p in enumerate(projs)]


def check_same_shape(a: AttentionLayer, b: AttentionLayer) -> None:
    """Same shapes, biases and positional kind, else an error naming the layer."""
    for role in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
        ta, tb = getattr(a, role), getattr(b, role)
        if (ta is None) != (tb is None) or (ta is not None and ta.shape != tb.shape):
            shape = lambda t: "absent" if t is None else list(t.shape)  # noqa: E731
            raise IdinspectError(f"layer {a.index} {role}: {shape(ta)} in A but {shape(tb)} in B; "
                                 "diff compares two checkpoints of the same model (same family and shapes)")
    if a.positional.kind != b.positional.kind or a.positional.rotary_dim != b.positional.rotary_dim:
        raise IdinspectError(f"layer {a.index}: positional encoding differs between A and B "
                             f"({a.positional.kind} vs {b.positional.kind}); diff needs the same model")


def layer_metrics(a: AttentionLayer, b: AttentionLayer | None = None, dtype: torch.dtype = torch.float64,
                  grams: dict[str, GroupGrams] | None = None) -> list[dict[str, SideMetrics]]:
    """Per kv group, {"qk": SideMetrics, "vo": SideMetrics} of layer ``a`` (and the step to ``b``);
    ``dtype`` as in :func:`side_metrics_all`; ``grams``: side -> :func:`.group_grams.group_grams` of
    the pair, when the caller already has them."""
    check_modelled(a)
    if b is not None:
        check_same_shape(a, b)
    grams = grams or {side: group_grams(a, side, b, dtype) for side in SIDES}
    per_side = {side: side_metrics_all(a, side, b, dtype, grams[side]) for side in SIDES}
    return [{side: per_side[side][g] for side in SIDES} for g in range(a.n_kv_heads)]


def pooled_rho(groups: list[dict[str, SideMetrics]], sides: tuple[str, ...] = SIDES) -> float | None:
    """sum along_sq / sum step_sq over the groups and ``sides`` (None without a step, 0 for a zero step)."""
    parts = [m[s] for m in groups for s in sides]
    if any(p.rho is None for p in parts):
        return None
    step = sum(p.step_sq for p in parts)
    return sum(p.along_sq for p in parts) / step if step > 0 else 0.0
