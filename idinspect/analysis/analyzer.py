"""Stream a model's attention layers through counts, spectra and findings.

One layer at a time: read it (checkpoint dtype), refuse what the mathematics does not model,
cast to float64 once on the compute device, then batched linear algebra over heads and groups.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .. import structure
from ..canonical import AttentionLayer
from .counts import layer_counts, model_parameter_count, model_totals
from .degeneracy import extra_unidentified
from .device import resolve_device
from .findings import layer_findings
from .spectra import head_spectra, layer_finite, spectra_dict

#: ``on_layer(i, n)`` is called after layer ``i`` (0-based) of ``n`` has been analysed.
LayerCallback = Callable[[int, int], None]


def to_compute(layer: AttentionLayer, device: torch.device) -> AttentionLayer:
    """The layer with every tensor cast to float64 on ``device`` (moved in its stored dtype, then
    cast there: one copy per tensor on the CPU, half the transfer to a GPU)."""
    return dataclasses.replace(layer, **{role: t.to(device).to(torch.float64)
                                         for role, t in layer.tensors().items()})


def analyze_layer(layer: AttentionLayer, *, device: str | torch.device | None = "cpu",
                  spectra: bool = True) -> tuple[dict, list[dict]]:
    """(layer object of the JSON contract, findings) for one canonical layer.

    Raises UnsupportedLayerError for flags or RoPE frequencies the counts do not model.
    """
    structure.require_modelled(layer)
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    L = to_compute(layer, dev)
    counts = layer_counts(L)
    finite = layer_finite(L)
    s = head_spectra(L, finite) if spectra else None
    extra = extra_unidentified(L, s) if s is not None else None
    found = layer_findings(L, s, extra, finite)
    counts["extra_unidentified"] = None if extra is None else extra["total"]
    counts["unidentified_with_weights"] = None if extra is None else counts["unidentified_parameters"] + extra["total"]
    counts["dead_heads"] = None if extra is None else extra["dead_heads"]
    if s is not None:
        counts["spectra"] = spectra_dict(s)
    return counts, found


def analyze(model, *, device: str | torch.device | None = "cpu", spectra: bool = True,
            on_layer: LayerCallback | None = None) -> dict:
    """``{"totals", "layers", "findings"}`` of an open :class:`idinspect.Model` (or anything ``load`` takes)."""
    from ..model import Model, load

    if not isinstance(model, Model):
        with load(model) as opened:
            return analyze(opened, device=device, spectra=spectra, on_layer=on_layer)
    dev = resolve_device(device)
    layers: list[dict] = []
    findings: list[dict] = []
    n = model.num_layers
    for i in range(n):
        counts, found = analyze_layer(model.layer(i), device=dev, spectra=spectra)
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
