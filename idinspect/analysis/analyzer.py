"""Stream a model's attention layers through counts, spectra and findings.

One layer at a time: read it (checkpoint dtype), refuse what the mathematics does not model,
move it to the compute device, then batched float64 linear algebra over heads and groups (weights
are cast to float64 a few heads at a time inside the Gram step, biases at once).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..forms import form_of
from ..forms.per_head.counts import model_totals
from ..forms.per_head.spectra import CAST_CHUNK_BYTES
from ..layer.buffers import Float64Buffers
from ..numerics.device import resolve_device
from ..numerics.parallel import IN_FLIGHT_BYTES, layer_workers, ordered_map

#: ``on_layer(i, n)`` is called after layer ``i`` (0-based) of ``n`` has been analysed.
LayerCallback = Callable[[int, int], None]


def analyze_layer(layer, *, device: str | torch.device | None = "cpu", spectra: bool = True,
                  scratch: Float64Buffers | None = None, heavy_tails: bool = False) -> tuple[dict, list[dict]]:
    """(layer object of the JSON contract, findings) for one canonical layer, by its form
    (:func:`idinspect.forms.form_of`: the per-head form's counts, spectra and findings, or multi-head
    latent attention's structural counts).

    ``heavy_tails``: add ``spectra.heavy_tail`` (its per-layer sums cost several times the rest of the
    analysis, so it is asked for). ``scratch`` (one per thread, shared over its layers) saves
    re-allocating the float64 chunks. Raises UnsupportedLayerError for what the counts do not model.
    """
    return form_of(layer).analyze(layer, device=device, spectra=spectra, scratch=scratch, heavy_tails=heavy_tails)


def analyze(model, *, device: str | torch.device | None = "cpu", spectra: bool = True,
            on_layer: LayerCallback | None = None, workers: int | None = None, heavy_tails: bool = False) -> dict:
    """``{"totals", "layers", "findings"}`` of an open :class:`idinspect.Model`.

    The caller opens (and closes) the model: ``with idinspect.load(source) as model``, or
    :func:`idinspect.inspect`, which does both. ``workers``: layers analysed at once (default
    :func:`parallel.layer_workers`: one per CPU core within a memory budget, 1 on a GPU); results
    and ``on_layer`` calls come in layer order.
    """
    if not all(hasattr(model, a) for a in ("num_layers", "layer", "parameter_count")):
        raise TypeError(f"analyze() takes an open Model, not {type(model).__name__}: use idinspect.load(source) "
                        "first, or idinspect.inspect(source), which opens and closes it")
    dev = resolve_device(device)
    layers: list[dict] = []
    findings: list[dict] = []
    n = model.num_layers
    layer_bytes = layer_bytes_in_flight(model)
    k = layer_workers(layer_bytes, n, dev) if workers is None else max(1, int(workers))
    read_ahead = getattr(model, "read_ahead", None)
    if callable(read_ahead):
        read_ahead(IN_FLIGHT_BYTES - k * layer_bytes)      # the budget left by the layers in flight

    def one(i: int, scratch: Float64Buffers) -> tuple[dict, list[dict]]:
        return analyze_layer(model.layer(i), device=dev, spectra=spectra, scratch=scratch, heavy_tails=heavy_tails)

    for i, (counts, found) in enumerate(ordered_map(one, n, k, Float64Buffers)):
        layers.append(counts)
        findings.extend(found)
        if on_layer is not None:
            on_layer(i, n)
    totals = model_totals(layers, model.parameter_count())
    extras = [layer["extra_unidentified"] for layer in layers]
    known = bool(extras) and all(e is not None for e in extras)
    totals["extra_unidentified"] = sum(extras) if known else None
    totals["unidentified_with_weights"] = totals["unidentified_parameters"] + sum(extras) if known else None
    stacks = list(dict.fromkeys(layer["stack"] for layer in layers if layer.get("stack")))
    if stacks:
        totals["stacks"] = {name: stack_totals([x for x in layers if x.get("stack") == name]) for name in stacks}
    return {"totals": totals, "layers": layers, "findings": findings}


def stack_totals(layers: list[dict]) -> dict:
    """The totals of one stack's blocks (a tower of CLIP, the encoder of T5): parameters, unidentified,
    U/P and the gauge and bias parts."""
    keys = ("attention_parameters", "unidentified_parameters", "qk_gauge", "vo_gauge", "noop_bias", "absorbable_bias")
    out = {k: sum(layer[k] for layer in layers) for k in keys}
    P = out["attention_parameters"]
    out["identification_ratio"] = out["unidentified_parameters"] / P if P else 0.0
    out["blocks"] = len(layers)
    return out


def layer_bytes_in_flight(model) -> int:
    """Bound on the memory one layer holds while analysed on the CPU (layer 0's shapes, from the
    headers): its tensors as read, in the stored dtype, plus the float64 chunk of a few heads that
    the Gram and QR steps cast at a time (at most :data:`spectra.CAST_CHUNK_BYTES`, at most the
    largest tensor)."""
    sizes = [(math.prod(model.reader.shape(key)), model.reader.dtype(key).itemsize)
             for key in model.adapter.attention_keys(0)]
    largest = max((n for n, _ in sizes), default=0)
    return sum(n * size for n, size in sizes) + min(CAST_CHUNK_BYTES, 8 * largest)
