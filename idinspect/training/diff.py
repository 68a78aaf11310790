"""``idinspect diff A B``: how much of the step from checkpoint A to B moves along A's gauge orbit.

Streams the layers of both checkpoints (O(d d_k^2) per group, never a d x d matrix; on a CPU one
layer pair per core in flight, each with single-threaded kernels, within a memory bound, as
``inspect`` does: :mod:`idinspect.numerics.parallel`) and returns the diff document (``idinspect/schemas/diff.schema.json``).
"""

from __future__ import annotations

import math

import torch

from ..errors import IdinspectError
from ..forms import require
from ..forms.per_head.invariants import invariant_errors
from ..forms.per_head.spectra import all_finite
from ..forms.per_head.step_invariants import step_invariant_errors
from ..layer.attention_layer import BIAS_ROLES, AttentionLayer
from ..model import Model, load
from ..numerics.parallel import layer_workers, ordered_map
from ..numerics.precision import comparison_precision
from . import step_products
from .group_grams import group_grams, group_grams_from_products
from .metrics import SIDES, check_modelled, check_same_shape, layer_metrics, pooled_rho

SCHEMA_VERSION = 1


def _norm_sq(layer: AttentionLayer) -> float:
    return sum(float(torch.linalg.vector_norm(t)) ** 2 for t in layer.tensors().values())


def _diff_norm_sq(a: AttentionLayer, b: AttentionLayer) -> float:
    ta = a.tensors()
    return sum(float(torch.linalg.vector_norm(tb - ta[r])) ** 2 for r, tb in b.tensors().items())


@torch.inference_mode()       # no autograd bookkeeping in its ~1,000 small kernels (3-5% of diff's time)
def diff_layer(a: AttentionLayer, b: AttentionLayer) -> dict:
    """The diff record of one layer (see the schema).

    bfloat16/float16 pairs on a CPU with bf16/fp16 matrix units take the step's products straight
    from the stored weights (:mod:`.step_products`: exact products, float32 sums) and compare the
    invariants without an alignment fit (:mod:`idinspect.forms.per_head.step_invariants`), falling back to
    the fitted comparison where a difference is not resolved. Otherwise both layers are cast once,
    to float32 where both are stored in bfloat16/float16
    (:func:`~idinspect.numerics.precision.comparison_precision`: their difference is exact there and
    float32's rounding is far below what they can show), else float64; k x k work is float64 either way."""
    check_modelled(a)
    check_same_shape(a, b)
    dtype = comparison_precision(*(t.dtype for t in (*a.tensors().values(), *b.tensors().values())))
    factors = _step_factors(a, b)
    if factors is not None:
        products, gamma = factors
        grams = {side: group_grams_from_products(a, b, side, products) for side in SIDES}
        inv = step_invariant_errors(a, b, products, gamma)
        if inv is None:
            inv = invariant_errors(a, b, precision=dtype, grams_a=(grams["qk"].heads_a, grams["vo"].heads_a))
        norm_a_sq, step_sq = _norms_from_products(a, b, products)
    else:
        a, b = a.to(dtype), b.to(dtype)
        grams = {side: group_grams(a, side, b, dtype) for side in SIDES}
        inv = invariant_errors(a, b, precision=dtype, grams_a=(grams["qk"].heads_a, grams["vo"].heads_a))
        norm_a_sq, step_sq = _norm_sq(a), _diff_norm_sq(a, b)
    groups = layer_metrics(a, b, dtype, grams)
    r = a.group_size
    out_groups = []
    for g, m in enumerate(groups):
        out_groups.append({"group": g, "heads": list(range(g * r, (g + 1) * r)),
                           **{side: m[side].to_dict() for side in SIDES}})
    raw_a = math.sqrt(norm_a_sq)
    raw = math.sqrt(step_sq)
    summary = {}
    for side in SIDES:
        sides = [m[side] for m in groups]
        summary[side] = {
            "rho": pooled_rho(groups, (side,)),
            "reference": sides[0].reference,
            "beta_a": math.sqrt(sum(s.beta_a ** 2 for s in sides)),
            "beta_b": math.sqrt(sum(s.beta_b ** 2 for s in sides)),
            "tau_a": sum(s.tau_a for s in sides),
            "tau_b": sum(s.tau_b for s in sides),
            "mu_min": min(s.mu for s in sides),
            "ill_posed_groups": [g for g, s in enumerate(sides) if s.ill_posed],
        }
    return {
        "index": a.index,
        "rho": pooled_rho(groups),
        **summary,
        "raw_change": {"absolute": raw, "relative": raw / raw_a if raw_a > 0 else None},
        "invariant_change": {k: v.error for k, v in inv.items()},
        "invariant_change_max": max((v.error for v in inv.values()), default=0.0),
        "groups": out_groups,
    }


def _step_factors(a: AttentionLayer, b: AttentionLayer) -> tuple[dict, float] | None:
    """Role -> (GA, GB, M, D) of the four weights (W_O as W_O^hT) and their error bound, or None
    where the products cannot come from the stored weights (:mod:`.step_products`)."""
    pairs = {role: (getattr(a, role), getattr(b, role)) for role in ("W_Q", "W_K", "W_V")}
    pairs["W_O"] = (a.W_O.transpose(1, 2), b.W_O.transpose(1, 2))
    out, gamma = {}, 0.0
    for role, (xa, xb) in pairs.items():
        p = step_products.step_products(xa, xb)
        if p is None:
            return None
        out[role], gamma = (p.GA, p.GB, p.M, p.D), max(gamma, p.gamma)
    return out, gamma


