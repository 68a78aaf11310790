"""ALBERT: one attention block per layer group, shared by every layer of the group.

Block (g, k) (prefix 'albert.' for task models):
    encoder.albert_layer_groups.g.albert_layers.k.attention.{query,key,value,dense}.{weight [d, d], bias [d]}
num_hidden_groups groups of inner_group_num layers each; layer l of num_hidden_layers runs group
l // (num_hidden_layers / num_hidden_groups). Each stored block is counted once, kind "shared" when
layers reuse it. The attention module ends in LayerNorm(x + dense(z)): the block's output is dense's.
"""

from __future__ import annotations

from functools import cached_property

from .base import Adapter, Site
from .layout import Block, Projection

ATTENTION = tuple(Projection(f"attention.{name}", role) for name, role in
                  (("query", "q"), ("key", "k"), ("value", "v"), ("dense", "o")))


class AlbertAdapter(Adapter):
    family = "albert"
    post_norm = ("embeddings.LayerNorm.weight", "full_layer_layer_norm.weight")
    model_types = ("albert",)
    model_tensors = {
        "embeddings.(word_embeddings|token_type_embeddings).weight": "embedding",
        "embeddings.position_embeddings.weight": "position",
        "embeddings.LayerNorm.(weight|bias)": "norm",
        "encoder.embedding_hidden_mapping_in.(weight|bias)": "projection",
        "encoder.albert_layer_groups.{n}.albert_layers.{n}.(attention.LayerNorm|full_layer_layer_norm).(weight|bias)": "norm",
        "encoder.albert_layer_groups.{n}.albert_layers.{n}.(ffn|ffn_output).(weight|bias)": "mlp",
        "pooler.(weight|bias)": "head",
        "(predictions|sop_classifier).**": "head",
    }
    layer_container = "encoder.albert_layer_groups"
    hf_modules = {kind: ("attention", "attention.dense") for kind in ("self", "shared")}

    @cached_property
    def sites(self) -> list[Site]:
        cfg = self.config
        groups, inner = int(cfg.num_hidden_groups), int(cfg.inner_group_num)
        kind = "shared" if self.num_layers > groups else "self"
        block = Block(kind, ATTENTION)
        return [Site(f"{self.layer_container}.{g}.albert_layers.{k}", "", g * inner + k, block)
                for g in range(groups) for k in range(inner)]

    def causal(self, site: Site) -> bool:
        return False

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "embedding_size": 8,
                "intermediate_size": 16, "num_hidden_groups": 1, "inner_group_num": 1,
                "max_position_embeddings": 16}


ADAPTERS = (AlbertAdapter,)
