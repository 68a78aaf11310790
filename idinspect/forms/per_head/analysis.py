"""Analysis of one per-head attention layer: counts, spectra, degeneracy and findings.

The layer is moved to the compute device with its biases in float64 (:func:`for_analysis`); the
weights reach float64 a few heads at a time inside :func:`.spectra.gram_float64`. The counts
are :mod:`.counts` (from :mod:`.structure`), the per-head singular values :mod:`.spectra`, the
weight-level extras :mod:`.degeneracy`, the findings :mod:`.findings`.
"""

from __future__ import annotations

import dataclasses

import torch

from ...layer.attention_layer import BIAS_ROLES, AttentionLayer
from ...layer.buffers import Float64Buffers
from ...numerics.device import resolve_device
from . import structure
from .counts import layer_counts
from .degeneracy import extra_unidentified
from .findings import layer_findings
from .heavy_tail import heavy_tail
from .spectra import head_spectra, layer_finite, spectra_dict


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


def analyze_per_head_layer(layer: AttentionLayer, *, device: str | torch.device | None = "cpu",
                  spectra: bool = True, scratch: Float64Buffers | None = None,
                  heavy_tails: bool = False) -> tuple[dict, list[dict]]:
    """(layer object of the JSON contract, findings) for one canonical layer.

    ``heavy_tails``: add ``spectra.heavy_tail`` (:mod:`.heavy_tail`; its per-layer sums and their
    entries cost several times the rest of the analysis, so it is asked for).

    Raises UnsupportedLayerError for flags or RoPE frequencies the counts do not model.
    ``scratch`` (one per thread, shared over its layers) saves re-allocating the float64 chunks.
    """
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
