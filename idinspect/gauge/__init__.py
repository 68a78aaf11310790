"""The gauge-fixed form "balanced", version 1, of attention layers (docs/mathematics.md).

    fixed, report = canonicalize(layer)        # float64 AttentionLayer + GaugeReport
    errors = invariant_errors(layer, fixed)    # {"W_QK": InvariantError, ...}, all ~1e-15
    ok, worst, where = is_gauge_fixed(model)   # already in this gauge, up to rounding?

Two routes to the same form, side by side: :mod:`.fast_route` (k x k Gram matrices, Cholesky,
one matmul per factor) and :mod:`.reference_route` (the recipe of docs/mathematics.md step by
step: thin QR and small SVDs of the stacked factors), which takes over where a Gram matrix is
ill-conditioned. Steps: biases (1), planes (3, RoPE), signs (5), the q/k-norm gain trade
(qk_gain_trade); linalg holds both routes' kernels, invariants the comparison (also fast and
reference), check the gauge conditions.
"""

from __future__ import annotations

from .canonicalize import GAUGE_NAME, GAUGE_VERSION, canonicalize
from .check import default_rtol, gauge_residuals, is_gauge_fixed
from .invariants import (
           INVARIANTS,
           InvariantError,
           invariant_error_tensors,
           invariant_errors,
           largest_invariant_error,
)
from .report import NONUNIQUE_RTOL, Degeneracy, GaugeReport

__all__ = ["GAUGE_NAME", "GAUGE_VERSION", "INVARIANTS", "NONUNIQUE_RTOL", "Degeneracy", "GaugeReport",
           "InvariantError", "canonicalize", "default_rtol", "gauge_residuals", "invariant_error_tensors",
           "invariant_errors", "is_gauge_fixed", "largest_invariant_error"]
