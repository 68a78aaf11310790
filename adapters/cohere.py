"""Cohere (Command-R): unfused q/k/v/o_proj with GQA, biases on all four with ``attention_bias``,
interleaved RoPE (planes (2p, 2p + 1), cos/sin repeat_interleave'd); with ``use_qk_norm`` (Command-R+)
a per-head LayerNorm without bias on queries and keys before RoPE, with gains per head.

Layer i (prefix 'model.' for CohereForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with attention_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          bias with attention_bias
    layers.i.self_attn.q_norm.weight       [H, hd]            with use_qk_norm (eps: layer_norm_eps)
    layers.i.self_attn.k_norm.weight       [G, hd]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cached_property

import torch

from ..layer.attention_layer import Positional, QKNorm
from .base import Site, rope_positional
from .float64 import centred, exact_norms
from .layout import Block
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block


def cohere_layer_norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Cohere's LayerNorm (no bias): weight * (x - mean) / sqrt(var + eps), over the last dim."""
    return module.weight * centred(x, module.variance_epsilon)


class CohereAdapter(QKVODecoderAdapter):
    family = "cohere"
    model_types = ("cohere",)
    model_tensors = {
        "embed_tokens.weight": "embedding",
        "layers.{n}.input_layernorm.weight": "norm",
        "layers.{n}.mlp.(gate|up|down)_proj.weight": "mlp",
        "norm.weight": "norm",
    }

    @cached_property
    def block(self) -> Block:
        bias = bool(self.optional("attention_bias", False))
        return qkvo_block(bias, bias)

    @cached_property
    def _rope(self) -> Positional:
        return rope_positional(self.config, "interleaved")

    def sliding_window(self, site: Site) -> int | None:
        return None

    def qk_norm(self, site: Site) -> QKNorm | None:
        if not self.optional("use_qk_norm", False):
            return None
        return self.read_qk_norm(site, "layer", "head", self.config.layer_norm_eps, ("self_attn.q_norm", "self_attn.k_norm"))

    @contextlib.contextmanager
    def exact_float64(self) -> Iterator[None]:
        """Cohere's LayerNorm and its RoPE compute in float32; within this context float64 stays float64."""
        from transformers.models.cohere import modeling_cohere as m

        original = m.apply_rotary_pos_emb

        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            if q.dtype != torch.float64:
                return original(q, k, cos, sin, unsqueeze_dim)
            cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
            return q * cos + m.rotate_half(q) * sin, k * cos + m.rotate_half(k) * sin

        m.apply_rotary_pos_emb = apply_rotary_pos_emb
        try:
            with exact_norms({m.CohereLayerNorm: cohere_layer_norm}):
                yield
        finally:
            m.apply_rotary_pos_emb = original

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
                "num_key_value_heads": shape["kv_heads"], "intermediate_size": 16,
                "attention_bias": hf_config.attention_bias, "use_qk_norm": hf_config.use_qk_norm,
                # the count holds for every eps > 0; a small one keeps the twin's nearly-null band
                # (~eps / mean square) well below the proof's 1e-6 cut
                "layer_norm_eps": min(hf_config.layer_norm_eps, 1e-6), "max_position_embeddings": hf_config.max_position_embeddings,
                "rope_parameters": dict(hf_config.rope_parameters)}


ADAPTERS = (CohereAdapter,)
