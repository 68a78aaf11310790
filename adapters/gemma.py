"""Gemma (v1) and Gemma 2: Llama's unfused q/k/v/o_proj with GQA / MQA and rotate_half RoPE, with
Gemma's own settings.

Layer i (prefix 'model.' for Gemma*ForCausalLM):
    layers.i.self_attn.q_proj.weight [H*hd, d]   bias [H*hd] (attention_bias, all four or none)
    layers.i.self_attn.k_proj.weight [G*hd, d]   layers.i.self_attn.v_proj.weight [G*hd, d]
    layers.i.self_attn.o_proj.weight [d, H*hd]
hd = config.head_dim (256 in the released models, not d / H).

Gemma: score scale head_dim^-1/2. Gemma 2: scale query_pre_attn_scalar^-1/2, scores soft-capped
(s -> c tanh(s / c), c = attn_logit_softcapping) before the mask, and a window on the layers whose
layer_types entry is "sliding_attention". Both norm with (1 + w) gains: the stored w is not the
gain, so comparisons fold 1 + w (``norm_gain_offset`` 1; idinspect/compare/gains.py).
"""

from __future__ import annotations

from ..errors import IdinspectError
from .base import Site
from .qkvo_decoder import QKVODecoderAdapter


class GemmaAdapter(QKVODecoderAdapter):
    family = "gemma"
    model_types = ("gemma", "gemma2")
    model_tensors = {**QKVODecoderAdapter.model_tensors,
                     "layers.{n}.(pre_feedforward_layernorm|post_feedforward_layernorm).weight": "norm"}
    #: Gemma's RMSNorm multiplies by (1 + w): the gain folded is 1 + w, not the stored w.
    pre_norm = ("input_layernorm.weight",)
    norm_gain_offset = 1.0

    def __init__(self, config, reader):
        super().__init__(config, reader)
        if self.optional("use_bidirectional_attention"):
            raise IdinspectError(f"config.json: {config.model_type} with use_bidirectional_attention=true (non-causal "
                                 "attention, windows on both sides) is not supported; refusing rather than miscount")

    @property
    def gemma2(self) -> bool:
        return self.config.model_type == "gemma2"

    def _biases(self) -> tuple[bool, bool]:
        bias = bool(self.optional("attention_bias", False))
        return bias, bias

    def scale(self, site: Site) -> float:
        """Gemma2Attention.scaling = query_pre_attn_scalar^-1/2; GemmaAttention: head_dim^-1/2."""
        if self.gemma2:
            return float(self.config.query_pre_attn_scalar) ** -0.5
        return self.head_dim ** -0.5

    def logit_softcap(self, site: Site) -> float | None:
        cap = self.optional("attn_logit_softcapping") if self.gemma2 else None
        return None if cap is None else float(cap)

    def sliding_window(self, site: Site) -> int | None:
        """Gemma2Attention: config.sliding_window where layer_types[i] == "sliding_attention"."""
        return self.window_by_layer_type(site) if self.gemma2 else None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        kw = super().twin_settings(hf_config, shape)
        for name in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"):
            if hasattr(hf_config, name):
                kw[name] = getattr(hf_config, name)
        return kw


ADAPTERS = (GemmaAdapter,)
