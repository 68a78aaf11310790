"""OLMo 2, OLMo 3 (with sliding-window layers by ``layer_types``) and OLMoE: unfused q/k/v/o_proj (GQA, rotate_half RoPE) with an RMSNorm over the whole
query projection and one over the whole key projection, before RoPE (gains of width H hd / G hd).

Layer i (prefix 'model.' for *ForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with attention_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          bias with attention_bias
    layers.i.self_attn.q_norm.weight       [H*hd]             one RMS over all query heads
    layers.i.self_attn.k_norm.weight       [G*hd]             one RMS over all key heads
eps: rms_norm_eps. OLMo 2 has no norm before attention (its norms follow attention and the MLP);
OLMoE is pre-norm (input_layernorm) and its experts are MLPs, not read. OLMoE's ``clip_qkv``
(clamping q, k, v) is a nonlinearity between the weights and the score: refused by name.
"""

from __future__ import annotations

import contextlib
from functools import cached_property

from ..errors import IdinspectError
from ..layer.attention_layer import Positional, QKNorm
from .base import Site
from .float64 import exact_norms, weighted_rms
from .layout import Block
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block


class Olmo2Adapter(QKVODecoderAdapter):
    family = "olmo2"
    model_types = ("olmo2", "olmo3", "olmoe")
    model_tensors = {**QKVODecoderAdapter.model_tensors,
                     "layers.{n}.post_feedforward_layernorm.weight": "norm"}

    def __init__(self, config, reader):
        super().__init__(config, reader)
        if self.optional("clip_qkv") is not None:
            raise IdinspectError(f"config.json: clip_qkv is {self.optional('clip_qkv')} ({config.model_type} clamps q, k "
                                 "and v, a nonlinearity between the weights and the score that idinspect does not "
                                 "model); idinspect refuses rather than miscount")

    @property
    def pre_norm(self) -> tuple[str, ...]:
        return ("input_layernorm.weight",) if self.config.model_type == "olmoe" else ()

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_heads

    @cached_property
    def block(self) -> Block:
        bias = bool(self.optional("attention_bias", False))
        return qkvo_block(bias, bias)

    def qk_norm(self, site: Site) -> QKNorm:
        return self.read_qk_norm(site, "rms", "projection", self.config.rms_norm_eps,
                                 ("self_attn.q_norm", "self_attn.k_norm"))

    @cached_property
    def _ropes(self) -> dict[str, Positional]:
        """OLMo 3: one RoPE per layer type (its rope_parameters are keyed by layer type, as Gemma 3's)."""
        from ..sources.rope_config import rotary_spec_for_layer_type

        return {t: Positional("rope", rotary=rotary_spec_for_layer_type(self.config, t, "half"))
                for t in sorted(set(self.config.layer_types))}

    def positional(self, site: Site | None = None) -> Positional:
        if self.config.model_type != "olmo3":
            return super().positional(site)
        return self._ropes[self.config.layer_types[(site if site is not None else self.sites[0]).layer]]

    def sliding_window(self, site: Site) -> int | None:
        """OLMo 3's window on the layers ``layer_types`` marks "sliding_attention"; OLMo 2 and OLMoE have none."""
        return self.window_by_layer_type(site) if self.config.model_type == "olmo3" else None

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """OLMo 2's / OLMoE's RMSNorm computes in float32; within this context a float64 input stays float64."""
        if self.config.model_type == "olmoe":
            from transformers.models.olmoe import modeling_olmoe as m
            return exact_norms({m.OlmoeRMSNorm: weighted_rms})
        if self.config.model_type == "olmo3":
            from transformers.models.olmo3 import modeling_olmo3 as m
            return exact_norms({m.Olmo3RMSNorm: weighted_rms})
        from transformers.models.olmo2 import modeling_olmo2 as m
        return exact_norms({m.Olmo2RMSNorm: weighted_rms})

    def twin_settings(self, hf_config, shape: dict) -> dict:
        kw = {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
              "num_key_value_heads": shape["kv_heads"], "intermediate_size": 16,
              "attention_bias": hf_config.attention_bias, "rms_norm_eps": hf_config.rms_norm_eps,
              "max_position_embeddings": hf_config.max_position_embeddings,
              "rope_parameters": dict(hf_config.rope_parameters)}
        if self.config.model_type == "olmoe":
            kw.update(num_experts=2, num_experts_per_tok=1)
        if self.config.model_type == "olmo3":
            first = hf_config.layer_types[0]
            kw.update(layer_types=[first], sliding_window=hf_config.sliding_window,
                      rope_parameters={t: dict(v) for t, v in hf_config.rope_parameters.items()})
        return kw


ADAPTERS = (Olmo2Adapter,)
