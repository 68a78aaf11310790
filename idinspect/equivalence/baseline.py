"""The rounding baseline of ``verify``: what rounding A alone to a bf16/fp16 checkpoint's dtype moves,
the yardstick such a checkpoint B is judged by (float32/float64 ones by rounding bounds, :mod:`.bounds`).

The baseline is A's attention moved by an exact scalar gauge (W_Q c, W_K / c, W_V c, W_O / c, c = 8/7,
so that every entry needs rounding) and rounded to B's dtype, every other tensor rounded too; B passes
a check when its error is at most :data:`BASELINE_FACTOR` times the baseline's.
"""

from __future__ import annotations

import torch

from ..forms.per_head.qk_gain_trade import cast_norm, tradable, trade
from ..layer.attention_layer import AttentionLayer
from .bounds import INVARIANT_FLOOR

#: Stored dtypes judged by rounding bounds (:mod:`.bounds`); the others against the rounding baseline.
BOUNDED_DTYPES = tuple(INVARIANT_FLOOR)
BASELINE_FACTOR = 4.0
BASELINE_SCALE = 8.0 / 7.0


def rounding_baseline(layer: AttentionLayer, dtype: torch.dtype, hold: torch.dtype = torch.float64) -> AttentionLayer:
    """``layer`` moved by the exact scalar gauge c = 8/7 (in float64) and rounded to ``dtype``, held in
    ``hold`` (float64 by default; float32 holds bf16/fp16 values exactly too). Under a q/k norm a scalar
    on W_Q, W_K is no gauge: W_Q, b_Q, W_K, b_K are only rounded, and the norm's gains (with their
    biases) take the gain trade by c on every orbit instead, then round."""
    c = BASELINE_SCALE
    norm = getattr(layer, "qk_norm", None)
    q = 1.0 if norm is not None else c
    factors = {"W_Q": q, "b_Q": q, "W_K": 1 / q, "b_K": 1 / q, "W_V": c, "b_V": c, "W_O": 1 / c, "b_O": 1.0}
    moved = layer.replace(**{r: scaled_and_rounded(t, factors[r], dtype, hold) for r, t in layer.tensors().items()})
    if layer.sinks is not None:
        moved = moved.replace(sinks=layer.sinks.to(hold))
    if norm is not None:
        moved = moved.replace(qk_norm=norm.to(hold))
    if norm is not None and tradable(layer):
        L = layer.to(torch.float64)
        traded = trade(L, torch.full((1, L.d_k), c, dtype=torch.float64))
        moved = moved.replace(qk_norm=cast_norm(traded, traded, dtype).to(hold))
    return moved


#: Entries of a tensor scaled and rounded at a time by :func:`scaled_and_rounded` (1 MiB of float64:
#: the widened chunk stays in cache between its product and its rounding).
ROUNDING_CHUNK = 2**17


def scaled_and_rounded(t: torch.Tensor, factor: float, dtype: torch.dtype, hold: torch.dtype) -> torch.Tensor:
    """``(t * factor)`` computed in float64, rounded to ``dtype``, held in ``hold`` (same shape and
    strides as ``t``): chunk by chunk in ``t``'s memory order, so that no float64 copy of ``t`` exists
    and no transposed copy either (a canonical per-head tensor is a strided view of the stored matrix:
    walked in index order, the 1B shape's baseline took 3.1 s of transposing copies, in memory order
    0.3 s; the values are the same, entry by entry)."""
    perm = _memory_order(t)
    source = t.permute(perm) if perm is not None else t.contiguous()
    out = torch.empty(source.shape, dtype=hold)
    flat, into = source.reshape(-1), out.view(-1)
    for i in range(0, flat.numel(), ROUNDING_CHUNK):
        into[i:i + ROUNDING_CHUNK].copy_((flat[i:i + ROUNDING_CHUNK].to(torch.float64) * factor).to(dtype))
    if perm is None:
        return out
    inverse = [0] * len(perm)
    for position, dim in enumerate(perm):
        inverse[dim] = position
    return out.permute(inverse)


def _memory_order(t: torch.Tensor) -> list[int] | None:
    """The permutation of ``t``'s dimensions that makes it contiguous (a transposed view of a dense
    block), or None where there is none (an overlapping or gapped view: copied instead)."""
    perm = sorted(range(t.dim()), key=lambda i: (-t.stride(i), -t.shape[i]))
    return perm if t.permute(perm).is_contiguous() else None


def invariant_floor(dtype: torch.dtype, baseline: float) -> float:
    """The flat floor of an invariant's tolerance: :data:`~.bounds.INVARIANT_FLOOR` for float32/float64,
    else the rounding baseline's."""
    return INVARIANT_FLOOR[dtype] if dtype in BOUNDED_DTYPES else baseline_tolerance(dtype, baseline)


def baseline_tolerance(dtype: torch.dtype, baseline: float | None) -> float:
    """bf16/fp16: ``BASELINE_FACTOR`` times the rounding baseline's error, at least one rounding."""
    if baseline is None:  # no baseline (offloaded): 16 units of rounding
        return 16 * torch.finfo(dtype).eps
    return max(BASELINE_FACTOR * baseline, one_rounding(dtype))  # floor: one rounding (zero invariants)


def one_rounding(dtype: torch.dtype) -> float:
    """The floor of a bf16/fp16 tolerance: one rounding of ``dtype`` (its eps, 7.8e-3 for bf16, 9.8e-4
    for fp16), below which no error is judged, whatever the rounding baseline says."""
    return torch.finfo(dtype).eps


def needs_baseline(dtype: torch.dtype, error: float) -> bool:
    """Whether an error of a bf16/fp16 check needs the rounding baseline to be judged: only one above
    :func:`one_rounding` does, as the tolerance max(BASELINE_FACTOR x baseline, one rounding) passes
    every error up to one rounding whatever the baseline. So verify computes the baseline (a third
    transformers run, a second alignment per layer) only where an error exceeds one rounding; the
    verdict is the same as with the baseline always computed."""
    return error > one_rounding(dtype)


__all__ = ["BASELINE_FACTOR", "BASELINE_SCALE", "BOUNDED_DTYPES", "baseline_tolerance", "invariant_floor",
           "needs_baseline", "one_rounding",
           "rounding_baseline", "scaled_and_rounded"]
