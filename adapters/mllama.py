"""Mllama (Llama 3.2 Vision), its text model (``MllamaForCausalLM``, model_type ``mllama_text_model``):
Llama's self-attention layers, and at the indices ``cross_attention_layers`` names, layers whose only
attention is *cross*-attention to the vision tower's states.

Layer i (prefix 'model.'):
    layers.i.self_attn.{q,k,v,o}_proj.weight                      self layers: GQA, rotate_half RoPE, no biases
    layers.i.cross_attn.{q,k,v,o}_proj.weight                     cross layers: queries from the text, keys
                                                                  and values from ``cross_attention_states``
    layers.i.cross_attn.{q,k}_norm.weight [hd]                    a per-head RMS norm on q and on k, one gain
                                                                  vector shared by the heads (as Qwen3's)
    layers.i.cross_attn_attn_gate, cross_attn_mlp_gate            tanh gates on the residual branches
A cross layer has no RoPE and no mask over the image positions. Its gates scale the attention branch
by tanh(gate) outside attention (the branch's W_O scale trades with it; not an attention parameter).
Given no image states, transformers skips the cross layers; the counts are of the stored weights.
"""

from __future__ import annotations

import contextlib
from functools import cached_property

from ..layer.attention_layer import Positional, QKNorm
from .base import Site
from .float64 import exact_norms, weighted_rms
from .layout import Block
from .qkvo_decoder import QKVODecoderAdapter, qkvo_block

CROSS = Block("cross", qkvo_block(False, False, attn="cross_attn").projections)


class MllamaTextAdapter(QKVODecoderAdapter):
    family = "mllama"
    model_types = ("mllama_text_model",)
    model_tensors = {**QKVODecoderAdapter.model_tensors,
                     "layers.{n}.(cross_attn_attn_gate|cross_attn_mlp_gate)": "mlp"}
    hf_modules = {"self": ("self_attn", None), "cross": ("cross_attn", None)}
    kv_arguments = ("cross_attention_states",)

    def _biases(self) -> tuple[bool, bool]:
        return False, False

    @cached_property
    def _cross_layers(self) -> frozenset[int]:
        return frozenset(int(i) for i in (self.config.cross_attention_layers or ()))

    def blocks(self, layer: int) -> tuple[Block, ...]:
        return (CROSS,) if layer in self._cross_layers else (self.block,)

    def positional(self, site: Site | None = None) -> Positional:
        if site is not None and site.block.kind == "cross":
            return Positional("none")
        return self._rope

    def qk_norm(self, site: Site) -> QKNorm | None:
        if site.block.kind != "cross":
            return None
        return self.read_qk_norm(site, "rms", "head", self.config.rms_norm_eps, ("cross_attn.q_norm", "cross_attn.k_norm"))

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """Mllama's RMSNorm computes in float32; within this context a float64 input stays float64."""
        from transformers.models.mllama import modeling_mllama as m

        return exact_norms({m.MllamaTextRMSNorm: weighted_rms})

    def example_inputs(self, hf_model, input_ids, generator):
        """Token ids and N(0, 1) image states of T + 3 positions, so that the cross layers run, every image
        position visible through an explicit all-zero additive mask (without one, sdpa would mask the
        cross-attention causally: its module does not say is_causal = False)."""
        import torch

        B, T = input_ids.shape
        dtype = next(hf_model.parameters()).dtype
        states = torch.randn(B, T + 3, self.hidden_size, generator=generator, dtype=dtype)
        return {"input_ids": input_ids, "cross_attention_states": states,
                "cross_attention_mask": torch.zeros(B, 1, T, T + 3, dtype=dtype)}

    def twin_settings(self, hf_config, shape: dict) -> dict:
        """One layer of each kind the model has: a self layer, then a cross layer where it has them."""
        kinds = list(dict.fromkeys(s.block.kind for s in self.sites))
        return {**super().twin_settings(hf_config, shape), "num_hidden_layers": len(kinds), "vocab_size": 32,
                "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "rms_norm_eps": hf_config.rms_norm_eps,
                "cross_attention_layers": [i for i, kind in enumerate(kinds) if kind == "cross"]}


ADAPTERS = (MllamaTextAdapter,)
