"""MiniCPM3: multi-head latent attention in DeepSeek-V2's tensor layout (transformers says its module is
"structurally identical to DeepseekV2Attention"), with rotate_half RoPE on the rotary part of each head
(cos/sin, not DeepSeek-V2's complex pairs) and the same YaRN-style softmax scale. Its latent norms are
MiniCPM3RMSNorm(rank) with the class default eps (1e-6), as DeepSeek's. Embedding and residual scaling
(``scale_emb``, ``scale_depth``) act outside attention.
"""

from __future__ import annotations

import contextlib
from functools import cached_property

from ..layer.attention_layer import Positional
from .base import rope_positional
from .deepseek import DeepseekAdapter
from .float64 import exact_norms, weighted_rms


class MiniCPM3Adapter(DeepseekAdapter):
    family = "minicpm3"
    model_types = ("minicpm3",)

    @cached_property
    def _rope(self) -> Positional:
        return rope_positional(self._full, "half")

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """MiniCPM3's RMSNorm computes in float32; within this context a float64 input stays float64."""
        from transformers.models.minicpm3 import modeling_minicpm3 as m

        return exact_norms({m.MiniCPM3RMSNorm: weighted_rms})

    def twin_settings(self, hf_config, shape: dict) -> dict:
        cfg = hf_config
        kw = {k: shape[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        kw.update(hidden_size=shape["hidden_size"], num_attention_heads=shape["heads"], num_key_value_heads=shape["heads"],
                  intermediate_size=16, max_position_embeddings=getattr(cfg, "max_position_embeddings", 2048),
                  attention_bias=cfg.attention_bias, dim_model_base=shape["hidden_size"])
        if getattr(cfg, "rope_parameters", None) is not None:
            kw["rope_parameters"] = dict(cfg.rope_parameters)
        return kw


ADAPTERS = (MiniCPM3Adapter,)
