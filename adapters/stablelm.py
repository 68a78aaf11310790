"""StableLM (StableLM-3B-4E1T, StableLM-2): unfused q/k/v/o_proj, GQA, q/k/v biases with
``use_qkv_bias``, no output bias; partial rotate_half RoPE over the first int(head_dim *
partial_rotary_factor) dims (StableLmConfig's default factor 0.25).

Layer i (prefix 'model.' for StableLmForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with use_qkv_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          no bias
``qk_layernorm=True`` (StableLM-2-12B) puts a per-head LayerNorm without bias on queries and keys
before RoPE, one per query head and one per key head (eps: layer_norm_eps):
    layers.i.self_attn.q_layernorm.norms.h.weight [hd]  (h < H)     k_layernorm.norms.g.weight [hd]  (g < G)
read as per-head gains [H, hd] / [G, hd] (docs/mathematics.md, "Normalised queries and keys").
"""

from __future__ import annotations

from functools import cached_property

import torch

from ..layer.attention_layer import QKNorm
from .base import Site
from .layout import Block
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block


class StableLmAdapter(QKVODecoderAdapter):
    family = "stablelm"
    model_types = ("stablelm",)
    model_tensors = {**QKVODecoderAdapter.model_tensors,
                     "layers.{n}.(input_layernorm|post_attention_layernorm).bias": "norm", "norm.bias": "norm"}
    partial_rotary = True

    def qk_norm(self, site: Site) -> QKNorm | None:
        if not self.optional("qk_layernorm", False):
            return None
        gains, names = {}, {}
        for role, module, heads in (("q", "q_layernorm", self.n_heads), ("k", "k_layernorm", self.n_kv_heads)):
            keys = [self.key(site, f"self_attn.{module}.norms.{h}.weight") for h in range(heads)]
            gains[f"{role}_gain"] = torch.stack([self._load(k, (self.head_dim,)) for k in keys])
            names[f"{role}_gain"] = self.key(site, f"self_attn.{module}.norms.*.weight")
        return QKNorm("layer", "head", float(self.config.layer_norm_eps), tensor_names=names, **gains)

    def qk_norm_stored(self, site: Site, norm: QKNorm) -> dict[str, torch.Tensor]:
        """The per-head gains [H, hd] / [G, hd] back as one module per head (``norms.h.weight``)."""
        return {self.key(site, f"self_attn.{module}.norms.{h}.weight"): gain[h]
                for module, gain in (("q_layernorm", norm.q_gain), ("k_layernorm", norm.k_gain))
                for h in range(gain.shape[0])}

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
                "num_key_value_heads": shape["kv_heads"], "intermediate_size": 16, "qk_layernorm": hf_config.qk_layernorm,
                "layer_norm_eps": min(hf_config.layer_norm_eps, 1e-7),   # any eps > 0: keeps the nearly-null band low
                "use_qkv_bias": hf_config.use_qkv_bias, "max_position_embeddings": hf_config.max_position_embeddings,
                "rope_parameters": self.twin_rope(hf_config.rope_parameters, shape)}


ADAPTERS = (StableLmAdapter,)
