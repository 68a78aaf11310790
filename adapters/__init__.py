"""Architecture adapters, keyed by ``model_type``: the table every other module looks up.

The table is discovered, never edited by hand: every module of this package that defines
``ADAPTERS`` (a tuple of :class:`Adapter` subclasses) contributes each class under each of its
``model_types``; a module may also define ``REFUSED`` (model_type -> why idinspect does not count
it), which turns an unsupported model type into a refusal that says why. Adding a family is adding
one module (docs/adding-a-family.md).

Packages outside this repository add adapters through the entry-point group ``idinspect.adapters``:
each entry point is named after the ``model_type`` it claims and points at an :class:`Adapter`
subclass (``helium = "my_pkg.helium:HeliumAdapter"``). Entry points are listed when the registry is
built (names only: no plugin code runs) and a plugin's module is imported the first time its model
type is looked up. A name that a built-in adapter or another plugin already claims is refused, naming
both sides.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points

from ..errors import IdinspectError
from ..sources.checkpoint import TensorReader
from .base import Adapter, Site
from .layout import Block, Projection

#: The entry-point group through which other packages provide adapters (name = model_type).
ENTRY_POINT_GROUP = "idinspect.adapters"


class Registry(Mapping[str, type[Adapter]]):
    """model_type -> adapter class, plus the model types refused by name and why, plus the plugins'
    entry points (loaded on first lookup)."""

    def __init__(self) -> None:
        self._adapters: dict[str, type[Adapter]] = {}
        self._plugins: dict[str, EntryPoint] = {}
        #: Adapters inferred and proven at run time (``--auto``), with their evidence.
        self.automatic: dict[str, dict] = {}
        #: What :meth:`resolve` calls for a model type nobody claims, while ``--auto`` is on.
        self.resolver = None
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
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            claimed = self._adapters.get(ep.name) or self._plugins.get(ep.name)
            if claimed is not None:
                raise IdinspectError(f"the idinspect plugin {_plugin_name(ep)} claims model_type {ep.name!r}, which "
                                     f"{_owner(claimed)} already claims; uninstall one of the two")
            self._plugins[ep.name] = ep

    def __getitem__(self, model_type: str) -> type[Adapter]:
        if model_type not in self._adapters and model_type in self._plugins:
            self._adapters[model_type] = _load_plugin(self._plugins[model_type])
        return self._adapters[model_type]

    def __contains__(self, model_type: object) -> bool:
        return model_type in self._adapters or model_type in self._plugins

    def __iter__(self) -> Iterator[str]:
        return iter({**self._adapters, **self._plugins})

    def __len__(self) -> int:
        return len(set(self._adapters) | set(self._plugins))

    def provider(self, model_type: str) -> dict:
        """Who provides ``model_type``'s adapter: ``{"name", "module", "distribution", "version"}`` (this
        package for a built-in adapter, the plugin's distribution for one from an entry point)."""
        cls = self[model_type]
        ep = self._plugins.get(model_type)
        if model_type in self.automatic:
            return {**self.provider_of_idinspect(cls), "automatic": self._evidence(model_type)}
        if ep is None:
            return self.provider_of_idinspect(cls)
        return {"name": cls.family, "module": cls.__module__, "distribution": ep.dist.name if ep.dist else None,
                "version": ep.dist.version if ep.dist else None}

    def add_automatic(self, cls: type[Adapter], evidence: dict) -> None:
        """Register an inferred adapter (:mod:`idinspect.automatic`) for its one model type, with its evidence."""
        (model_type,) = cls.model_types
        if model_type in self._plugins or (model_type in self._adapters and model_type not in self.automatic):
            raise IdinspectError(f"--auto: model_type {model_type!r} already has an adapter; --auto is for the others")
        self._adapters[model_type] = cls
        self.automatic[model_type] = evidence

    def remove_automatic(self, model_type: str) -> None:
        if model_type in self.automatic:
            del self.automatic[model_type]
            del self._adapters[model_type]

    def resolve(self, model_type: str, where, folder) -> None:
        """Return if ``model_type`` has an adapter, or (with ``--auto``: :attr:`resolver` set) once one is
        inferred and proven from ``folder``; else raise the refusal (:meth:`refuse`)."""
        if model_type in self:
            return
        if self.resolver is None:
            self.refuse(model_type, where)
        try:
            self.resolver(model_type, folder)
        except IdinspectError as exc:
            if model_type in self.refused:
                raise IdinspectError(f"{exc} (idinspect refuses {model_type!r} by hand too: {self.refused[model_type]})") from None
            raise

    def refuse(self, model_type: str, where: str) -> None:
        """Raise the one-line error for an unsupported ``model_type`` (with the reason where one is known)."""
        reason = self.refused.get(model_type)
        if reason:
            raise IdinspectError(f"{where}: model_type {model_type!r} is refused: {reason}")
        raise IdinspectError(f"{where}: model_type {model_type!r} is not supported (try --auto: the layout "
                             f"inferred from the transformers module and proven on a twin); "
                             f"supported: {', '.join(supported_model_types())}")

    def _evidence(self, model_type: str) -> dict:
        e = self.automatic[model_type]
        return {k: e[k] for k in ("proven_on_twin", "reference_error", "jacobian_nullity", "structural_unidentified")
                if k in e}

    @staticmethod
    def provider_of_idinspect(adapter: type[Adapter]) -> dict:
        from importlib.metadata import PackageNotFoundError, version
        try:
            own = version("idinspect")
        except PackageNotFoundError:   # a source tree that was never installed
            own = None
        return {"name": adapter.family, "module": adapter.__module__, "distribution": "idinspect", "version": own}


