"""Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (unfused q/k/v/o_proj, GQA, q/k/v
biases with ``qkv_bias``, no output bias, rotate_half RoPE); its experts and shared expert are MLPs,
which idinspect does not read.

Sliding windows as Qwen2MoeConfig resolves them: ``layer_types`` where config.json stores it, else
layer i slides when use_sliding_window, i < max_window_layers and i is even ((i + 1) % 2).
"""

from __future__ import annotations

from functools import cached_property

from .layout import Block
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block


class Qwen2MoeAdapter(QKVODecoderAdapter):
    family = "qwen2_moe"
    model_types = ("qwen2_moe",)
    model_tensors = {**QKVODecoderAdapter.model_tensors, "layers.{n}.mlp.**": "mlp"}

    @cached_property
    def block(self) -> Block:
        return qkvo_block(bool(self.config.qkv_bias), False)

    def sliding_window(self, site):
        cfg, i = self.config, site.layer
        layer_types = self.optional("layer_types")
        if layer_types is None:
            sliding = bool(cfg.use_sliding_window) and i < cfg.max_window_layers and bool((i + 1) % 2)
        else:
            sliding = layer_types[i] == "sliding_attention"
        return cfg.sliding_window if sliding else None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {**super().twin_settings(hf_config, shape), "qkv_bias": hf_config.qkv_bias, "num_experts": 2,
                "num_experts_per_tok": 1, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8}


ADAPTERS = (Qwen2MoeAdapter,)
