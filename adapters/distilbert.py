"""DistilBERT: unfused nn.Linear q_lin/k_lin/v_lin/out_lin, all four biases, absolute positions.

Layer i (prefix 'distilbert.' for task models, '' for DistilBertModel saves):
    transformer.layer.i.attention.{q_lin,k_lin,v_lin,out_lin}.{weight [d, d], bias [d]}
config.json names the sizes dim, n_heads, n_layers. Bidirectional, scale hd^-1/2.
"""

from __future__ import annotations

from .base import Adapter, Site
from .layout import Block, Projection

SELF = Block("self", tuple(Projection(f"attention.{name}", role) for name, role in
                           (("q_lin", "q"), ("k_lin", "k"), ("v_lin", "v"), ("out_lin", "o"))))


class DistilBertAdapter(Adapter):
    family = "distilbert"
    post_norm = ("embeddings.LayerNorm.weight", "output_layer_norm.weight")
    model_types = ("distilbert",)
    model_tensors = {
        "embeddings.word_embeddings.weight": "embedding",
        "embeddings.position_embeddings.weight": "position",
        "embeddings.LayerNorm.(weight|bias)": "norm",
        "transformer.layer.{n}.(sa_layer_norm|output_layer_norm).(weight|bias)": "norm",
        "transformer.layer.{n}.ffn.(lin1|lin2).(weight|bias)": "mlp",
        "(vocab_transform|vocab_layer_norm|vocab_projector|pre_classifier).(weight|bias)": "head",
    }
    layer_container = "transformer.layer"
    block = SELF
    config_names = {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}
    hf_modules = {"self": ("attention", None)}

    def causal(self, site: Site) -> bool:
        return False

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"dim": shape["hidden_size"], "n_heads": shape["heads"], "n_layers": 1, "hidden_dim": 16,
                "max_position_embeddings": 16, "pad_token_id": 0}


ADAPTERS = (DistilBertAdapter,)
