"""Falcon: fused query_key_value in three layouts, RoPE or ALiBi, biases only with ``bias``.

Layer i (prefix 'transformer.' for FalconForCausalLM):
    h.i.self_attention.query_key_value.weight [(H + 2G) hd, d]   bias [(H + 2G) hd] (``bias``)
    h.i.self_attention.dense.weight [d, d]                         bias [d]           (``bias``)
Rows of query_key_value, by config:
    new_decoder_architecture   [G, H/G + 2, hd]: a group's queries, then its key, then its value (G = num_kv_heads)
    multi_query (class default) [Q (H hd) | K (hd) | V (hd)]                                        (G = 1)
    neither                    [H, 3, hd]: q, k, v adjacent per head                                (G = H)
Positions: RoPE rotate_half over the whole head, or with ``alibi`` the BLOOM slopes m_h (rounded to
bfloat16, as Falcon builds them) added as (q.k + m_h j) / sqrt(hd): slope m_h / sqrt(hd) after the scale.
"""

from __future__ import annotations

import math
from functools import cached_property

import torch

from ..layer.attention_layer import Positional
from .base import Adapter, Site, rope_positional
from .layout import Block, Projection


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """BLOOM's ALiBi slopes [n_heads] (``_get_alibi_slopes`` / ``build_alibi_tensor``), float32.

    For n a power of two, m_h = 2^(-8 (h + 1) / n); otherwise the closest lower power of two's slopes
    followed by every other slope of twice that power.
    """
    closest = 2 ** math.floor(math.log2(n_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != n_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float32)
        remaining = min(closest, n_heads - closest)
        extra = torch.pow(extra_base, torch.arange(1, 1 + 2 * remaining, 2, dtype=torch.int32))
        slopes = torch.cat([slopes, extra])
    return slopes


class FalconAdapter(Adapter):
    family = "falcon"
    pre_norm = ("ln_attn.weight", "input_layernorm.weight")
    model_types = ("falcon",)
    model_tensors = {
        "word_embeddings.weight": "embedding",
        "h.{n}.(input_layernorm|post_attention_layernorm|ln_attn|ln_mlp).(weight|bias)": "norm",
        "h.{n}.mlp.(dense_h_to_4h|dense_4h_to_h).(weight|bias)": "mlp",
        "ln_f.(weight|bias)": "norm",
    }
    layer_container = "h"
    hf_modules = {"self": ("self_attention", None)}

    @property
    def n_kv_heads(self) -> int:
        cfg = self.config
        if cfg.new_decoder_architecture:
            return int(cfg.num_kv_heads or self.n_heads)
        return 1 if cfg.multi_query else self.n_heads

    @cached_property
    def block(self) -> Block:
        cfg = self.config
        layout = "grouped" if cfg.new_decoder_architecture else ("blocks" if cfg.multi_query else "per_head")
        bias = bool(cfg.bias)
        return Block("self", (Projection("self_attention.query_key_value", "qkv", bias, layout=layout),
                              Projection("self_attention.dense", "o", bias)))

    @cached_property
    def _positional(self) -> Positional:
        if self.config.alibi:
            slopes = alibi_slopes(self.n_heads).to(torch.bfloat16).to(torch.float64) / math.sqrt(self.head_dim)
            return Positional("alibi", alibi_slopes=slopes)
        return rope_positional(self.config, "half")

    def positional(self, site: Site | None = None) -> Positional:
        return self._positional

    def twin_settings(self, hf_config, shape: dict) -> dict:
        cfg = hf_config
        kw = {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
              "num_kv_heads": shape["kv_heads"], "new_decoder_architecture": cfg.new_decoder_architecture,
              "multi_query": cfg.multi_query, "alibi": cfg.alibi, "bias": cfg.bias, "parallel_attn": cfg.parallel_attn,
              "ffn_hidden_size": 16, "max_position_embeddings": cfg.max_position_embeddings}
        if cfg.rope_parameters:
            kw["rope_parameters"] = dict(cfg.rope_parameters)
        return kw


ADAPTERS = (FalconAdapter,)
