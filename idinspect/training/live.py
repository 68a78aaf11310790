"""Live ``transformers`` models: canonical layers read through the adapters, and written back in place.

``idinspect.load(model)`` reads a ``PreTrainedModel``'s state dict in place (the tensors share the
parameters' storage), so one opened :class:`~idinspect.model.Model` follows training as
the optimizer updates the parameters; it is cached per module and reopened when a parameter's
storage changes (``model.to(...)``).
"""

from __future__ import annotations

import weakref

import torch

from ..forms import require
from ..layer.attention_layer import AttentionLayer
from ..model import Model, load

_OPENED: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple, Model]]" = weakref.WeakKeyDictionary()


def _storage_key(model: torch.nn.Module) -> tuple:
    return tuple((name, p.data_ptr(), p.dtype, p.device.type) for name, p in model.named_parameters())


def opened(model: torch.nn.Module) -> Model:
    """The idinspect view of a live model (cached while its parameters keep their storage)."""
    key = _storage_key(model)
    hit = _OPENED.get(model)
    if hit is not None and hit[0] == key:
        return hit[1]
    view = require(load(model), "the training callback")
    _OPENED[model] = (key, view)
    return view


def snapshot(model: torch.nn.Module) -> list[AttentionLayer]:
    """Every attention layer in canonical form, copied to float64 (a fixed point to diff against)."""
    view = opened(model)
    out = []
    for i in range(view.num_layers):
        layer = view.layer(i)
        out.append(layer.replace(**{r: t.detach().to(torch.float64, copy=True) for r, t in layer.tensors().items()}))
    return out


def write_layer(model: torch.nn.Module, layer: AttentionLayer) -> list[torch.nn.Parameter]:
    """Copy a canonical layer into the live parameters it came from (cast to their dtype, in place).

    Returns the parameters written (fused tensors, e.g. GPT-2's ``c_attn``, count once).
    """
    view = opened(model)
    params = model.state_dict(keep_vars=True)
    written = []
    with torch.no_grad():
        for name, tensor in view.adapter.write_layer(layer).items():
            p = params[name]
            p.copy_(tensor.to(device=p.device, dtype=p.dtype))
            written.append(p)
    return written
