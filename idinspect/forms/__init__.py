"""The attention forms and the one protocol the stages call (:class:`Form`).

    form_of(layer).analyze(layer)          # counts and findings of one layer, whatever its form
    fixed, report = canonicalize(layer)    # the gauge-fixed form (float64) and where it is not unique
    reference_attention(layer, x)          # the float64 forward
    ok, worst, where = is_gauge_fixed(model)

Each form is one folder: :mod:`.per_head` (:class:`~idinspect.layer.attention_layer.AttentionLayer`)
and :mod:`.latent` (multi-head latent attention,
:class:`~idinspect.layer.latent_layer.LatentAttentionLayer`), each with its structure, reference,
gauge, analysis, proof and export, bound in its ``form.py``. docs/mathematics.md ("Adding a third
form") says how a third one is added.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import IdinspectError
from .check import DEFAULT_RTOL, GaugeCheck, default_rtol, is_gauge_fixed
from .per_head.export import FixedLayer
from .protocol import NEEDS, Form
from .registry import FORMS, form_of


def reference_attention(layer: Any, x: torch.Tensor, positions: torch.Tensor | None = None,
                        causal: bool | None = None, x_kv: torch.Tensor | None = None) -> torch.Tensor:
    """Attention output [B, T, d] of ``layer`` for hidden states ``x`` [B, T, d], in float64, by its
    form (:meth:`Form.reference`; per-head: :func:`idinspect.forms.per_head.reference.reference_attention`)."""
    return form_of(layer).reference(layer, x, positions, causal, x_kv)


def canonicalize(layer: Any, **options: Any) -> tuple[Any, Any]:
    """(the gauge-fixed form of ``layer`` in float64, its form's report of where it is not unique);
    ``options`` are the form's own (per-head: ``rtol``, ``workspace``)."""
    return form_of(layer).canonicalize(layer, **options)


def gauge_residuals(layer: Any) -> list[tuple[float, str]]:
    """(relative residual, where) of every condition of ``layer``'s gauge-fixed form."""
    return form_of(layer).gauge_residuals(layer)


def require(model: Any, what: str, need: str = "per-head invariants") -> Any:
    """Raise a one-line error where ``model``'s form does not provide ``need``, which ``what`` (a
    command or step) is built on; returns ``model``."""
    form = form_of(model)
    if form.refusal(need):
        raise IdinspectError(f"{model.provenance.source}: {what} does not handle {form.title} "
                             f"(model_type {model.config.model_type!r}) yet; `idinspect MODEL` inspects it "
                             "(see README, Supported families)")
    return model


__all__ = ["DEFAULT_RTOL", "FORMS", "NEEDS", "FixedLayer", "Form", "GaugeCheck", "canonicalize", "default_rtol",
           "form_of", "gauge_residuals", "is_gauge_fixed", "reference_attention", "require"]
