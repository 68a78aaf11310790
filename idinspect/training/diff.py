"""``idinspect diff A B``: how much of the step from checkpoint A to B moves along A's gauge orbit.

Streams the layers of both checkpoints (O(d d_k^2) per group, never a d x d matrix; on a CPU one
layer pair per core in flight, each with single-threaded kernels, within a memory bound, as
``inspect`` does: :mod:`idinspect.analysis.parallel`) and returns the diff document (``idinspect/schemas/diff.schema.json``).
"""

from __future__ import annotations

import math

import torch

from ..analysis.parallel import layer_workers, ordered_map
from ..analysis.precision import comparison_precision
from ..errors import IdinspectError
from ..gauge.invariants import invariant_errors
from ..layer.attention_layer import AttentionLayer
from ..sources.model import Model, load
from .group_grams import group_grams
from .metrics import SIDES, check_modelled, check_same_shape, layer_metrics, pooled_rho

SCHEMA_VERSION = "1"


def _norm_sq(layer: AttentionLayer) -> float:
    return sum(float(torch.linalg.vector_norm(t)) ** 2 for t in layer.tensors().values())


def _diff_norm_sq(a: AttentionLayer, b: AttentionLayer) -> float:
    ta = a.tensors()
    return sum(float(torch.linalg.vector_norm(tb - ta[r])) ** 2 for r, tb in b.tensors().items())


def diff_layer(a: AttentionLayer, b: AttentionLayer) -> dict:
    """The diff record of one layer (see the schema). Both layers are cast once, to float64, or to
    float32 where both are stored in bfloat16/float16 (:func:`~idinspect.analysis.precision.comparison_precision`:
    their difference is exact there and float32's rounding is far below what they can show); k x k
    work is float64 either way."""
    dtype = comparison_precision(*(t.dtype for t in (*a.tensors().values(), *b.tensors().values())))
    a, b = a.to(dtype), b.to(dtype)
    check_modelled(a)
    check_same_shape(a, b)
    grams = {side: group_grams(a, side, b, dtype) for side in SIDES}
    groups = layer_metrics(a, b, dtype, grams)
    r = a.group_size
    out_groups = []
    for g, m in enumerate(groups):
        out_groups.append({"group": g, "heads": list(range(g * r, (g + 1) * r)),
                           **{side: m[side].to_dict() for side in SIDES}})
    raw_a = math.sqrt(_norm_sq(a))
    raw = math.sqrt(_diff_norm_sq(a, b))
    inv = invariant_errors(a, b, precision=dtype, grams_a=(grams["qk"].heads_a, grams["vo"].heads_a))
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
    kw = dict(token=token, cache_dir=cache_dir, local_files_only=local_files_only)
    with _opened(a, kw) as A, _opened(b, kw) as B:
        A.require_per_head("diff")
        _check_same_model(A, B)
        n = A.num_layers
        layers = []
        for i, record in enumerate(ordered_map(lambda i, _: diff_layer(A.layer(i), B.layer(i)), n,
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
