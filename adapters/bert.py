"""BERT, RoBERTa, XLM-RoBERTa and ELECTRA: unfused nn.Linear query/key/value and output.dense, all four biases.

Layer i (prefix '' for base-model saves such as all-MiniLM-L6-v2, 'bert.' / 'roberta.' / 'electra.' for task models):
    encoder.layer.i.attention.self.{query,key,value}.{weight [d, d], bias [d]}
    encoder.layer.i.attention.output.dense.{weight [d, d], bias [d]}
A decoder with ``add_cross_attention`` (BertLMHeadModel, EncoderDecoderModel's decoder) adds a
cross-attention block per layer, queries from the decoder and keys/values from the encoder's output:
    encoder.layer.i.crossattention.self.{query,key,value}.{weight [d, d], bias [d]}
    encoder.layer.i.crossattention.output.dense.{weight [d, d], bias [d]}
Positions are learned absolute embeddings added to the input; nothing positional inside attention.
ELECTRA's embedding_size projection sits before the layers; attention is d = hidden_size wide.
"""

from __future__ import annotations

from .base import Adapter, Site
from .layout import Block, Projection

SELF = Block("self", (
    Projection("attention.self.query", "q"), Projection("attention.self.key", "k"),
    Projection("attention.self.value", "v"), Projection("attention.output.dense", "o"),
))
CROSS = Block("cross", (
    Projection("crossattention.self.query", "q"), Projection("crossattention.self.key", "k"),
    Projection("crossattention.self.value", "v"), Projection("crossattention.output.dense", "o"),
))


class BertAdapter(Adapter):
    family = "bert"
    post_norm = ("embeddings.LayerNorm.weight", "output.LayerNorm.weight")
    model_types = ("bert", "roberta", "xlm-roberta", "electra")
    model_tensors = {
        "embeddings.(word_embeddings|token_type_embeddings).weight": "embedding",
        "embeddings.position_embeddings.weight": "position",
        "embeddings.LayerNorm.(weight|bias)": "norm",
        "embeddings_project.(weight|bias)": "projection",   # ELECTRA
        "encoder.layer.{n}.(attention|crossattention).output.LayerNorm.(weight|bias)": "norm",
        "encoder.layer.{n}.output.LayerNorm.(weight|bias)": "norm",
        "encoder.layer.{n}.(intermediate|output).dense.(weight|bias)": "mlp",
        "pooler.dense.(weight|bias)": "head",
        "(cls|lm_head|generator_predictions|discriminator_predictions).**": "head",
        "generator_lm_head.(weight|bias)": "head",
    }
    layer_container = "encoder.layer"
    block = SELF
    hf_modules = {"self": ("attention.self", "attention.output.dense"),
                  "cross": ("crossattention.self", "crossattention.output.dense")}

    def blocks(self, layer: int) -> tuple[Block, ...]:
        return (SELF, CROSS) if self.optional("add_cross_attention", False) else (SELF,)

    def causal(self, site: Site) -> bool:
        return bool(self.config.is_decoder)

    def twin_settings(self, hf_config, shape: dict) -> dict:
        kw = {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
              "is_decoder": bool(hf_config.is_decoder),
              "add_cross_attention": bool(getattr(hf_config, "add_cross_attention", False)),
              "max_position_embeddings": 16, "intermediate_size": 16}
        if hf_config.model_type in ("roberta", "xlm-roberta", "xlm-roberta-xl"):
            kw["pad_token_id"] = 1
        return kw





#: Relatives of BERT whose attention the canonical form does not describe, refused with the reason.
REFUSED = {
    "deberta-v2": ("DeBERTa's disentangled attention adds content-to-position and position-to-content scores "
                   "through relative embeddings shared by all layers, a score that the canonical form "
                   "softmax(x W_Q W_K^T x^T + bias) does not describe"),
    "deberta": ("DeBERTa's disentangled attention adds content-to-position and position-to-content scores "
                "through relative embeddings shared by all layers, a score that the canonical form "
                "softmax(x W_Q W_K^T x^T + bias) does not describe"),
}


class XLMRobertaXLAdapter(BertAdapter):
    """XLM-RoBERTa-XL / -XXL: BERT's attention tensors in a pre-LayerNorm encoder. Each layer's
    attention reads ``attention.self_attn_layer_norm(x)`` (the gain folded by ``compare``) and adds its
    output to the residual without a norm; the MLP's norm is ``encoder.layer.i.LayerNorm``, and
    ``encoder.LayerNorm`` closes the stack."""

    family = "xlm-roberta-xl"
    model_types = ("xlm-roberta-xl",)
    post_norm = None
    pre_norm = ("attention.self_attn_layer_norm.weight",)
    model_tensors = {
        **{k: v for k, v in BertAdapter.model_tensors.items() if "output.LayerNorm" not in k},
        "encoder.layer.{n}.(attention|crossattention).self_attn_layer_norm.(weight|bias)": "norm",
        "encoder.layer.{n}.LayerNorm.(weight|bias)": "norm",
        "encoder.LayerNorm.(weight|bias)": "norm",
    }


ADAPTERS = (BertAdapter, XLMRobertaXLAdapter)