def _plugin_name(ep: EntryPoint) -> str:
    dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "(unknown distribution)"
    return f"{dist} ({ep.name} = {ep.value})"


def _owner(claimed) -> str:
    if isinstance(claimed, EntryPoint):
        return f"the plugin {_plugin_name(claimed)}"
    return f"idinspect's own {claimed.__module__}.{claimed.__name__}"


def _load_plugin(ep: EntryPoint) -> type[Adapter]:
    """The plugin's adapter class, checked: a one-line error naming the plugin if it does not load or
    is not an Adapter claiming this model type."""
    try:
        cls = ep.load()
    except Exception as exc:  # noqa: BLE001 - whatever a third-party import raises, said in one line
        raise IdinspectError(f"the idinspect plugin {_plugin_name(ep)} failed to import ({type(exc).__name__}: "
                             f"{exc}); fix or uninstall it") from None
    if not (isinstance(cls, type) and issubclass(cls, Adapter)) or ep.name not in getattr(cls, "model_types", ()):
        raise IdinspectError(f"the idinspect plugin {_plugin_name(ep)} does not point at an idinspect Adapter subclass "
                             f"whose model_types include {ep.name!r}; fix or uninstall it")
    return cls


ADAPTERS = Registry()


def supported_model_types() -> list[str]:
    return sorted(ADAPTERS)


def family_states(automatic: Mapping[str, dict] | None = None) -> list[dict]:
    """One row per model type transformers ships (its ``CONFIG_MAPPING_NAMES``) or an adapter claims:
    ``{"model_type", "state", "family", "module", "distribution", "reason"}`` with state "supported" (an
    adapter counts it: ``family``, ``module`` and ``distribution`` name it: "idinspect", or a plugin's),
    "automatic" (in ``automatic`` and not refused by hand: ``--auto`` infers and proves its adapter;
    ``evidence`` holds the proof), "refused" (``reason`` says why) or "unknown" (no adapter, no reason). Sorted by model type."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    automatic = automatic or {}
    rows = []
    for model_type in sorted(set(CONFIG_MAPPING_NAMES) | set(ADAPTERS) | set(ADAPTERS.refused)):
        row = {"model_type": model_type, "state": "unknown", "family": None, "module": None, "distribution": None,
               "reason": None}
        if model_type in ADAPTERS and model_type not in ADAPTERS.automatic:
            who = ADAPTERS.provider(model_type)
            row.update(state="supported", family=who["name"], module=who["module"], distribution=who["distribution"])
        elif model_type in ADAPTERS.refused:     # a reason given by hand stands (a hybrid's default config may pass)
            row.update(state="refused", reason=ADAPTERS.refused[model_type])
        elif model_type in automatic:
            row.update(state="automatic", family="automatic", module="idinspect.adapters.inferred",
                       distribution="idinspect", evidence=automatic[model_type])
        rows.append(row)
    return rows


def adapter_for(config, reader: TensorReader) -> Adapter:
    """The adapter for ``config.model_type`` over ``reader``; a clear error for unknown types."""
    model_type = getattr(config, "model_type", None)
    if model_type not in ADAPTERS:
        ADAPTERS.refuse(model_type, "config")
    return ADAPTERS[model_type](config, reader)


__all__ = ["ADAPTERS", "ENTRY_POINT_GROUP", "Adapter", "Block", "Projection", "Site", "adapter_for", "family_states",
           "supported_model_types"]
