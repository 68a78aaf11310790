"""ViT: unfused q/k/v and output projections, biases on q/k/v with ``qkv_bias`` and always on the output.

Two tensor naming schemes are read, decided from the checkpoint itself:

    original (what save_pretrained writes: transformers reverts its own renaming on save;
    every ViT checkpoint on the hub), prefix 'vit.' for task models, '' for ViTModel saves:
        encoder.layer.i.attention.attention.{query,key,value}.{weight [d, d], bias [d]}
        encoder.layer.i.attention.output.dense.{weight [d, d], bias [d]}
    transformers 5 in memory (a live model, or ``save_pretrained(save_original_format=False)``):
        layers.i.attention.{q,k,v}_proj.{weight, bias}    layers.i.attention.o_proj.{weight, bias}

transformers 5's ``conversion_mapping`` for ViTModel renames ``encoder.layer.`` -> ``layers.``,
``attention.query`` -> ``q_proj`` (and key, value), ``attention.output.dense`` -> ``attention.o_proj``;
both schemes hold the same tensors. A live model is always in the second scheme, whatever its
checkpoint used. Pre-norm (``layernorm_before``), bidirectional, scale hd^-1/2; positions are
learned embeddings added to the patch embeddings.
"""

from __future__ import annotations

from ..sources.config import setting_optional
from .base import Adapter, Site
from .layout import Block, Projection

ORIGINAL = ("encoder.layer", Block("self", (
    Projection("attention.attention.query", "q"), Projection("attention.attention.key", "k"),
    Projection("attention.attention.value", "v"), Projection("attention.output.dense", "o"))))
RENAMED = ("layers", Block("self", (
    Projection("attention.q_proj", "q"), Projection("attention.k_proj", "k"),
    Projection("attention.v_proj", "v"), Projection("attention.o_proj", "o"))))


def _without_qkv_bias(block: Block) -> Block:
    return Block(block.kind, tuple(Projection(p.module, p.roles, bias=p.roles == "o") for p in block.projections))


class ViTAdapter(Adapter):
    family = "vit"
    model_types = ("vit",)
    model_tensors = {
        "embeddings.(cls_token|mask_token|patch_embeddings.projection.weight|patch_embeddings.projection.bias)": "embedding",
        "embeddings.position_embeddings": "position",
        "(encoder.layer|layers).{n}.(layernorm_before|layernorm_after).(weight|bias)": "norm",
        "encoder.layer.{n}.(intermediate|output).dense.(weight|bias)": "mlp",
        "layers.{n}.mlp.(fc1|fc2).(weight|bias)": "mlp",            # transformers 5's names
        "layernorm.(weight|bias)": "norm",
        "pooler.dense.(weight|bias)": "head",
    }
    pre_norm = ("layernorm_before.weight",)
    hf_modules = {"self": ("attention", None)}

    def __init__(self, config, reader):
        renamed = any(k.endswith(f"{RENAMED[0]}.0.{RENAMED[1].projections[0].weight_name}") for k in reader.keys())
        self.layer_container, block = RENAMED if renamed else ORIGINAL
        self.block = block if setting_optional(config, "qkv_bias", True) else _without_qkv_bias(block)
        super().__init__(config, reader)

    def causal(self, site: Site) -> bool:
        return False

    def live_modules(self, hf_model, n: int):
        """A live transformers 5 ViT is always in the renamed scheme (``layers.i.attention``)."""
        site = self.sites[n]
        return hf_model.get_submodule(f"{self.prefix}{RENAMED[0]}.{site.layer}.attention"), None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "intermediate_size": 16,
                "image_size": 8, "patch_size": 2, "num_channels": 1, "qkv_bias": bool(hf_config.qkv_bias)}


ADAPTERS = (ViTAdapter,)
