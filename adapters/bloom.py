"""BLOOM: fused query_key_value laid out per head [H, 3, hd], biases everywhere, ALiBi.

Layer i (prefix 'transformer.' for BloomForCausalLM, '' for BloomModel saves):
    h.i.self_attention.query_key_value.weight [3d, d]   bias [3d]   rows [H, 3, hd]: q, k, v adjacent per head
    h.i.self_attention.dense.weight [d, d]               bias [d]
Scores qk / sqrt(hd) + m_h j with BLOOM's slopes m_h (float32) and the key position j. The attention
module adds the residual after ``dense``: the block's output is dense's output.
"""

from __future__ import annotations

from functools import cached_property

import torch

from ..layer.attention_layer import Positional
from .base import Adapter, Site
from .falcon import alibi_slopes
from .layout import Block, Projection

SELF = Block("self", (Projection("self_attention.query_key_value", "qkv", layout="per_head"),
                      Projection("self_attention.dense", "o")))


class BloomAdapter(Adapter):
    family = "bloom"
    pre_norm = ("input_layernorm.weight",)
    model_types = ("bloom",)
    model_tensors = {
        "word_embeddings.weight": "embedding",
        "word_embeddings_layernorm.(weight|bias)": "norm",
        "h.{n}.(input_layernorm|post_attention_layernorm).(weight|bias)": "norm",
        "h.{n}.mlp.(dense_h_to_4h|dense_4h_to_h).(weight|bias)": "mlp",
        "ln_f.(weight|bias)": "norm",
    }
    layer_container = "h"
    block = SELF
    config_names = {"num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}
    hf_modules = {"self": ("self_attention", "self_attention.dense")}

    @cached_property
    def _alibi(self) -> Positional:
        return Positional("alibi", alibi_slopes=alibi_slopes(self.n_heads).to(torch.float64))

    def positional(self, site: Site | None = None) -> Positional:
        return self._alibi

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "n_head": shape["heads"], "n_layer": 1}


ADAPTERS = (BloomAdapter,)
