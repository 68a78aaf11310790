"""The gauge-fixed form "balanced", version 1, of attention layers (docs/mathematics.md).

    fixed, report = canonicalize(layer)        # float64 AttentionLayer + GaugeReport
    errors = invariant_errors(layer, fixed)    # {"W_QK": InvariantError, ...}, all ~1e-15
    ok, worst, where = is_gauge_fixed(model)   # already in this gauge, up to rounding?

One module per step: biases, qk (unrotated dims), planes (RoPE), vo, signs; linalg holds the
thin-QR / small-SVD kernels, invariants the comparison, check the gauge conditions.
"""

from __future__ import annotations

from .canonicalize import GAUGE_NAME, GAUGE_VERSION, canonicalize
from .check import default_rtol, gauge_residuals, is_gauge_fixed
from .invariants import (
           INVARIANTS,
           InvariantError,
           invariant_errors,
           largest_invariant_error,
)
from .report import NONUNIQUE_RTOL, Degeneracy, GaugeReport

__all__ = ["GAUGE_NAME", "GAUGE_VERSION", "INVARIANTS", "NONUNIQUE_RTOL", "Degeneracy", "GaugeReport",
           "InvariantError", "canonicalize", "default_rtol", "gauge_residuals", "invariant_errors",
           "is_gauge_fixed", "largest_invariant_error"]
