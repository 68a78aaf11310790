"""StableLM (StableLM-3B-4E1T, StableLM-2): unfused q/k/v/o_proj, GQA, q/k/v biases with
``use_qkv_bias``, no output bias; partial rotate_half RoPE over the first int(head_dim *
partial_rotary_factor) dims (StableLmConfig's default factor 0.25).

Layer i (prefix 'model.' for StableLmForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with use_qkv_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          no bias
``qk_layernorm=True`` (StableLM-2-12B) puts a per-head LayerNorm on queries and keys: refused by name.
"""

from __future__ import annotations

from functools import cached_property

from .layout import Block
from .llama import LlamaAdapter, qkvo_block
from .phi import refuse_qk_layernorm


class StableLmAdapter(LlamaAdapter):
    family = "stablelm"
    model_types = ("stablelm",)
    partial_rotary = True

    def __init__(self, config, reader):
        super().__init__(config, reader)
        refuse_qk_layernorm(self)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_heads

    @cached_property
    def block(self) -> Block:
        return qkvo_block(bool(self.config.use_qkv_bias), False)

    def sliding_window(self, site):
        return None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
                "num_key_value_heads": shape["kv_heads"], "intermediate_size": 16, "qk_layernorm": False,
                "use_qkv_bias": hf_config.use_qkv_bias, "max_position_embeddings": hf_config.max_position_embeddings,
                "rope_parameters": self.twin_rope(hf_config.rope_parameters, shape)}


ADAPTERS = (StableLmAdapter,)
