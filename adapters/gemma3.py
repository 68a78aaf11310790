"""Gemma 3 (text): unfused q/k/v/o_proj with GQA and an explicit head_dim, a per-head RMSNorm on
queries and keys before RoPE whose one gain vector every head shares, in Gemma's form (1 + w).

Layer i (prefix 'model.' for Gemma3ForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with attention_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          bias with attention_bias
    layers.i.self_attn.q_norm.weight       [hd]               gain 1 + w, shared by the query heads
    layers.i.self_attn.k_norm.weight       [hd]               gain 1 + w, shared by the key heads
Score scale query_pre_attn_scalar^-1/2; eps rms_norm_eps. Each layer has a type (``layer_types``:
"sliding_attention" with ``sliding_window``, or "full_attention") and RoPE per type
(``rope_parameters[type]``: the local base and the global base with its scaling), all as
Gemma3TextConfig resolves them. ``use_bidirectional_attention`` turns the causal mask off.
``attn_logit_softcapping`` is in the config class but transformers 5's Gemma3Attention never applies it
(it passes no ``softcap`` to the attention function, unlike Gemma 2's): the function has no cap, so
none is modelled (a Gemma 3 variant with the key set is proven by the Jacobian in the tests; a q/k
norm together with soft-capping stays refused for any family that does apply it).
"""

from __future__ import annotations

import contextlib
from functools import cached_property

import torch

from ..layer.attention_layer import Positional, QKNorm
from .base import Site
from .float64 import exact_norms, rms
from .qkvo_decoder import QKVODecoderAdapter


def gemma_rms(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Gemma's RMSNorm: x / rms(x) * (1 + w)."""
    return rms(x, module.eps) * (1.0 + module.weight)


class Gemma3TextAdapter(QKVODecoderAdapter):
    family = "gemma3"
    model_types = ("gemma3_text",)
    model_tensors = {**QKVODecoderAdapter.model_tensors,
                     "layers.{n}.(pre_feedforward_layernorm|post_feedforward_layernorm).weight": "norm"}
    #: input_layernorm multiplies by (1 + w): comparisons fold 1 + w (idinspect/compare/gains.py).
    norm_gain_offset = 1.0

    @cached_property
    def resolved(self):
        """transformers' own config class (its __post_init__ resolves layer types, windows and RoPE per type)."""
        return self.config.full_config() if hasattr(self.config, "full_config") else self.config

    @property
    def head_dim(self) -> int:
        return int(self.config.head_dim)

    def layer_type(self, site: Site) -> str:
        return self.resolved.layer_types[site.layer]

    def scale(self, site: Site) -> float:
        return float(self.resolved.query_pre_attn_scalar) ** -0.5

    def causal(self, site: Site) -> bool:
        return not self.resolved.use_bidirectional_attention

    def logit_softcap(self, site: Site) -> float | None:
        """None: Gemma3Attention.forward does not pass ``attn_logit_softcapping`` on (see the module docstring)."""
        return None

    def sliding_window(self, site: Site) -> int | None:
        return self.resolved.sliding_window if self.layer_type(site) == "sliding_attention" else None

    @cached_property
    def _ropes(self) -> dict[str, Positional]:
        from ..sources.rope_config import rotary_spec_for_layer_type

        return {t: Positional("rope", rotary=rotary_spec_for_layer_type(self.resolved, t, "half"))
                for t in sorted(set(self.resolved.layer_types))}

    def positional(self, site: Site | None = None) -> Positional:
        return self._ropes[self.layer_type(site if site is not None else self.sites[0])]

    def qk_norm(self, site: Site) -> QKNorm:
        return self.read_qk_norm(site, "rms", "head", self.resolved.rms_norm_eps, ("self_attn.q_norm", "self_attn.k_norm"),
                                 gain_offset=1.0)

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """Gemma 3's RMSNorm computes x and 1 + w in float32; within this context a float64 input stays float64."""
        from transformers.models.gemma3 import modeling_gemma3 as m

        return exact_norms({m.Gemma3RMSNorm: gemma_rms})

    def twin_settings(self, hf_config, shape: dict) -> dict:
        first = hf_config.layer_types[0]
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
                "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"], "intermediate_size": 16,
                "query_pre_attn_scalar": hf_config.query_pre_attn_scalar, "attention_bias": hf_config.attention_bias,
                "sliding_window": hf_config.sliding_window, "layer_types": [first],
                "rope_parameters": {t: dict(v) for t, v in hf_config.rope_parameters.items()},
                "rms_norm_eps": hf_config.rms_norm_eps, "attn_logit_softcapping": hf_config.attn_logit_softcapping,
                "use_bidirectional_attention": hf_config.use_bidirectional_attention,
                "max_position_embeddings": hf_config.max_position_embeddings}


ADAPTERS = (Gemma3TextAdapter,)
