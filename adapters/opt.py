"""OPT: unfused q/k/v/out_proj, all four biases (``enable_bias``), learned absolute positions.

Layer i (prefix 'model.' for OPTForCausalLM, '' for OPTModel saves):
    decoder.layers.i.self_attn.{q,k,v}_proj.{weight [d, d], bias [d]}
    decoder.layers.i.self_attn.out_proj.{weight [d, d], bias [d]}
The module multiplies q (bias included) by hd^-1/2 before the product: the standard scale.
"""

from __future__ import annotations

from functools import cached_property

from .base import Adapter
from .layout import Block, Projection


class OPTAdapter(Adapter):
    family = "opt"
    pre_norm = ("self_attn_layer_norm.weight",)
    model_types = ("opt",)
    model_tensors = {
        "decoder.embed_tokens.weight": "embedding",
        "decoder.embed_positions.weight": "position",
        "decoder.(project_in|project_out).weight": "projection",
        "decoder.layers.{n}.(self_attn_layer_norm|final_layer_norm).(weight|bias)": "norm",
        "decoder.layers.{n}.(fc1|fc2).(weight|bias)": "mlp",
        "decoder.final_layer_norm.(weight|bias)": "norm",
    }
    layer_container = "decoder.layers"
    hf_modules = {"self": ("self_attn", None)}

    @cached_property
    def block(self) -> Block:
        bias = bool(self.config.enable_bias)
        return Block("self", tuple(Projection(f"self_attn.{name}", role, bias)
                                   for name, role in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"),
                                                      ("out_proj", "o"))))

    def input_norm_keys(self, n: int) -> list[str]:
        """Post-norm OPT (``do_layer_norm_before`` false, OPT-350m) has no norm in front of attention."""
        return super().input_norm_keys(n) if self.config.do_layer_norm_before else []

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "ffn_dim": 16,
                "word_embed_proj_dim": shape["hidden_size"], "max_position_embeddings": 16,
                "enable_bias": hf_config.enable_bias, "do_layer_norm_before": hf_config.do_layer_norm_before}


ADAPTERS = (OPTAdapter,)
