"""Export of one multi-head latent attention block: its balanced-latent form cast once."""

from __future__ import annotations

import torch

from ...errors import IdinspectError
from ...layer.latent_layer import LatentAttentionLayer
from ..per_head.export import FixedLayer, refuse_unfixable
from ..per_head.spectra import all_finite
from .gauge import canonicalize_latent, latent_output_error


def fix_latent_layer(layer: LatentAttentionLayer, target: torch.dtype | None) -> FixedLayer:
    """The balanced-latent form of an MLA block (:mod:`idinspect.forms.latent.gauge`) cast once; its error is
    the largest relative change of the block's output (MLA has no thin per-head invariants)."""
    refuse_unfixable(layer)
    original = layer.to(torch.float64)
    fixed, notes = canonicalize_latent(original)
    cast = fixed.replace(**{role: t.to(target or getattr(layer, role).dtype, copy=True)
                            for role, t in fixed.tensors().items()})
    for role, t in cast.tensors().items():
        if not all_finite(t):
            raise IdinspectError(f"layer {layer.index}: the gauge-fixed {layer.tensor_names.get(role, role)} is not "
                                 f"finite in {str(t.dtype).removeprefix('torch.')}; export with --dtype float32 or "
                                 "float64, or keep the checkpoint as it is")
    return FixedLayer(cast, latent_output_error(original, cast.to(torch.float64)), notes)
