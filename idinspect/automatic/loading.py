"""``idinspect.load``: :func:`idinspect.model.load`, with ``auto`` (infer and prove an adapter for a
model type no adapter claims, :mod:`idinspect.automatic`) and ``trust_remote_code``."""

from __future__ import annotations

from ..adapters import ADAPTERS
from ..errors import IdinspectError
from ..model import Model
from ..model import load as load_model


def load(source, *, auto: bool = False, trust_remote_code: bool = False, **kwargs) -> Model:
    """Open ``source`` as :func:`idinspect.model.load` does (a directory, ``org/name[@revision]`` on the
    hub, a GGUF file, ``pkg:...``, or a ``PreTrainedModel``; keyword arguments as there).

    ``auto``: a model type no adapter claims gets one inferred from its transformers module and proven
    on a twin first (:mod:`idinspect.automatic`; a live model's own class is traced, so a config class
    registered with ``AutoConfig.register`` works); ``trust_remote_code`` lets that run a repository's
    own configuration and modelling code (``auto_map``), as transformers would, and never otherwise.
    """
    if trust_remote_code and not auto:
        raise IdinspectError("--trust-remote-code applies with --auto only (idinspect runs no model code otherwise)")
    if not auto:
        return load_model(source, **kwargs)
    from . import infer_for_module, resolver

    previous, ADAPTERS.resolver = ADAPTERS.resolver, resolver(trust_remote_code)
    try:
        config = getattr(source, "config", None)
        model_type = getattr(config, "model_type", None)
        if hasattr(source, "state_dict") and model_type is not None and model_type not in ADAPTERS:
            infer_for_module(source)
        return load_model(source, **kwargs)
    finally:
        ADAPTERS.resolver = previous


__all__ = ["load"]
