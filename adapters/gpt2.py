"""GPT-2: fused Conv1D c_attn and c_proj, stored [in, out] (y = x W + b), biases on both.

Layer i (prefix '' for base-model saves, 'transformer.' for GPT2LMHeadModel):
    h.i.attn.c_attn.weight [d, 3d]   columns [Q (d) | K (d) | V (d)], heads contiguous in each
    h.i.attn.c_attn.bias   [3d]
    h.i.attn.c_proj.weight [d, d]    rows h*hd:(h+1)*hd are W_O^h (no transpose)
    h.i.attn.c_proj.bias   [d]
With ``add_cross_attention`` each layer adds a cross-attention block (queries from the decoder,
keys/values from the encoder's output; ``h.i.ln_cross_attn`` is its LayerNorm, not attention):
    h.i.crossattention.q_attn.weight [d, d]    bias [d]     W_Q
    h.i.crossattention.c_attn.weight [d, 2d]   bias [2d]    columns [K (d) | V (d)]
    h.i.crossattention.c_proj.weight [d, d]    bias [d]     W_O
``h.i.attn.bias`` / ``h.i.attn.masked_bias`` in old files are causal-mask buffers, not biases.
"""

from __future__ import annotations

from .base import Adapter, Site
from .layout import Block, Projection

SELF = Block("self", (Projection("attn.c_attn", "qkv", conv1d=True), Projection("attn.c_proj", "o", conv1d=True)))
CROSS = Block("cross", (Projection("crossattention.q_attn", "q", conv1d=True),
                        Projection("crossattention.c_attn", "kv", conv1d=True),
                        Projection("crossattention.c_proj", "o", conv1d=True)))


class GPT2Adapter(Adapter):
    family = "gpt2"
    pre_norm = ("ln_1.weight",)
    model_types = ("gpt2",)
    model_tensors = {
        "wte.weight": "embedding",
        "wpe.weight": "position",
        "h.{n}.(ln_1|ln_2|ln_cross_attn).(weight|bias)": "norm",
        "h.{n}.mlp.(c_fc|c_proj).(weight|bias)": "mlp",
        "ln_f.(weight|bias)": "norm",
    }
    layer_container = "h"
    block = SELF
    config_names = {"hidden_size": "n_embd", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
                    "max_position_embeddings": "n_positions"}
    buffer_suffixes = (".attn.bias", ".attn.masked_bias", ".crossattention.bias", ".crossattention.masked_bias")
    hf_modules = {"self": ("attn", None), "cross": ("crossattention", None)}

    def blocks(self, layer: int) -> tuple[Block, ...]:
        return (SELF, CROSS) if self.optional("add_cross_attention", False) else (SELF,)

    def scale(self, site: Site) -> float:
        scale = self.head_dim ** -0.5 if self.config.scale_attn_weights else 1.0
        if self.config.scale_attn_by_inverse_layer_idx:
            scale /= site.layer + 1
        return scale

    def twin_settings(self, hf_config, shape: dict) -> dict:
        cfg = hf_config
        return {"n_embd": shape["hidden_size"], "n_head": shape["heads"], "n_inner": 16, "n_positions": 16,
                "scale_attn_weights": cfg.scale_attn_weights,
                "add_cross_attention": bool(getattr(cfg, "add_cross_attention", False)),
                "scale_attn_by_inverse_layer_idx": cfg.scale_attn_by_inverse_layer_idx,
                "reorder_and_upcast_attn": bool(getattr(cfg, "reorder_and_upcast_attn", False))}


ADAPTERS = (GPT2Adapter,)
