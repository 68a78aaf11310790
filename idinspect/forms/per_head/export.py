"""Export of one per-head layer: canonicalise in float64, cast each tensor once, measure the change.

:func:`fix_per_head_layer` is the per-head form's ``fix`` (:class:`idinspect.forms.Form`);
:class:`FixedLayer`, :func:`refuse_unfixable` and :func:`check_representable` are what every
form's export shares (the latent form's :mod:`idinspect.forms.latent.export` uses them too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...errors import IdinspectError
from ...gauge.report import Degeneracy
from ...layer.attention_layer import AttentionLayer
from ...layer.buffers import Float64Buffers, dense_strides, head_blocked_strides
from ...numerics.precision import comparison_precision
from .canonicalize import canonicalize
from .fast_route import apply_precision
from .findings import overflow_limit
from .invariants import InvariantError, largest_invariant_error
from .qk_gain_trade import cast_norm
from .spectra import all_finite


@dataclass
class FixedLayer:
    """One layer's gauge-fixed form cast to the output dtype, and what its check found."""

    cast: AttentionLayer
    error: InvariantError
    degeneracies: list[Degeneracy]


def check_representable(layer: AttentionLayer, role: str, exact: torch.Tensor, cast: torch.Tensor) -> None:
    """Refuse (naming the tensor, the reason and the largest value) a gauge-fixed tensor that its output
    dtype cannot hold: one that overflows it, or one whose largest entry is subnormal there (stored
    with fewer significant bits than the dtype's precision, it no longer computes the same function
    to that dtype's rounding)."""
    name = layer.tensor_names.get(role, role)
    kind = str(cast.dtype).removeprefix("torch.")
    largest = largest_magnitude(exact)
    if not all_finite(cast):
        raise IdinspectError(f"layer {layer.index}: the gauge-fixed {name} is not finite in {kind} (the balanced "
                             f"form's largest value {largest:.3g} overflows it, whose maximum is "
                             f"{torch.finfo(cast.dtype).max:.3g}); export with --dtype float64, or keep the checkpoint as it is")
    if cast.dtype.is_floating_point and 0 < largest < torch.finfo(cast.dtype).tiny:
        raise IdinspectError(f"layer {layer.index}: the gauge-fixed {name} has largest value {largest:.3g}, below "
                             f"{kind}'s smallest normal number {torch.finfo(cast.dtype).tiny:.3g}: stored as subnormals "
                             f"it keeps too few significant bits to compute the same function; export with --dtype "
                             "float64, or rescale the checkpoint")


def largest_magnitude(t: torch.Tensor) -> float:
    """max |t| (0 for an empty tensor, NaN where t holds one) from one min/max pass: no |t| copy (for a
    float64 layer the abs-then-max route took ~7x longer, a fifth of a layer's export)."""
    if not t.numel():
        return 0.0
    lo, hi = (float(v) for v in torch.aminmax(_dense_flat(t)))
    return math.nan if math.isnan(lo) or math.isnan(hi) else max(-lo, hi)


def _dense_flat(t: torch.Tensor) -> torch.Tensor:
    """``t``'s entries as one flat view in memory order where ``t`` is a permuted dense tensor (a reduction
    over a strided view, e.g. a per-head [H, m, k] view of a [H k, m] weight, ran ~7x slower), else ``t``."""
    order = sorted(range(t.dim()), key=lambda i: -t.stride(i))
    dense = t.permute(order)
    return dense.view(-1) if dense.is_contiguous() else t


def refuse_unfixable(layer: AttentionLayer) -> None:
    """Raise naming the tensor if an attention tensor holds NaN/Inf, or float64 values whose products
    overflow (inspect reports both as findings; a gauge of undefined or overflowing numbers is no gauge)."""
    limit = overflow_limit(max(layer.d_model, layer.d_k))
    for role, t in layer.tensors().items():
        name = layer.tensor_names.get(role, role)
        if not all_finite(t):
            raise IdinspectError(f"tensor {name} holds non-finite values (NaN or Inf); export refuses to gauge-fix "
                                 f"it and wrote nothing: run 'idinspect MODEL' to see where, and repair or "
                                 "re-download the checkpoint")
        if t.dtype == torch.float64 and (largest := largest_magnitude(t)) > limit:
            raise IdinspectError(f"tensor {name} holds values up to {largest:.3g}, beyond {limit:.3g} "
                                 "where its products overflow float64; export refuses to gauge-fix it and wrote "
                                 "nothing: repair or re-download the checkpoint")


def fix_per_head_layer(layer: AttentionLayer, target: torch.dtype | None, workspace: Float64Buffers | None = None) -> FixedLayer:
    """Canonicalise ``layer`` in float64, cast each tensor once (to ``target``, or its stored dtype),
    and measure the largest invariant change between the original and the cast result. A
    bfloat16/float16 layer written in bfloat16/float16 has its float64 transforms applied in
    float32 (:func:`~.fast_route.apply_precision`: the products' rounding is ~1e-7 relative, the
    output's own 2^-8 or 2^-11).

    The float64 intermediates go into ``workspace`` (reused layer after layer) when given; the
    result holds none of them.
    """
    refuse_unfixable(layer)
    ws = workspace or Float64Buffers()
    original = layer.replace(**{role: ws.widen(f"input {role}", t, head_blocked_strides(t))   # each head's
                                for role, t in layer.tensors().items()})                    # block contiguous
    stored = [getattr(layer, role).dtype for role in ("W_Q", "W_K", "W_V", "W_O")]   # and written in target
    fixed, report = canonicalize(original, workspace=ws, apply_dtype=apply_precision(*stored, *[target] * bool(target)))
    cast = fixed.replace(**{role: _cast(t, getattr(layer, role), target) for role, t in fixed.tensors().items()})
    if fixed.qk_norm is not None:                           # the balanced norm gains, cast the same way
        cast = cast.replace(qk_norm=cast_norm(fixed.qk_norm, layer.qk_norm, target))
    for role, t in cast.tensors().items():
        check_representable(layer, role, getattr(fixed, role), t)
    if comparison_precision(layer.W_Q.dtype, cast.W_Q.dtype) == torch.float32:   # bf16/fp16 in and out:
        error = largest_invariant_error(layer, cast, grams_a=report.head_grams,   # the same values, half the
                                        precision=torch.float32, workspace=ws)     # bytes to widen
    else:
        for role, t in fixed.tensors().items():             # the cast values in float64, written into
            t.copy_(getattr(cast, role))                    # canonicalize's own buffers (no new ones)
        if fixed.qk_norm is not None:
            fixed = fixed.replace(qk_norm=cast.qk_norm.to(torch.float64))
        error = largest_invariant_error(original, fixed, overwrite_a=True,   # original is ours and done with;
                                        grams_a=report.head_grams)           # its Grams from canonicalize
    return FixedLayer(cast, error, report.degeneracies)


def _cast(t: torch.Tensor, stored: torch.Tensor, target: torch.dtype | None) -> torch.Tensor:
    """``t`` in ``target`` (or ``stored``'s dtype), in a new tensor (never a workspace buffer) laid out in
    ``stored``'s order of dimensions: the adapter writes it back into the checkpoint's layout without a copy."""
    return torch.empty_strided(tuple(t.shape), dense_strides(stored), dtype=target or stored.dtype,
                               device=t.device).copy_(t)
