"""A checkpoint's config.json as the adapters read it: the stored values, transformers only where needed.

``save_pretrained`` writes every setting of a model's config class, so for almost every checkpoint
config.json alone answers what an adapter asks, and importing the model's transformers config
class (``transformers.utils.type_validators`` pulls in ``torch.distributed.tensor`` and sympy:
about a second on a 2-core machine, more than analysing a 1B model's attention) is not needed.

:class:`CheckpointConfig` answers an attribute from config.json when it stores it, and otherwise
asks transformers' own config class, built once from the same settings (``CONFIG_MAPPING[model_type]
.from_dict``), so a sparse or legacy config.json gets exactly the value (class default, alias,
``__post_init__`` derivation) that transformers would use. Each fallback is logged at debug level
(``--debug`` shows it). :meth:`CheckpointConfig.optional` is for settings the modeling code itself
reads with ``getattr(config, name, default)`` (Qwen2's ``head_dim``): stored value or the default,
never an import.

Whatever needs the real class (``--prove``'s twin model, ``verify``'s model runs) uses
:attr:`idinspect.Model.hf_config`, which is ``AutoConfig.from_pretrained`` of the same folder.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import IdinspectError, one_line
from .file_names import CONFIG_FILE
from .hf_logging import quiet_transformers

log = logging.getLogger("idinspect")


class CheckpointConfig:
    """Attribute access to config.json's settings: stored value, else transformers' config class's
    value, else ``AttributeError`` (so ``getattr(config, name, default)`` behaves as on a transformers
    config)."""

    def __init__(self, settings: Mapping[str, Any], source: str = CONFIG_FILE):
        self._settings = dict(settings)
        self._source = source
        self._full = None

    @property
    def model_type(self) -> str:
        return self._settings["model_type"]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._settings:
            return self._settings[name]
        full = self.full_config()
        if not hasattr(full, name):
            raise AttributeError(f"{self._source} has no setting {name!r}")
        log.debug("%s stores no %r; using transformers' %s value %r", self._source, name, type(full).__name__,
                  getattr(full, name))
        return getattr(full, name)

    def optional(self, name: str, default: Any = None) -> Any:
        """config.json's value of ``name``, else ``default`` (for settings the modeling code reads with
        ``getattr(config, name, default)``); never consults the config class."""
        return self._settings.get(name, default)

    def __contains__(self, name: str) -> bool:
        """True where config.json itself stores ``name``."""
        return name in self._settings

    def stored(self, name: str, default: Any = None) -> Any:
        """config.json's own value of ``name`` (a copy)."""
        return copy.deepcopy(self._settings.get(name, default))

    def to_dict(self) -> dict[str, Any]:
        """config.json as stored."""
        return copy.deepcopy(self._settings)

    def full_config(self):
        """transformers' config class built from these settings (imported and built on first use)."""
        if self._full is None:
            from transformers import CONFIG_MAPPING

            log.debug("%s: building transformers' config class for model_type %r", self._source, self.model_type)
            try:
                with quiet_transformers():
                    self._full = CONFIG_MAPPING[self.model_type].from_dict(copy.deepcopy(self._settings))
            except Exception as exc:  # the class's own validation: any failure is a config problem
                raise IdinspectError(f"{self._source}: transformers cannot read it ({one_line(exc)}); "
                                     "fix or re-download it") from None
        return self._full

    def __repr__(self) -> str:
        return f"CheckpointConfig({self._settings.get('model_type')!r}, {len(self._settings)} settings)"


def setting_optional(config, name: str, default: Any = None) -> Any:
    """``config.optional(name, default)`` for a :class:`CheckpointConfig`, ``getattr`` for a live config."""
    if isinstance(config, CheckpointConfig):
        return config.optional(name, default)
    value = getattr(config, name, default)
    return default if value is None and default is not None else value


def read_config(folder: Path, supported) -> CheckpointConfig:
    """``folder/config.json`` for a ``model_type`` in ``supported`` (the adapter registry, passed in by
    the caller: sources never import adapters; ``supported.resolve(model_type, where, folder)`` returns once an
    adapter exists (``--auto`` may infer one) or raises its one-line error); every failure is a one-line error naming the file."""
    from .regular_file import read_regular

    path = Path(folder) / CONFIG_FILE
    if not path.exists():
        raise IdinspectError(f"{folder}: no config.json; a Hugging Face checkpoint directory needs one "
                             "(save_pretrained writes it)")
    try:
        settings = json.loads(read_regular(path, fix="fix or re-download it").decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise IdinspectError(f"{path}: not valid JSON ({one_line(exc)}); fix or re-download it") from None
    if not isinstance(settings, dict):
        raise IdinspectError(f"{path}: not a JSON object of settings; fix or re-download it")
    model_type = settings.get("model_type")
    if not model_type:
        raise IdinspectError(f"{path}: no model_type; add it (supported: {', '.join(sorted(supported))})")
    if not isinstance(model_type, str):
        raise IdinspectError(f"{path}: model_type is {type(model_type).__name__}, not a string; fix the config")
    if model_type not in supported:
        supported.resolve(model_type, path, Path(folder))
    return CheckpointConfig(settings, str(path))
