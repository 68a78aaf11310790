"""Phi (Phi-1, Phi-1.5, Phi-2): unfused q/k/v projections and the output projection ``dense``, all with
biases; partial rotate_half RoPE over the first int(head_dim * partial_rotary_factor) dims of each head.

Layer i (prefix '' for PhiModel saves, 'model.' for PhiForCausalLM):
    layers.i.self_attn.q_proj.weight [H*hd, d]   bias [H*hd]
    layers.i.self_attn.k_proj.weight [G*hd, d]   bias [G*hd]
    layers.i.self_attn.v_proj.weight [G*hd, d]   bias [G*hd]
    layers.i.self_attn.dense.weight  [d, H*hd]   bias [d]
partial_rotary_factor: config.json's rope_parameters, else its top-level key, else PhiConfig's 0.5.
``qk_layernorm=True`` puts one nn.LayerNorm (gain and bias, shared by all heads) on each head's
query and key before RoPE (eps: layer_norm_eps):
    layers.i.self_attn.q_layernorm.weight [hd]  bias [hd]      k_layernorm.weight [hd]  bias [hd]
(docs/mathematics.md, "Normalised queries and keys").
"""

from __future__ import annotations

import dataclasses

from ..layer.attention_layer import QKNorm
from .base import Site
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block


class PhiAdapter(QKVODecoderAdapter):
    family = "phi"
    model_types = ("phi",)
    model_tensors = {
        "embed_tokens.weight": "embedding",
        "layers.{n}.input_layernorm.(weight|bias)": "norm",
        "layers.{n}.mlp.(fc1|fc2).(weight|bias)": "mlp",
        "final_layernorm.(weight|bias)": "norm",
    }
    partial_rotary = True
    block = qkvo_block(True, True, o="dense")

    def qk_norm(self, site: Site) -> QKNorm | None:
        if not self.optional("qk_layernorm", False):
            return None
        norm = self.read_qk_norm(site, "layer", "head", self.config.layer_norm_eps,
                                 ("self_attn.q_layernorm", "self_attn.k_layernorm"))
        biases, names = {}, dict(norm.tensor_names)
        for role, module in (("q", "q_layernorm"), ("k", "k_layernorm")):
            key = self.key(site, f"self_attn.{module}.bias")
            biases[f"{role}_bias"], names[f"{role}_bias"] = self._load(key, (self.head_dim,)), key
        return dataclasses.replace(norm, tensor_names=names, **biases)

    def sliding_window(self, site):
        return None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
                "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"], "intermediate_size": 16,
                "qk_layernorm": hf_config.qk_layernorm, "layer_norm_eps": min(hf_config.layer_norm_eps, 1e-7),
                "max_position_embeddings": hf_config.max_position_embeddings,
                "rope_parameters": self.twin_rope(hf_config.rope_parameters, shape)}


ADAPTERS = (PhiAdapter,)
