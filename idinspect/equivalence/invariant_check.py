"""``verify``'s invariant check: layer by layer, every gauge invariant of B against A's, each within
max(the dtype's floor, the rounding bound of that head's own factors) for float32/float64 checkpoints,
within :data:`~.baseline.BASELINE_FACTOR` times the rounding baseline's error for bf16/fp16 ones.

Layers are compared a few at a time, one per core, each in its own thread with single-threaded torch
kernels (:func:`~idinspect.numerics.parallel.ordered_map`, as inspect and diff do): a layer pair's work is
many small batched LAPACK calls beside a few factor-sized products, and two layers side by side keep a
2-core machine busy where torch's own two threads wait on each other at every small call (worse on a
loaded machine, where a parallel region waits for a descheduled thread). Results are taken in layer order.

Per layer pair, each tensor is widened once to the comparison's precision (float32 where both layers
are bf16/fp16, as export's own check of such a layer; else float64) and A's per-head Gram matrices are
computed once for both alignments, A against B and A against its rounding baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..forms.per_head import (
    INVARIANTS,
    InvariantError,
    invariant_error_tensors,
    invariant_errors,
)
from ..forms.per_head.invariants import describe_largest, largest_over_layers, worst_entry
from ..model import Model
from ..numerics.parallel import layer_workers, ordered_map
from ..numerics.precision import comparison_precision
from .baseline import BOUNDED_DTYPES, invariant_floor, needs_baseline, one_rounding, rounding_baseline
from .bounds import (
    CONDITION_FACTOR,
    eps,
    factor_amplification,
    head_grams,
    invariant_bound,
    largest_amplification,
)
from .checks import Check, Progress, no_progress
from .undefined import non_finite, refuse_overflow


@dataclass
class Judged:
    """One layer's errors of one invariant kind, with the conditioning bound of each entry."""

    layer: int
    errors: torch.Tensor          # [], [H] or [H, P]
    bound: torch.Tensor           # same shape
    amp_a: torch.Tensor
    amp_b: torch.Tensor


@dataclass
class LayerPair:
    """What one layer pair contributes: its judged errors per kind, its largest error, the rounding
    baseline's largest error per kind and both sides' largest amplification (float32/float64 only)."""

    judged: dict[str, Judged]
    largest: InvariantError
    baseline: dict[str, float]
    amplification: tuple[float, float] | None


def invariant_check(A: Model, B: Model, dtype: torch.dtype, progress: Progress = no_progress,
                    amps: tuple[list[float], list[float]] = ([], [])) -> Check:
    """Every invariant of every head (and rotary plane) within max(the dtype's floor, the rounding
    bound of that head's own factors). Appends each layer's largest amplification to ``amps`` (A, B)
    where B's dtype is judged by rounding bounds (float32/float64)."""
    judged: dict[str, list[Judged]] = {k: [] for k in INVARIANTS}
    base: dict[str, float | None] = {k: 0.0 for k in INVARIANTS}
    largest: list[tuple[int, InvariantError]] = []     # each layer's largest, as export states it
    n = A.num_layers
    workers = layer_workers(_pair_bytes_in_flight(A), n, torch.device("cpu"))
    lazy = dtype not in BOUNDED_DTYPES        # bf16/fp16: the baseline only where an error exceeds one rounding
    progress("invariants", 0, n)
    pairs = ordered_map(lambda i, _: layer_pair(A, B, i, dtype, with_baseline=not lazy), n, workers, lambda: None)
    for i, pair in enumerate(pairs):
        if isinstance(pair, Check):
            return pair
        for kind, j in pair.judged.items():
            judged[kind].append(j)
        largest.append((i, pair.largest))
        for kind, e in pair.baseline.items():
            base[kind] = max(base[kind], e)
        if pair.amplification is not None:
            for side, amp in zip(amps, pair.amplification):
                side.append(amp)
        progress("invariants", i + 1, n)
    present = [k for k in INVARIANTS if judged[k]]
    if lazy:
        worst = max(float(j.errors.max()) for k in present for j in judged[k])
        base = _baseline_over_layers(A, dtype, workers, progress) if needs_baseline(dtype, worst) else \
            {k: None for k in INVARIANTS}
    per_kind = {k: worst_against_tolerance(k, judged[k], one_rounding(dtype) if base[k] is None
                                           else invariant_floor(dtype, base[k]), base[k])
                for k in present}
    passed = all(v["error"] <= v["tolerance"] for v in per_kind.values())
    top = max(present, key=lambda k: per_kind[k]["error"] / per_kind[k]["tolerance"])
    return Check("invariants", passed, error=per_kind[top]["error"], tolerance=per_kind[top]["tolerance"],
                 baseline=base[top], detail=f"{n} layers; {describe_largest(*largest_over_layers(largest))}; "
                 f"worst relative to its tolerance: {per_kind[top]['where']}; "
                 f"tolerance: {per_kind[top]['bound']}",
                 extra={"per_invariant": per_kind})


def _baseline_over_layers(A: Model, dtype: torch.dtype, workers: int, progress: Progress) -> dict[str, float | None]:
    """The rounding baseline's largest invariant error of each kind over A's layers (a second pass, for
    bf16/fp16 checks whose errors exceed one rounding: :func:`.baseline.needs_baseline`)."""
    n = A.num_layers
    base: dict[str, float | None] = {k: 0.0 for k in INVARIANTS}
    progress("invariants", n, 2 * n)
    for i, errors in enumerate(ordered_map(lambda i, _: baseline_errors(A, i, dtype), n, workers, lambda: None)):
        for kind, e in errors.items():
            base[kind] = max(base[kind], e)
        progress("invariants", n + i + 1, 2 * n)
    return base


