"""Architecture adapters, keyed by ``model_type`` (the table every other module looks up)."""

from __future__ import annotations

from ..sources.checkpoint import TensorReader
from ..errors import IdinspectError
from .base import Adapter
from .bert import BertAdapter
from .gpt2 import GPT2Adapter
from .llama import LlamaAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    model_type: cls for cls in (BertAdapter, GPT2Adapter, LlamaAdapter) for model_type in cls.configs
}


def supported_model_types() -> list[str]:
    return sorted(ADAPTERS)


def adapter_for(config, reader: TensorReader) -> Adapter:
    """The adapter for ``config.model_type`` over ``reader``; a clear error for unknown types."""
    model_type = getattr(config, "model_type", None)
    cls = ADAPTERS.get(model_type)
    if cls is None:
        raise IdinspectError(f"model_type '{model_type}' is not supported; supported: {', '.join(supported_model_types())}")
    return cls(config, reader)


__all__ = ["ADAPTERS", "Adapter", "adapter_for", "supported_model_types"]
