"""Stream a model's attention layers through counts, spectra and findings.

One layer at a time: read it (checkpoint dtype), refuse what the mathematics does not model,
cast to float64 once on the compute device, then batched linear algebra over heads and groups.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from .. import structure
from ..canonical import AttentionLayer
from .counts import layer_counts, model_parameter_count, model_totals
from .degeneracy import extra_unidentified
from .device import resolve_device
from .findings import layer_findings
from .parallel import layer_workers, ordered_map
from .spectra import head_spectra, layer_finite, spectra_dict

#: ``on_layer(i, n)`` is called after layer ``i`` (0-based) of ``n`` has been analysed.
LayerCallback = Callable[[int, int], None]


def to_compute(layer: AttentionLayer, device: torch.device, buffers: ComputeBuffers | None = None) -> AttentionLayer:
    """The layer with every tensor cast to float64 on ``device`` (moved in its stored dtype, then
    cast there: one copy per tensor on the CPU, half the transfer to a GPU). With ``buffers`` the
    copies go into float64 buffers kept from the previous layer (overwritten: use one layer at a time)."""
    if buffers is not None:
        return buffers.cast(layer, device)
    return dataclasses.replace(layer, **{role: t.to(device).to(torch.float64)
                                         for role, t in layer.tensors().items()})


class ComputeBuffers:
    """Float64 buffers reused from layer to layer, one per role, shape and stride.

    A fresh float64 tensor per role and layer is a new 30 MB allocation whose pages fault in on
    first write (Llama-1B: 7 ms to cast a 2048 x 2048 weight, 0.7 ms into a warm buffer). The
    buffer keeps the tensor's strides when they cover its memory densely (the adapters' views are
    transposes of stored weights), so the copy runs in memory order.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}

    def cast(self, layer: AttentionLayer, device: torch.device) -> AttentionLayer:
        out = {}
        for role, t in layer.tensors().items():
            stride = tuple(t.stride()) if _dense(t) else None
            key = (role, tuple(t.shape), stride, str(device))
            buf = self._buffers.get(key)
            if buf is None:
                buf = (torch.empty_strided(t.shape, stride, dtype=torch.float64, device=device) if stride is not None
                       else torch.empty(t.shape, dtype=torch.float64, device=device))
                self._buffers[key] = buf
            buf.copy_(t if t.device == buf.device else t.to(device))
            out[role] = buf
        return dataclasses.replace(layer, **out)


def _dense(t: torch.Tensor) -> bool:
    """True if ``t``'s strides address exactly numel() elements (a permuted contiguous tensor)."""
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    return t.numel() > 0 and all(s >= 0 for s in t.stride()) and extent == t.numel()


def analyze_layer(layer: AttentionLayer, *, device: str | torch.device | None = "cpu",
                  spectra: bool = True, buffers: ComputeBuffers | None = None) -> tuple[dict, list[dict]]:
    """(layer object of the JSON contract, findings) for one canonical layer.

    Raises UnsupportedLayerError for flags or RoPE frequencies the counts do not model.
    ``buffers`` (shared over the layers of one model) saves re-allocating the float64 copies.
    """
    structure.require_modelled(layer)
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    L = to_compute(layer, dev, buffers)
    counts = layer_counts(L)
    s = head_spectra(L) if spectra else None
    finite = s.finite if s is not None else layer_finite(L)
    extra = extra_unidentified(L, s) if s is not None else None
    found = layer_findings(L, s, extra, finite)
    counts["extra_unidentified"] = None if extra is None else extra["total"]
    counts["unidentified_with_weights"] = None if extra is None else counts["unidentified_parameters"] + extra["total"]
    counts["dead_heads"] = None if extra is None else extra["dead_heads"]
    if s is not None:
        counts["spectra"] = spectra_dict(s)
    return counts, found


def analyze(model, *, device: str | torch.device | None = "cpu", spectra: bool = True,
            on_layer: LayerCallback | None = None, workers: int | None = None) -> dict:
    """``{"totals", "layers", "findings"}`` of an open :class:`idinspect.Model` (or anything ``load`` takes).

    ``workers``: layers analysed at once (default :func:`parallel.layer_workers`: one per CPU core
    within a memory budget, 1 on a GPU); results and ``on_layer`` calls come in layer order.
    """
    from ..model import Model, load

    if not isinstance(model, Model):
        with load(model) as opened:
            return analyze(opened, device=device, spectra=spectra, on_layer=on_layer, workers=workers)
    dev = resolve_device(device)
    layers: list[dict] = []
    findings: list[dict] = []
    n = model.num_layers
    k = layer_workers(_float64_bytes(model), n, dev) if workers is None else max(1, int(workers))

    def one(i: int, buffers: ComputeBuffers) -> tuple[dict, list[dict]]:
        return analyze_layer(model.layer(i), device=dev, spectra=spectra, buffers=buffers)

    for i, (counts, found) in enumerate(ordered_map(one, n, k, ComputeBuffers)):
        layers.append(counts)
        findings.extend(found)
        if on_layer is not None:
            on_layer(i, n)
    totals = model_totals(layers, model_parameter_count(model))
    extras = [layer["extra_unidentified"] for layer in layers]
    known = bool(extras) and all(e is not None for e in extras)
    totals["extra_unidentified"] = sum(extras) if known else None
    totals["unidentified_with_weights"] = totals["unidentified_parameters"] + sum(extras) if known else None
    return {"totals": totals, "layers": layers, "findings": findings}


def _float64_bytes(model) -> int:
    """Bytes of one layer's attention tensors in float64 (layer 0's shapes, from the headers)."""
    return sum(8 * math.prod(model.reader.shape(key)) for key in model.adapter.attention_keys(0))
