"""Phi-3 / Phi-3.5 / Phi-4-mini: fused ``qkv_proj`` [Q | K | V] by head counts, ``o_proj``, no biases,
GQA; rotate_half RoPE (default or longrope) over the first int(head_dim * partial_rotary_factor)
dims; an optional sliding window on every layer.

Layer i (prefix 'model.' for Phi3ForCausalLM):
    layers.i.self_attn.qkv_proj.weight [(H + 2G) hd, d]   rows [Q (H hd) | K (G hd) | V (G hd)]
    layers.i.self_attn.o_proj.weight   [d, H hd]
"""

from __future__ import annotations

from .layout import Block, Projection
from .qkvo_decoder import QKVODecoderAdapter

SELF = Block("self", (Projection("self_attn.qkv_proj", "qkv", bias=False), Projection("self_attn.o_proj", "o", bias=False)))


class Phi3Adapter(QKVODecoderAdapter):
    family = "phi3"
    model_types = ("phi3",)
    model_tensors = {**QKVODecoderAdapter.model_tensors, "layers.{n}.mlp.gate_up_proj.weight": "mlp"}
    partial_rotary = True
    block = SELF

    def sliding_window(self, site):
        """Phi3Attention passes config.sliding_window to every layer's attention."""
        return self.optional("sliding_window")

    def twin_settings(self, hf_config, shape: dict) -> dict:
        rope = self.twin_rope(hf_config.rope_parameters, shape)
        planes = int(shape["head_dim"] * rope.get("partial_rotary_factor", 1.0)) // 2
        for name in ("short_factor", "long_factor"):   # longrope: one factor per rotary plane
            if isinstance(rope.get(name), list):
                rope[name] = rope[name][:planes]
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
                "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"], "intermediate_size": 16,
                "max_position_embeddings": hf_config.max_position_embeddings,
                "original_max_position_embeddings": hf_config.original_max_position_embeddings,
                "sliding_window": hf_config.sliding_window, "rope_parameters": rope}


ADAPTERS = (Phi3Adapter,)
