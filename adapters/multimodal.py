"""The text model of a multimodal checkpoint (Llama 4, Qwen-VL, Mllama): read from config.json's
``text_config`` below the checkpoint's own prefix, with the vision tower's attention modules listed as
not analysed (never counted silently). A family puts :class:`TextOfMultimodal` before its text
adapter: ``class Llama4Adapter(TextOfMultimodal, Llama4TextAdapter)``.
"""

from __future__ import annotations

import math
import re
from typing import ClassVar

from ..errors import IdinspectError
from ..sources.config import CheckpointConfig


def text_config(config, model_type: str):
    """The ``text_config`` of a multimodal config as the text adapter reads a config: a
    :class:`CheckpointConfig` over config.json's stored ``text_config`` as ``model_type`` (the text config
    class answers what it lacks), or the live config's sub-config."""
    if isinstance(config, CheckpointConfig):
        return CheckpointConfig({"model_type": model_type, **(config.stored("text_config") or {})},
                                "config.json text_config")
    return config.text_config


def sub_config(config, key: str):
    """Sub-config ``key`` of a multi-tower ``config`` (``text_config``, ``vision_config``) as an adapter
    reads a config: a :class:`CheckpointConfig` over config.json's stored ``key`` (transformers'
    sub-config class answers what it lacks), or the live config's sub-config."""
    if not isinstance(config, CheckpointConfig):
        return getattr(config, key)
    full = getattr(config.full_config(), key)
    stored = config.stored(key)
    settings = stored if isinstance(stored, dict) else full.to_dict()
    return CheckpointConfig({"model_type": full.model_type, **settings}, f"config.json {key}")


class TextOfMultimodal:
    """Mixin: ``text_model_type`` (the model_type of ``text_config``), ``vision_tower`` (its module name),
    ``vision_modules`` (a pattern matching a tower tensor: group 1 up to the tower, group 2 an attention
    module of one of its layers, or None) and ``vision_reason`` (why that attention is not analysed)."""

    text_model_type: ClassVar[str]
    vision_tower: ClassVar[str]
    vision_modules: ClassVar[re.Pattern]
    vision_reason: ClassVar[str]

    def __init__(self, config, reader):
        self.outer = config
        super().__init__(text_config(config, self.text_model_type), reader)

    @property
    def architecture(self) -> str:
        archs = getattr(self.outer, "architectures", None) or []
        return str(archs[0]) if archs else f"{self.family} ({self.outer.model_type})"

    def _find_prefix(self, keys: list[str]) -> str:
        """The text model's prefix: the tower's layers may have the same names below theirs."""
        try:
            return super()._find_prefix([k for k in keys if not self.vision_modules.match(k)])
        except IdinspectError:
            first = self.sites[0]
            probe = f"{first.path}.{first.block.projections[0].weight_name}"
            raise IdinspectError(f"no text-model tensor named '*{probe}' (outside {self.vision_tower}) in the "
                                 f"checkpoint; config.json says model_type '{self.outer.model_type}': check that the "
                                 "weights belong to this config") from None

    def unanalysed(self) -> list[dict]:
        """The tower's attention modules, each with its tensors and parameter count."""
        modules: dict[str, list[str]] = {}
        for key in self.reader.keys():
            m = self.vision_modules.match(key)
            if m and m.group(2):
                modules.setdefault(m.group(1) + m.group(2), []).append(key)
        return [{"module": module, "tensors": sorted(names), "reason": self.vision_reason,
                 "parameters": sum(math.prod(self.reader.shape(k)) for k in names)}
                for module, names in sorted(modules.items(), key=lambda kv: _natural(kv[0]))]


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


__all__ = ["TextOfMultimodal", "sub_config", "text_config"]
