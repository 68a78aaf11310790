"""GPTBigCode (SantaCoder, StarCoder 1): fused nn.Linear c_attn, multi-query by default.

Layer i (prefix 'transformer.' for GPTBigCodeForCausalLM):
    h.i.attn.c_attn.weight [d + 2 G hd, d]   rows [Q (H hd) | K (hd) | V (hd)] with multi_query (G = 1);
                                             without it [H, 3, hd] (q, k, v adjacent per head, G = H)
    h.i.attn.c_attn.bias   [d + 2 G hd]
    h.i.attn.c_proj.{weight [d, d], bias [d]}
Scale hd^-1/2 when scale_attn_weights (the fp32-softmax "unscale" by layer index cancels exactly).
Cross-attention (add_cross_attention) is refused: its key/value split does not follow the heads.
"""

from __future__ import annotations

from functools import cached_property

from ..errors import IdinspectError
from .base import Adapter, Site
from .layout import Block, Projection


class GPTBigCodeAdapter(Adapter):
    family = "gpt_bigcode"
    pre_norm = ("ln_1.weight",)
    model_types = ("gpt_bigcode",)
    model_tensors = {
        "wte.weight": "embedding",
        "wpe.weight": "position",
        "h.{n}.(ln_1|ln_2).(weight|bias)": "norm",
        "h.{n}.mlp.(c_fc|c_proj).(weight|bias)": "mlp",
        "ln_f.(weight|bias)": "norm",
    }
    layer_container = "h"
    hf_modules = {"self": ("attn", None)}
    buffer_suffixes = (".attn.bias", ".attn.masked_bias")

    def __init__(self, config, reader):
        if getattr(config, "add_cross_attention", False):
            raise IdinspectError("config.json: gpt_bigcode with add_cross_attention is refused: its cross-attention "
                                 "splits keys and values by one head width, which idinspect does not model")
        super().__init__(config, reader)

    @property
    def n_kv_heads(self) -> int:
        return 1 if self.config.multi_query else self.n_heads

    @cached_property
    def block(self) -> Block:
        layout = "blocks" if self.config.multi_query else "per_head"
        return Block("self", (Projection("attn.c_attn", "qkv", layout=layout), Projection("attn.c_proj", "o")))

    def scale(self, site: Site) -> float:
        return self.head_dim ** -0.5 if self.config.scale_attn_weights else 1.0

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"n_embd": shape["hidden_size"], "n_head": shape["heads"], "n_inner": 16, "n_positions": 16,
                "multi_query": hf_config.multi_query, "scale_attn_weights": hf_config.scale_attn_weights}


ADAPTERS = (GPTBigCodeAdapter,)
