"""The forms by name, and :func:`form_of`: the one place that maps a layer, adapter or model to its form."""

from __future__ import annotations

from typing import Any

from .latent.form import LATENT
from .per_head.form import PER_HEAD
from .protocol import Form

#: Every form by the name its layers and adapters carry.
FORMS: dict[str, Form] = {form.name: form for form in (PER_HEAD, LATENT)}


def form_of(obj: Any) -> Form:
    """The :class:`Form` of a layer, an adapter or an open model (each has a ``form`` name)."""
    name = getattr(obj, "form", None)
    if name not in FORMS:
        raise TypeError(f"{type(obj).__name__} names no attention form (form={name!r}; known: {sorted(FORMS)})")
    return FORMS[name]
