"""The per-head form: AttentionLayer (W_Q, W_K, W_V, W_O per head and group) and its mathematics.

    fixed, report = canonicalize(layer)        # float64 AttentionLayer + GaugeReport
    errors = invariant_errors(layer, fixed)    # {"W_QK": InvariantError, ...}, all ~1e-15

What is here, by the protocol's parts (:class:`idinspect.forms.Form`; :mod:`.form` binds them):

- structure: :mod:`.structure` (gauge dimensions, refusals), :mod:`.reference` (the float64 forward);
- analysis: :mod:`.counts`, :mod:`.spectra`, :mod:`.degeneracy`, :mod:`.heavy_tail`, :mod:`.findings`,
  :mod:`.analysis` (one layer through all of them), :mod:`.prove` (the count on a twin's Jacobian);
- the gauge "balanced", version 1 (docs/mathematics.md), one procedure in :mod:`.canonicalize`:
  biases (:mod:`.biases`, step 1), the q/k norm's steps (:mod:`.qk_centring`, :mod:`.qk_plane_rotation`,
  :mod:`.qk_gain_trade`), the balanced factors by one of two routes to the same form,
  :mod:`.fast_route` (k x k Grams, Cholesky) or :mod:`.reference_route` (thin QR and small SVDs, where a
  Gram is ill-conditioned), both on :mod:`.factors` and :mod:`.balanced`, with planes (step 3, RoPE)
  and signs (step 5) from :mod:`idinspect.gauge`; :mod:`.invariants` (with :mod:`.aligned` and
  :mod:`.step_invariants`) the comparison, :mod:`.residuals` the gauge conditions, :mod:`.export` the
  fixed layer cast for a checkpoint.
"""

from __future__ import annotations

from ...gauge.report import NONUNIQUE_RTOL, Degeneracy, GaugeReport
from .canonicalize import GAUGE_NAME, GAUGE_VERSION, canonicalize
from .invariants import (
           INVARIANTS,
           InvariantError,
           invariant_error_tensors,
           invariant_errors,
           largest_invariant_error,
)
from .residuals import gauge_residuals

__all__ = ["GAUGE_NAME", "GAUGE_VERSION", "INVARIANTS", "NONUNIQUE_RTOL", "Degeneracy", "GaugeReport",
           "InvariantError", "canonicalize", "gauge_residuals", "invariant_error_tensors",
           "invariant_errors", "largest_invariant_error"]
