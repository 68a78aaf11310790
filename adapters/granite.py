"""Granite (IBM Granite 3.x dense): Llama's attention (unfused q/k/v/o_proj, GQA, rotate_half RoPE,
biases on all four with ``attention_bias``) with the softmax scale set by ``attention_multiplier``
instead of head_dim^-1/2. Its embedding, residual and logit multipliers act outside attention.
"""

from __future__ import annotations

from .base import Site
from .qkvo_decoder import QKVODecoderAdapter


class GraniteAdapter(QKVODecoderAdapter):
    family = "granite"
    model_types = ("granite",)

    def scale(self, site: Site) -> float:
        """GraniteAttention.scaling = config.attention_multiplier."""
        return float(self.config.attention_multiplier)

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {**super().twin_settings(hf_config, shape), "attention_multiplier": hf_config.attention_multiplier}


ADAPTERS = (GraniteAdapter,)
