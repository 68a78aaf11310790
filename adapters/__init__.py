"""Architecture adapters, keyed by ``model_type``: the table every other module looks up.

The table is discovered, never edited by hand: every module of this package that defines
``ADAPTERS`` (a tuple of :class:`Adapter` subclasses) contributes each class under each of its
``model_types``; a module may also define ``REFUSED`` (model_type -> why idinspect does not count
it), which turns an unsupported model type into a refusal that says why. Adding a family is adding
one module (docs/adding-a-family.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping

from ..errors import IdinspectError
from ..sources.checkpoint import TensorReader
from .base import Adapter, Site
from .layout import Block, Projection


class Registry(Mapping[str, type[Adapter]]):
    """model_type -> adapter class, plus the model types refused by name and why."""

    def __init__(self) -> None:
        self._adapters: dict[str, type[Adapter]] = {}
        self.refused: dict[str, str] = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if info.name in ("base", "layout", "example_inputs"):
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            for cls in getattr(module, "ADAPTERS", ()):
                for model_type in cls.model_types:
                    if model_type in self._adapters:
                        raise RuntimeError(f"model_type {model_type!r} claimed by {self._adapters[model_type].__name__} "
                                           f"and {cls.__name__}")
                    self._adapters[model_type] = cls
            self.refused.update(getattr(module, "REFUSED", {}))

    def __getitem__(self, model_type: str) -> type[Adapter]:
        return self._adapters[model_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._adapters)

    def __len__(self) -> int:
        return len(self._adapters)

    def refuse(self, model_type: str, where: str) -> None:
        """Raise the one-line error for an unsupported ``model_type`` (with the reason where one is known)."""
        reason = self.refused.get(model_type)
        if reason:
            raise IdinspectError(f"{where}: model_type {model_type!r} is refused: {reason}")
        raise IdinspectError(f"{where}: model_type {model_type!r} is not supported; "
                             f"supported: {', '.join(supported_model_types())}")


ADAPTERS = Registry()


def supported_model_types() -> list[str]:
    return sorted(ADAPTERS)


def family_states() -> list[dict]:
    """One row per model type transformers ships (its ``CONFIG_MAPPING_NAMES``) or an adapter claims:
    ``{"model_type", "state", "family", "module", "reason"}`` with state "supported" (an adapter counts
    it: ``family`` and ``module`` name it), "refused" (``reason`` says why) or "unknown" (no adapter,
    no reason). Sorted by model type."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    rows = []
    for model_type in sorted(set(CONFIG_MAPPING_NAMES) | set(ADAPTERS) | set(ADAPTERS.refused)):
        cls = ADAPTERS.get(model_type)
        if cls is not None:
            rows.append({"model_type": model_type, "state": "supported", "family": cls.family,
                         "module": cls.__module__, "reason": None})
        elif model_type in ADAPTERS.refused:
            rows.append({"model_type": model_type, "state": "refused", "family": None, "module": None,
                         "reason": ADAPTERS.refused[model_type]})
        else:
            rows.append({"model_type": model_type, "state": "unknown", "family": None, "module": None, "reason": None})
    return rows


def adapter_for(config, reader: TensorReader) -> Adapter:
    """The adapter for ``config.model_type`` over ``reader``; a clear error for unknown types."""
    model_type = getattr(config, "model_type", None)
    if model_type not in ADAPTERS:
        ADAPTERS.refuse(model_type, "config")
    return ADAPTERS[model_type](config, reader)


__all__ = ["ADAPTERS", "Adapter", "Block", "Projection", "Site", "adapter_for", "family_states",
           "supported_model_types"]
