"""StarCoder2: unfused q/k/v/o_proj, GQA, biases on all four with ``use_bias`` (default true);
rotate_half RoPE over the whole head; an optional sliding window on every layer.

Layer i (prefix 'model.' for Starcoder2ForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with use_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          bias with use_bias
"""

from __future__ import annotations

from functools import cached_property

from .layout import Block
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block


class Starcoder2Adapter(QKVODecoderAdapter):
    family = "starcoder2"
    model_types = ("starcoder2",)
    model_tensors = {
        "embed_tokens.weight": "embedding",
        "layers.{n}.(input_layernorm|post_attention_layernorm).(weight|bias)": "norm",
        "layers.{n}.mlp.(c_fc|c_proj).(weight|bias)": "mlp",
        "norm.(weight|bias)": "norm",
    }

    @cached_property
    def block(self) -> Block:
        bias = bool(self.config.use_bias)
        return qkvo_block(bias, bias)

    def sliding_window(self, site):
        """Starcoder2Attention passes config.sliding_window to every layer's attention."""
        return self.config.sliding_window

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {**super().twin_settings(hf_config, shape), "use_bias": hf_config.use_bias}


ADAPTERS = (Starcoder2Adapter,)
