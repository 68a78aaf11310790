"""Qwen3 and Qwen3-MoE: Qwen2's layout (unfused q/k/v/o_proj, GQA, rotate_half RoPE) with a per-head
RMSNorm on queries and keys before RoPE whose one gain vector every head shares.

Layer i (prefix 'model.' for *ForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with attention_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          bias with attention_bias
    layers.i.self_attn.q_norm.weight       [hd]               shared by the H query heads
    layers.i.self_attn.k_norm.weight       [hd]               shared by the G key heads
eps: rms_norm_eps. hd: config.head_dim (Qwen3Config's default 128 where config.json lacks it).
Sliding windows as the config class resolves them (use_sliding_window, layer_types /
max_window_layers); Qwen3-MoE's experts are MLPs, not read.
"""

from __future__ import annotations

import contextlib
from functools import cached_property

from ..layer.attention_layer import QKNorm
from .base import Site
from .float64 import exact_norms, weighted_rms
from .layout import Block
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block


class Qwen3Adapter(QKVODecoderAdapter):
    family = "qwen3"
    model_types = ("qwen3", "qwen3_moe")
    model_tensors = {**QKVODecoderAdapter.model_tensors, "layers.{n}.mlp.**": "mlp"}

    @property
    def head_dim(self) -> int:
        return int(self.config.head_dim or self.hidden_size // self.n_heads)

    @cached_property
    def block(self) -> Block:
        bias = bool(self.optional("attention_bias", False))
        return qkvo_block(bias, bias)

    def qk_norm(self, site: Site) -> QKNorm:
        return self.read_qk_norm(site, "rms", "head", self.config.rms_norm_eps, ("self_attn.q_norm", "self_attn.k_norm"))

    def sliding_window(self, site: Site) -> int | None:
        cfg, i = self.config, site.layer
        window = cfg.sliding_window if self.optional("use_sliding_window", False) else None
        if window is None:
            return None
        if self.config.model_type == "qwen3_moe":
            return window
        layer_types = self.optional("layer_types")
        if layer_types is None:
            return window if i >= cfg.max_window_layers else None
        return window if layer_types[i] == "sliding_attention" else None

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """Qwen3's RMSNorm computes in float32; within this context a float64 input stays float64."""
        if self.config.model_type == "qwen3_moe":
            from transformers.models.qwen3_moe import modeling_qwen3_moe as m
            return exact_norms({m.Qwen3MoeRMSNorm: weighted_rms})
        from transformers.models.qwen3 import modeling_qwen3 as m
        return exact_norms({m.Qwen3RMSNorm: weighted_rms})

    def twin_settings(self, hf_config, shape: dict) -> dict:
        kw = super().twin_settings(hf_config, shape)
        kw["rms_norm_eps"] = hf_config.rms_norm_eps
        if self.config.model_type == "qwen3_moe":
            kw.update(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=8)
        return kw


ADAPTERS = (Qwen3Adapter,)
