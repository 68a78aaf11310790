"""GLM and GLM-4 (THUDM/zai): the generic q/k/v/o decoder (q/k/v biases with ``attention_bias``, no
o_proj bias) whose RoPE rotates *interleaved* pairs (2i, 2i + 1) of only the first part of each head
(``partial_rotary_factor``, 0.5 by default; the rest passes unrotated). GLM-4 adds a norm after
attention and one after the MLP (``post_self_attn_layernorm``, ``post_mlp_layernorm``); both fuse the
MLP's gate and up projections (``mlp.gate_up_proj``).
"""

from __future__ import annotations

from functools import cached_property

from ..layer.attention_layer import Positional
from .base import rope_positional
from .qkvo_decoder import QKVODecoderAdapter


class GlmAdapter(QKVODecoderAdapter):
    family = "glm"
    model_types = ("glm", "glm4")
    model_tensors = {**QKVODecoderAdapter.model_tensors, "layers.{n}.mlp.gate_up_proj.weight": "mlp",
                     "layers.{n}.(post_self_attn_layernorm|post_mlp_layernorm).weight": "norm"}
    partial_rotary = True

    def _biases(self) -> tuple[bool, bool]:
        return bool(self.config.attention_bias), False

    @cached_property
    def _rope(self) -> Positional:
        return rope_positional(self.config, "interleaved", partial=True)


ADAPTERS = (GlmAdapter,)
