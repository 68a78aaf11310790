"""Stream a model's attention layers through counts, spectra and findings.

One layer at a time: read it (checkpoint dtype), refuse what the mathematics does not model,
move it to the compute device, then batched float64 linear algebra over heads and groups (weights
are cast to float64 a few heads at a time inside the Gram step, biases at once).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from ..layer import structure
from ..layer.attention_layer import BIAS_ROLES, AttentionLayer
from ..layer.latent_layer import is_latent
from .counts import layer_counts, model_totals
from .degeneracy import extra_unidentified
from .device import resolve_device
from .findings import layer_findings
from .latent import analyze_latent_layer
from .parallel import layer_workers, ordered_map
from ..layer.buffers import Float64Buffers
from .heavy_tail import heavy_tail
from .spectra import CAST_CHUNK_BYTES, head_spectra, layer_finite, spectra_dict

#: ``on_layer(i, n)`` is called after layer ``i`` (0-based) of ``n`` has been analysed.
LayerCallback = Callable[[int, int], None]


def for_analysis(layer: AttentionLayer, device: torch.device) -> AttentionLayer:
    """The layer on ``device`` with its biases in float64 and its weights still in the stored dtype.

    The weights reach float64 only inside :func:`spectra.gram_float64`, a few heads at a time, so
    no float64 copy of a whole weight is made (on the CPU; a GPU casts each weight at once).
    """
    moved = {}
    for role, t in layer.tensors().items():
        t = t.to(device)
        moved[role] = t.to(torch.float64) if role in BIAS_ROLES or not t.is_floating_point() else t
    return dataclasses.replace(layer, **moved)


def analyze_layer(layer: AttentionLayer, *, device: str | torch.device | None = "cpu",
                  spectra: bool = True, scratch: Float64Buffers | None = None,
                  heavy_tails: bool = False) -> tuple[dict, list[dict]]:
    """(layer object of the JSON contract, findings) for one canonical layer.

    ``heavy_tails``: add ``spectra.heavy_tail`` (:mod:`.heavy_tail`; its per-layer sums and their
    entries cost several times the rest of the analysis, so it is asked for).

    Raises UnsupportedLayerError for flags or RoPE frequencies the counts do not model.
    ``scratch`` (one per thread, shared over its layers) saves re-allocating the float64 chunks.
    """
    if is_latent(layer):   # multi-head latent attention: its own counts (analysis/latent.py)
        return analyze_latent_layer(layer)
    structure.require_modelled(layer)
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    L = for_analysis(layer, dev)
    counts = layer_counts(L)
    s = head_spectra(L, scratch) if spectra else None
    finite = s.finite if s is not None else layer_finite(L)
    extra = extra_unidentified(L, s) if s is not None else None
    found = layer_findings(L, s, extra, finite)
    counts["extra_unidentified"] = None if extra is None else extra["total"]
    counts["unidentified_with_weights"] = None if extra is None else counts["unidentified_parameters"] + extra["total"]
    counts["dead_heads"] = None if extra is None else extra["dead_heads"]
    if s is not None:
        counts["spectra"] = spectra_dict(s)
        if heavy_tails:
            counts["spectra"]["heavy_tail"] = heavy_tail(L, s)
    return counts, found


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
    k = layer_workers(layer_bytes_in_flight(model), n, dev) if workers is None else max(1, int(workers))

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
