"""The per-head form as a :class:`idinspect.forms.Form`: each method is this folder's mathematics."""

from __future__ import annotations

from typing import Any

import torch

from ...layer.attention_layer import AttentionLayer
from ...layer.buffers import Float64Buffers
from .analysis import analyze_per_head_layer
from .canonicalize import GAUGE_NAME, GAUGE_VERSION, canonicalize
from .export import FixedLayer, fix_per_head_layer
from .invariants import InvariantError, largest_invariant_error
from .prove import prove
from .reference import reference_attention
from .residuals import gauge_residuals
from .structure import unidentified_dims


class PerHeadForm:
    """W_Q, W_K, W_V, W_O per head (queries per group of keys and values): docs/mathematics.md."""

    name = "per_head"
    title = "per-head attention"
    gauge_name = GAUGE_NAME
    gauge_version = GAUGE_VERSION

    def analyze(self, layer: AttentionLayer, *, device: str | torch.device | None = "cpu", spectra: bool = True,
                scratch: Float64Buffers | None = None, heavy_tails: bool = False) -> tuple[dict, list[dict]]:
        return analyze_per_head_layer(layer, device=device, spectra=spectra, scratch=scratch, heavy_tails=heavy_tails)

    def unidentified(self, layer: AttentionLayer) -> int:
        return unidentified_dims(layer)

    def reference(self, layer: AttentionLayer, x: torch.Tensor, positions: torch.Tensor | None = None,
                  causal: bool | None = None, x_kv: torch.Tensor | None = None) -> torch.Tensor:
        return reference_attention(layer, x, positions, causal, x_kv)

    def canonicalize(self, layer: AttentionLayer, **options: Any) -> tuple[AttentionLayer, Any]:
        return canonicalize(layer, **options)

    def invariant_change(self, a: AttentionLayer, b: AttentionLayer) -> InvariantError:
        return largest_invariant_error(a, b)

    def gauge_residuals(self, layer: AttentionLayer) -> list[tuple[float, str]]:
        return gauge_residuals(layer)

    def fix(self, layer: AttentionLayer, target: torch.dtype | None, workspace: Float64Buffers | None = None) -> FixedLayer:
        return fix_per_head_layer(layer, target, workspace)

    def prove(self, model: Any, seed: int = 0) -> dict:
        return prove(model, seed)

    def tensors(self, layer: AttentionLayer) -> dict[str, torch.Tensor]:
        return layer.tensors()

    def refusal(self, need: str) -> str | None:
        return None


PER_HEAD = PerHeadForm()