def _norms_from_products(a: AttentionLayer, b: AttentionLayer, products: dict) -> tuple[float, float]:
    """(||a||^2, ||b - a||^2) over the layer's tensors: the weights' from the traces of GA and D, the
    biases' directly in float64."""
    trace = lambda G: float(G.diagonal(dim1=-2, dim2=-1).sum())
    norm_sq = sum(trace(GA) for GA, _, _, _ in products.values())
    step_sq = sum(trace(D) for _, _, _, D in products.values())
    for role in BIAS_ROLES:
        ta, tb = getattr(a, role), getattr(b, role)
        if ta is not None:
            norm_sq += float(torch.linalg.vector_norm(ta.double())) ** 2
            step_sq += float(torch.linalg.vector_norm(tb.double() - ta.double())) ** 2
    return norm_sq, step_sq


def _check_same_model(A: Model, B: Model) -> None:
    sa, sb = A.summary(), B.summary()
    for key in ("model_type", "layers", "hidden_size", "heads", "kv_heads", "head_dim", "positional", "rotary_dim"):
        if sa.get(key) != sb.get(key):
            raise IdinspectError(f"A and B differ in {key} ({sa.get(key)} vs {sb.get(key)}); diff compares two "
                                 "checkpoints of the same model (same family and shapes)")
    if A.num_layers != B.num_layers:
        raise IdinspectError(f"A has {A.num_layers} layers but B has {B.num_layers}; diff needs the same model")


def diff(a, b, *, token: str | None = None, cache_dir: str | None = None, local_files_only: bool = False,
         progress=None) -> dict:
    """The diff document of checkpoints (or models) ``a`` -> ``b``: per layer and kv group rho, beta,
    tau, mu for QK and VO, and the invariant change against the raw change."""
    kw = {"token": token, "cache_dir": cache_dir, "local_files_only": local_files_only}
    with _opened(a, kw) as A, _opened(b, kw) as B:
        require(A, "diff")
        _check_same_model(A, B)
        n = A.num_layers
        layers = []
        for i, record in enumerate(ordered_map(lambda i, _: _diff_finite(A, B, i), n,
                                               layer_workers(_pair_bytes_in_flight(A), n, torch.device("cpu")),
                                               lambda: None)):
            layers.append(record)
            if progress is not None:
                progress(i + 1, n)
        sa, sb = A.summary(), B.summary()
    H = sa["heads"]
    step = sum(g[s]["step_sq"] for L in layers for g in L["groups"] for s in SIDES)
    along = sum(g[s]["along_sq"] for L in layers for g in L["groups"] for s in SIDES)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "idinspect-diff",
        "a": {"source": sa["source"], "revision": sa["revision"]},
        "b": {"source": sb["source"], "revision": sb["revision"]},
        "model": {k: v for k, v in sa.items() if k not in ("source", "revision")},
        "one_over_2H": 1 / (2 * H) if H else None,
        "totals": {"rho": along / step if step > 0 else 0.0,
                   "ill_posed": [[L["index"], s, g] for L in layers for s in SIDES for g in L[s]["ill_posed_groups"]],
                   "invariant_change_max": max((L["invariant_change_max"] for L in layers), default=0.0)},
        "layers": layers,
    }


def _diff_finite(A: Model, B: Model, i: int) -> dict:
    """:func:`diff_layer` of layer ``i``, refused in one line where a weight is not finite or where the
    figures overflow float64 (weights near 1e154 and beyond: their squares do)."""
    la, lb = A.layer(i), B.layer(i)
    for side, model, layer in (("A", A, la), ("B", B, lb)):
        for role, t in layer.tensors().items():
            if not all_finite(t):        # one summing pass (the elementwise test over per-head views: 0.16 s of a 2-layer diff's 0.38)
                raise IdinspectError(f"{side} ({model.provenance.source}) layer {i} {role} holds NaN or Inf; diff needs "
                                     "finite weights ('idinspect inspect' names the tensors)")
    try:
        record = diff_layer(la, lb)
    except torch.linalg.LinAlgError:     # finite weights whose products overflow reach an SVD as Inf
        record = None
    if record is None or not _all_finite(record):
        biggest = max(float(t.abs().max()) for layer in (la, lb) for t in layer.tensors().values() if t.numel())
        raise IdinspectError(f"layer {i}: the diff's figures overflow float64 (largest |weight| {biggest:.3g}; its Gram "
                             "matrices and their products grow like |w|^2 and |w|^4): diff cannot measure this pair; "
                             "rescale both checkpoints by one factor (rho does not change)")
    return record


def _all_finite(x) -> bool:
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_all_finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(_all_finite(v) for v in x)
    return True


def _pair_bytes_in_flight(model: Model) -> int:
    """Bound on what one layer pair holds while diffed (layer 0's shapes): both layers as stored and
    copies of both in the comparison's precision (float32 for bf16/fp16, else float64); one group's
    factors come and go on top."""
    keys = model.adapter.attention_keys(0)
    wide = comparison_precision(*(model.reader.dtype(key) for key in keys)).itemsize
    return 2 * sum(math.prod(model.reader.shape(key)) * (model.reader.dtype(key).itemsize + wide) for key in keys)


class _opened:
    """Open a source (or accept an already opened Model / live module) and close what we opened."""

    def __init__(self, source, kw):
        self.source, self.kw, self.model = source, kw, None

    def __enter__(self) -> Model:
        if isinstance(self.source, Model):
            return self.source
        self.model = load(self.source, **self.kw) if isinstance(self.source, str) else load(self.source)
        return self.model

    def __exit__(self, *exc) -> None:
        if self.model is not None:
            self.model.close()
