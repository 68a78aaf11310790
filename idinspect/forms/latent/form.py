"""Multi-head latent attention as a :class:`idinspect.forms.Form`: each method is this folder's mathematics."""

from __future__ import annotations

from typing import Any

import torch

from ...layer.latent_layer import LatentAttentionLayer
from ..per_head.export import FixedLayer
from ..per_head.invariants import InvariantError
from .analysis import analyze_latent_layer
from .export import fix_latent_layer
from .gauge import (
    LATENT_GAUGE_NAME,
    LATENT_GAUGE_VERSION,
    canonicalize_latent,
    latent_gauge_residuals,
    latent_output_error,
)
from .prove import prove_latent
from .reference import latent_reference_attention
from .structure import unidentified_dims

#: What the latent form does not provide, and why (:meth:`refusal`).
REFUSALS = {
    "per-head invariants": "multi-head latent attention has no per-head invariants",
}


class LatentForm:
    """DeepSeek-V2/V3's multi-head latent attention (MLA): docs/mathematics.md, "Multi-head latent attention"."""

    name = "latent"
    title = "multi-head latent attention"
    gauge_name = LATENT_GAUGE_NAME
    gauge_version = LATENT_GAUGE_VERSION

    def analyze(self, layer: LatentAttentionLayer, *, device: str | torch.device | None = "cpu", spectra: bool = True,
                scratch: Any = None, heavy_tails: bool = False) -> tuple[dict, list[dict]]:
        """Structural counts and the non-finite findings; no spectra (keys and values are not linear in x)."""
        return analyze_latent_layer(layer)

    def unidentified(self, layer: LatentAttentionLayer) -> int:
        return unidentified_dims(layer)

    def reference(self, layer: LatentAttentionLayer, x: torch.Tensor, positions: torch.Tensor | None = None,
                  causal: bool | None = None, x_kv: torch.Tensor | None = None) -> torch.Tensor:
        if x_kv is not None and x_kv is not x:
            raise ValueError(f"layer {layer.index}: multi-head latent attention has no cross-attention blocks")
        return latent_reference_attention(layer, x, positions, causal)

    def canonicalize(self, layer: LatentAttentionLayer, **options: Any) -> tuple[LatentAttentionLayer, list]:
        return canonicalize_latent(layer, **options)

    def invariant_change(self, a: LatentAttentionLayer, b: LatentAttentionLayer) -> InvariantError:
        return latent_output_error(a, b)

    def gauge_residuals(self, layer: LatentAttentionLayer) -> list[tuple[float, str]]:
        return latent_gauge_residuals(layer)

    def fix(self, layer: LatentAttentionLayer, target: torch.dtype | None, workspace: Any = None) -> FixedLayer:
        return fix_latent_layer(layer, target)

    def prove(self, model: Any, seed: int = 0) -> dict:
        return prove_latent(model, seed)

    def tensors(self, layer: LatentAttentionLayer) -> dict[str, torch.Tensor]:
        return layer.tensors()

    def refusal(self, need: str) -> str | None:
        return REFUSALS.get(need)


LATENT = LatentForm()
