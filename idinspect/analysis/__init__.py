"""The analyzer: identification counts, head spectra and weight-level findings (issue 3).

    analyze(model) -> {"totals", "layers", "findings"}      (see docs/json-contract.md)
"""

from ..forms.per_head.counts import bias_free_closed_form, layer_counts, model_totals
from ..forms.per_head.spectra import RANK_RULE, head_spectra, rank_rtol
from ..numerics.device import resolve_device
from .analyzer import analyze, analyze_layer

__all__ = ["RANK_RULE", "analyze", "analyze_layer", "bias_free_closed_form", "head_spectra", "layer_counts",
           "model_totals", "rank_rtol", "resolve_device"]
