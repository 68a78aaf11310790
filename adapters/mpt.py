"""MPT (MosaicML): one fused ``attn.Wqkv`` in "blocks" layout [Q | K | V], ``attn.out_proj``, no
biases, multi-head (G = H), ALiBi.

Layer i (prefix 'transformer.' for MptForCausalLM, '' for MptModel saves):
    blocks.i.attn.Wqkv.weight     [3d, d]     rows [Q (d) | K (d) | V (d)], heads of width d / H
    blocks.i.attn.out_proj.weight [d, d]
    blocks.i.norm_1.weight, norm_2.weight     LayerNorm gains (no biases)
Scores q k / sqrt(hd) (or ``attn_config.softmax_scale``) + m_h (j - S + 1) with MPT's own slopes
m_h (``build_mpt_alibi_tensor`` with its default ``alibi_bias_max`` 8: MptModel passes no other); the - S + 1 is the same for every key of a row,
so the softmax sees m_h j, the ALiBi form of the canonical layer. transformers' MptAttention always
adds ALiBi and reads neither ``attn_config.alibi``, ``alibi_bias_max`` nor ``qk_ln``; ``clip_qkv`` (clamping q, k, v)
is a nonlinearity between the weights and the score: refused by name.
"""

from __future__ import annotations

import contextlib
from functools import cached_property

import torch

from ..errors import IdinspectError
from ..layer.attention_layer import Positional
from .base import Adapter, Site
from .float64 import float_cast_kept
from .layout import Block, Projection

SELF = Block("self", (Projection("attn.Wqkv", "qkv", bias=False), Projection("attn.out_proj", "o", bias=False)))


class MptAdapter(Adapter):
    family = "mpt"
    pre_norm = ("norm_1.weight",)
    model_types = ("mpt",)
    model_tensors = {
        "wte.weight": "embedding",
        "blocks.{n}.(norm_1|norm_2).weight": "norm",
        "blocks.{n}.ffn.(up_proj|down_proj).weight": "mlp",
        "norm_f.weight": "norm",
    }
    layer_container = "blocks"
    block = SELF
    config_names = {"hidden_size": "d_model", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}
    hf_modules = {"self": ("attn", "attn.out_proj")}

    def __init__(self, config, reader):
        super().__init__(config, reader)
        clip = self.attn_setting("clip_qkv")
        if clip:
            raise IdinspectError(f"config.json: attn_config.clip_qkv is {clip} (MPT clamps q, k and v, a nonlinearity "
                                 "between the weights and the score that idinspect does not model); idinspect "
                                 "refuses rather than miscount")

    def attn_setting(self, name: str):
        """``attn_config.name`` as MptAttentionConfig resolves it (config.json may store a partial dict)."""
        from transformers.models.mpt.configuration_mpt import MptAttentionConfig

        attn = self.config.attn_config
        if isinstance(attn, dict):
            attn = MptAttentionConfig(**attn)
        return getattr(attn, name)

    def scale(self, site: Site) -> float:
        scale = self.attn_setting("softmax_scale")
        return float(scale) if scale is not None else self.head_dim ** -0.5

    @cached_property
    def _alibi(self) -> Positional:
        """MPT's slopes as transformers builds them: the difference of two neighbouring columns of its
        ALiBi tensor (exact in float32). MptModel builds it with the default ``alibi_bias_max`` (8),
        whatever attn_config says."""
        from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

        table = build_mpt_alibi_tensor(self.n_heads, 2)   # [H, 1, 2]
        return Positional("alibi", alibi_slopes=(table[:, 0, 1] - table[:, 0, 0]).to(torch.float64))

    def positional(self, site: Site | None = None) -> Positional:
        return self._alibi

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """MptAttention casts its scores to float32 (``.float()``) before the softmax; within this context
        a float64 model's stay float64."""
        from transformers.models.mpt import modeling_mpt as m

        return float_cast_kept(m.MptAttention)

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"d_model": shape["hidden_size"], "n_heads": shape["heads"], "n_layers": 1, "expansion_ratio": 2,
                "max_seq_len": 16, "attn_config": {"softmax_scale": self.attn_setting("softmax_scale")}}


ADAPTERS = (MptAdapter,)