def baseline_errors(A: Model, i: int, dtype: torch.dtype, la=None, grams_a=None) -> dict[str, float]:
    """Layer ``i``'s largest invariant error of each kind between A and its rounding baseline in ``dtype``
    (``la``, ``grams_a``: layer i already widened to the comparison's precision and its per-head Grams)."""
    if la is None:
        la = A.layer(i)
        la = la.to(comparison_precision(la.W_Q.dtype, dtype))
    precision = la.W_Q.dtype
    grams_a = head_grams(la, precision) if grams_a is None else grams_a
    return {kind: e.error for kind, e in invariant_errors(la, rounding_baseline(la, dtype, precision),
                                                          grams_a=grams_a, precision=precision).items()}


def layer_pair(A: Model, B: Model, i: int, dtype: torch.dtype, with_baseline: bool = True) -> LayerPair | Check:
    """Layer ``i`` of A and B compared (a failed :class:`Check` where a tensor is not finite or the
    layers are not comparable; raises where float64 products would overflow); ``with_baseline``: and A
    against its rounding baseline (else :attr:`LayerPair.baseline` is empty)."""
    la, lb = A.layer(i), B.layer(i)
    for side, layer in (("A", la), ("B", lb)):
        for role, t in layer.tensors().items():
            bad = non_finite(layer.tensor_names.get(role, role), t, side)
            if bad:
                return Check("invariants", False, detail=bad)
            refuse_overflow(layer, role, t, side)
    eps_a, eps_b = eps(la.W_Q.dtype), eps(lb.W_Q.dtype)
    precision = comparison_precision(la.W_Q.dtype, lb.W_Q.dtype)
    la, lb = la.to(precision), lb.to(precision)     # widened once: every step below reads these
    grams_a = head_grams(la, precision)   # A's per-head Grams: both alignments (and its amplification) use them
    try:
        errors = invariant_error_tensors(la, lb, grams_a=grams_a, precision=precision)
    except ValueError as exc:
        return Check("invariants", False, detail=str(exc))
    bounded = dtype in BOUNDED_DTYPES
    if bounded:                            # the amplifications set float32/float64 tolerances only
        amp_a, amp_b = factor_amplification(la, grams_a), factor_amplification(lb)
    else:
        amp_a = amp_b = {kind: torch.ones_like(err) for kind, err in errors.items()}
    judged = {}
    for kind, err in errors.items():
        # float32/float64: the flat floor is raised to the factors' rounding bound; bf16/fp16
        # are judged against the rounding baseline, which already moves and rounds these factors
        bound = invariant_bound(eps_a, amp_a[kind], eps_b, amp_b[kind]) if bounded else torch.zeros_like(err)
        judged[kind] = Judged(i, err, bound, amp_a[kind], amp_b[kind])
    baseline = baseline_errors(A, i, dtype, la, grams_a) if with_baseline else {}
    return LayerPair(judged, max((worst_entry(kind, err) for kind, err in errors.items()), key=lambda e: e.error),
                     baseline, (largest_amplification(amp_a), largest_amplification(amp_b)) if bounded else None)


def _pair_bytes_in_flight(model: Model) -> int:
    """Bound on what one layer pair holds while compared (layer 0's shapes): both layers as stored, and
    copies of both and of the rounding baseline in the comparison's precision, twice over for the
    alignment's factor-sized temporaries."""
    keys = model.adapter.attention_keys(0)
    wide = comparison_precision(*(model.reader.dtype(key) for key in keys)).itemsize
    return sum(math.prod(model.reader.shape(key)) * (2 * model.reader.dtype(key).itemsize + 6 * wide) for key in keys)


def worst_against_tolerance(kind: str, layers: list[Judged], flat: float, baseline: float) -> dict:
    """The entry (layer, head, plane) with the largest error / max(flat, its own bound)."""
    best = None
    for j in layers:
        tol = torch.clamp(j.bound, min=flat)
        ratio = j.errors / tol
        at = int(ratio.reshape(-1).argmax())
        if best is None or float(ratio.reshape(-1)[at]) > best[0]:
            best = (float(ratio.reshape(-1)[at]), j, at)
    _, j, at = best
    head = plane = None
    if j.errors.dim() == 1:
        head = at
    elif j.errors.dim() == 2:
        head, plane = divmod(at, j.errors.shape[1])
    where = InvariantError(kind, 0.0, head, plane).where(j.layer)
    tol = max(flat, float(j.bound.reshape(-1)[at]))
    aa, ab = float(j.amp_a.reshape(-1)[at]), float(j.amp_b.reshape(-1)[at])
    why = (f"{CONDITION_FACTOR:g} (eps_A x {aa:.3g} + eps_B x {ab:.3g}), the factors' conditioning at "
           f"{where.rsplit(' ', 1)[0]}" if tol > flat else "the stored dtype's tolerance")
    return {"error": float(j.errors.reshape(-1)[at]), "where": where, "baseline": baseline, "tolerance": tol,
            "bound": why}


__all__ = ["Judged", "LayerPair", "invariant_check", "layer_pair", "worst_against_tolerance"]
