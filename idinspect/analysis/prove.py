"""``--prove``: the structural count checked numerically on a shrunken twin of the model's attention,
by the model's form (:meth:`idinspect.forms.Form.prove`: :mod:`idinspect.forms.per_head.prove`,
:mod:`idinspect.forms.latent.prove`)."""

from __future__ import annotations

from ..forms import form_of


def prove(model, seed: int = 0) -> dict:
    """The ``proof`` object: the twin, its Jacobian nullity and its structural count."""
    return form_of(model).prove(model, seed)
