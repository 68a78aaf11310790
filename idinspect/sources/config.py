"""A checkpoint's config.json as the adapters read it, without importing its transformers config class.

Importing a model's config class (``transformers.models.llama.configuration_llama``) imports
``transformers.utils.type_validators``, which pulls in ``activations`` -> ``core_model_loading`` ->
``torch.distributed.tensor`` and sympy: about 1.1 s on every run of a 2-core machine, more than
reading and analysing a 1B model's attention (bench/, docs/benchmarks.md). The adapters read a
dozen settings, so :class:`CheckpointConfig` holds config.json's values over the defaults its
config class declares for those settings, with the class's attribute aliases (a :class:`ConfigSpec`
per model type, in each adapter's ``configs``). What a class derives in ``__post_init__``
(``head_dim``, ``num_key_value_heads``, Qwen2's ``layer_types``) the adapters derive as they do for a
live model's config, and RoPE settings are standardised by transformers' own
``RotaryEmbeddingConfigMixin`` (:mod:`idinspect.sources.rope_config`). tests/test_config.py pins the defaults to
the classes and every adapter fact to ``AutoConfig``'s.

Whatever needs the real class (``--prove``'s twin model, ``verify``'s model runs) uses
:attr:`idinspect.Model.hf_config`, which is ``AutoConfig.from_pretrained`` of the same folder.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import IdinspectError, one_line

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class ConfigSpec:
    """What idinspect needs to know of a ``model_type``'s transformers config class, without importing it.

    ``defaults``: the class's field defaults for every setting the adapter (and its callers) read,
    applied where config.json omits the key; ``aliases``: the class's ``attribute_map`` (GPT-2's
    ``hidden_size`` is stored as ``n_embd``). tests/test_config.py pins both to the class itself.
    """

    class_name: str
    defaults: dict[str, Any] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)


class CheckpointConfig:
    """Attribute access to config.json's settings: stored value, else the class default, else
    ``AttributeError`` (so ``getattr(config, name, default)`` behaves as on a transformers config)."""

    def __init__(self, settings: Mapping[str, Any], spec: ConfigSpec):
        self._settings = dict(settings)
        self._spec = spec

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        key = self._spec.aliases.get(name, name)
        if key in self._settings:
            return self._settings[key]
        if key in self._spec.defaults:
            return self._spec.defaults[key]
        raise AttributeError(f"config.json has no setting {name!r}")

    def __contains__(self, name: str) -> bool:
        """True where config.json itself stores ``name`` (defaults do not count)."""
        return self._spec.aliases.get(name, name) in self._settings

    def stored(self, name: str, default: Any = None) -> Any:
        """config.json's own value of ``name`` (a copy), ignoring the class default."""
        return copy.deepcopy(self._settings.get(self._spec.aliases.get(name, name), default))

    def to_dict(self) -> dict[str, Any]:
        """config.json as stored."""
        return copy.deepcopy(self._settings)

    def __repr__(self) -> str:
        return f"CheckpointConfig({self._spec.class_name}, {len(self._settings)} settings)"


def read_config(folder: Path) -> CheckpointConfig:
    """``folder/config.json`` for a supported ``model_type``; every failure is a one-line error naming the file."""
    from ..adapters import ADAPTERS, supported_model_types  # the adapters' table (they import this module)

    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise IdinspectError(f"{folder}: no config.json; a Hugging Face checkpoint directory needs one "
                             "(save_pretrained writes it)")
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IdinspectError(f"{path}: not valid JSON ({one_line(exc)}); fix or re-download it") from None
    if not isinstance(settings, dict):
        raise IdinspectError(f"{path}: not a JSON object of settings; fix or re-download it")
    model_type = settings.get("model_type")
    if not model_type:
        raise IdinspectError(f"{path}: no model_type; add it (supported: {', '.join(supported_model_types())})")
    if model_type not in ADAPTERS:
        raise IdinspectError(f"{path}: model_type {model_type!r} is not supported; "
                             f"supported: {', '.join(supported_model_types())}")
    return CheckpointConfig(settings, ADAPTERS[model_type].configs[model_type])
