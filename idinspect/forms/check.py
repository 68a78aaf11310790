"""Is a checkpoint already in its gauge-fixed form? Each layer's form states the conditions
(:meth:`idinspect.forms.Form.gauge_residuals`: relative residuals, stable under rounding); here they
are judged against a tolerance per stored dtype."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch

from .registry import form_of

#: Default residual tolerance per stored dtype: about 16 units of rounding (unit roundoff u = eps / 2),
#: and never below 1e-10 (float64 arithmetic in the check itself).
DEFAULT_RTOL = {torch.float64: 1e-10, torch.float32: 16 * 2.0 ** -24, torch.float16: 16 * 2.0 ** -11,
                torch.bfloat16: 16 * 2.0 ** -8}


def default_rtol(dtype: torch.dtype) -> float:
    return DEFAULT_RTOL.get(dtype, DEFAULT_RTOL[torch.float32])


class GaugeCheck(NamedTuple):
    """(fixed, worst residual, where); its truth value is ``fixed`` (``if is_gauge_fixed(m):`` works)."""

    fixed: bool
    worst: float
    where: str

    def __bool__(self) -> bool:
        return bool(self.fixed)


def is_gauge_fixed(model_or_layer, rtol: float | None = None) -> GaugeCheck:
    """(fixed, worst residual, where) for a layer, an iterable of layers or an open Model
    (``idinspect.load(source)``; the caller closes it); true exactly when fixed.

    ``fixed`` is True when every residual of :func:`gauge_residuals` is at most ``rtol``
    (default: :data:`DEFAULT_RTOL` for each layer's stored dtype). ``where`` names the worst
    condition, e.g. ``"layer 3 group 1 QK balance"``.
    """
    worst, where, fixed = 0.0, "", True
    for layer in _layers(model_or_layer):
        tol = default_rtol(layer.dtype) if rtol is None else rtol
        for value, place in form_of(layer).gauge_residuals(layer):
            if value > tol:
                fixed = False
            if value > worst or not where:
                worst, where = value, place
    return GaugeCheck(fixed, worst, where)


def _layers(obj) -> Iterable:
    if hasattr(obj, "form") and hasattr(obj, "tensors"):   # one layer, of any form
        return [obj]
    if hasattr(obj, "layers") and callable(obj.layers):   # an open Model: read lazily, one at a time
        return obj.layers()
    if isinstance(obj, (str, bytes)) or not isinstance(obj, Iterable):
        raise TypeError(f"is_gauge_fixed() takes a layer, layers or an open Model, not {type(obj).__name__}: "
                        "use idinspect.load(source) first")
    return obj
