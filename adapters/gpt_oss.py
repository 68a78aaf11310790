"""gpt-oss: Llama's unfused q/k/v/o_proj (GQA, biases on all four by default), rotate_half RoPE
(YaRN in the released models), attention sinks, alternating sliding windows. Its mixture-of-experts
blocks are MLPs, not read.

Layer i (prefix 'model.' for GptOssForCausalLM):
    layers.i.self_attn.q_proj.weight [H*hd, d]   bias [H*hd] (attention_bias, all four or none)
    layers.i.self_attn.k_proj.weight [G*hd, d]   layers.i.self_attn.v_proj.weight [G*hd, d]
    layers.i.self_attn.o_proj.weight [d, H*hd]
    layers.i.self_attn.sinks [H]                 one learned logit per head joining each softmax row
hd = config.head_dim; layer i has config.sliding_window where layer_types[i] == "sliding_attention".
"""

from __future__ import annotations

from .base import Site
from .qkvo_decoder import QKVODecoderAdapter


class GptOssAdapter(QKVODecoderAdapter):
    family = "gpt_oss"
    model_types = ("gpt_oss",)
    model_tensors = {**QKVODecoderAdapter.model_tensors, "layers.{n}.mlp.**": "mlp"}
    sinks_tensor = "self_attn.sinks"

    def _biases(self) -> tuple[bool, bool]:
        bias = bool(self.optional("attention_bias", True))
        return bias, bias

    def sliding_window(self, site: Site) -> int | None:
        """GptOssAttention: config.sliding_window where layer_types[i] == "sliding_attention"."""
        return self.window_by_layer_type(site)

    def twin_settings(self, hf_config, shape: dict) -> dict:
        kw = super().twin_settings(hf_config, shape)
        kw.update(num_local_experts=2, num_experts_per_tok=1)
        return kw


ADAPTERS = (GptOssAdapter,)
