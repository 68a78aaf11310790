"""An adapter made from two found layouts, one per stack (``idinspect --auto`` on an encoder-decoder):
each stack's blocks are read by its own :class:`~adapters.inferred.InferredAdapter` (its layer list,
projections, positions, causality, cross-attention), numbered encoder first, as the hand-written
encoder-decoder adapters number them. Nothing here traces or proves anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cached_property
from typing import ClassVar

import torch

from ..layer.attention_layer import Positional, QKNorm, QueryTemperature
from .base import Site
from .inferred import FoundLayout, InferredAdapter, inferred_adapter
from .layout import Block


class InferredStacksAdapter(InferredAdapter):
    """Base of the classes :func:`inferred_stacks_adapter` makes: a block's facts are its stack's."""

    #: One inferred adapter class per stack, in block order.
    parts: ClassVar[tuple[type[InferredAdapter], ...]] = ()

    @cached_property
    def _views(self) -> dict[str, InferredAdapter]:
        out = {}
        for cls in self.parts:
            for attr in ("exact_classes", "encoder_states", "twin_model_class", "trust_remote_code", "twin_tokens",
                         "stored_names"):
                setattr(cls, attr, getattr(type(self), attr))
            out[cls.found.stack] = cls(self.config, self.reader)
        return out

    def _view(self, site: Site) -> InferredAdapter:
        return self._views[site.stack]

    @property
    def num_layers(self) -> int:
        return sum(v.num_layers for v in self._views.values())

    @cached_property
    def sites(self) -> list[Site]:
        """Every stack's blocks, in the parts' order (encoder first)."""
        return [s for v in self._views.values() for s in v.sites]

    def scale(self, site: Site) -> float:
        return self._view(site).scale(site)

    def causal(self, site: Site) -> bool:
        return self._view(site).causal(site)

    def positional(self, site: Site | None = None) -> Positional:
        return (self._view(site) if site is not None else next(iter(self._views.values()))).positional(site)

    def sliding_window(self, site: Site) -> int | None:
        return self._view(site).sliding_window(site)

    def logit_softcap(self, site: Site) -> float | None:
        return self._view(site).logit_softcap(site)

    def attention_chunk(self, site: Site) -> int | None:
        return self._view(site).attention_chunk(site)

    def query_temperature(self, site: Site) -> QueryTemperature | None:
        return self._view(site).query_temperature(site)

    def qk_norm(self, site: Site) -> QKNorm | None:
        return self._view(site).qk_norm(site)

    def qk_norm_stored(self, site: Site, norm: QKNorm) -> dict[str, torch.Tensor]:
        return self._view(site).qk_norm_stored(site, norm)

    def _sinks_key(self, site: Site) -> str | None:
        return self._view(site)._sinks_key(site)

    def positional_keys(self) -> list[str]:
        return [k for v in self._views.values() for k in v.positional_keys()]

    def exact_float64(self) -> contextlib.AbstractContextManager:
        return _nothing() if not self.exact_classes else super().exact_float64()


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def inferred_stacks_adapter(parts: list[FoundLayout]) -> type[InferredStacksAdapter]:
    """An :class:`Adapter` subclass for an encoder-decoder whose stacks' layouts are ``parts`` (block order)."""
    classes = tuple(inferred_adapter(f) for f in parts)
    first = parts[0]
    modules: dict = {}
    for cls in classes:
        modules.update(cls.hf_modules)
    attrs = {
        "found": first,
        "parts": classes,
        "model_types": (first.model_type,),
        "layer_container": first.layer_container,
        "block": Block("self", first.projections),
        "hf_modules": modules,
        "model_tensors": {k: v for f in parts for k, v in f.model_tensors.items()},
        "__module__": __name__,
    }
    name = "Automatic_" + "".join(c if c.isalnum() else "_" for c in first.model_type) + "_StacksAdapter"
    return type(name, (InferredStacksAdapter,), attrs)


__all__ = ["InferredStacksAdapter", "inferred_stacks_adapter"]
