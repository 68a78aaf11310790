"""Mllama (Llama 3.2 Vision), its text model (``MllamaForCausalLM``, model_type ``mllama_text_model``, or
below ``model.language_model.`` in ``MllamaForConditionalGeneration``, model_type ``mllama``):
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
import re
from functools import cached_property

from ..layer.attention_layer import Positional, QKNorm
from .base import Site
from .float64 import exact_norms, weighted_rms
from .layout import Block
from .multimodal import TextOfMultimodal
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
        """Token ids and N(0, 1) image states, so that the cross layers run, every image position visible
        through an explicit mask (without one, sdpa would mask the cross-attention causally: its module
        does not say is_causal = False). The text model takes T + 3 states and an additive [B, 1, T, S]
        mask; the full model one image of one tile (its vision tower's patch count of states) and its
        [B, T, images, tiles] mask of ones."""
        import torch

        B, T = input_ids.shape
        dtype = next(hf_model.parameters()).dtype
        vision = getattr(getattr(hf_model, "model", hf_model), "vision_model", None)
        if vision is not None:
            states = torch.randn(B, vision.num_patches, self.hidden_size, generator=generator, dtype=dtype)
            return {"input_ids": input_ids, "cross_attention_states": states,
                    "cross_attention_mask": torch.ones(B, T, 1, 1, dtype=torch.long)}
        states = torch.randn(B, T + 3, self.hidden_size, generator=generator, dtype=dtype)
        return {"input_ids": input_ids, "cross_attention_states": states,
                "cross_attention_mask": torch.zeros(B, 1, T, T + 3, dtype=dtype)}

    def twin_settings(self, hf_config, shape: dict) -> dict:
        """One layer of each kind the model has: a self layer, then a cross layer where it has them."""
        kinds = list(dict.fromkeys(s.block.kind for s in self.sites))
        return {**super().twin_settings(hf_config, shape), "num_hidden_layers": len(kinds), "vocab_size": 32,
                "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "rms_norm_eps": hf_config.rms_norm_eps,
                "cross_attention_layers": [i for i, kind in enumerate(kinds) if kind == "cross"]}


#: A vision-tower tensor: (everything up to the tower, an attention module of one of its layers or None).
_VISION = re.compile(r"^((?:.+\.)?vision_model\.)(?:((?:transformer|global_transformer)\.layers\.\d+\.self_attn)\.)?")

VISION_REASON = ("the vision tower (tiles of patches, with gated positional and tile embeddings): its attention is "
                 "not read yet")


class MllamaAdapter(TextOfMultimodal, MllamaTextAdapter):
    """MllamaForConditionalGeneration: the text model (``model.language_model.layers.i``) read as
    ``mllama_text_model`` from config.json's ``text_config``; the vision tower and its projector are
    listed as not analysed, never counted silently."""

    model_types = ("mllama",)
    text_model_type = "mllama_text_model"
    vision_tower = "vision_model"
    vision_modules = _VISION
    vision_reason = VISION_REASON
    model_tensors = {**MllamaTextAdapter.model_tensors, "language_model.lm_head.weight": "head"}
    not_analysed_tensors = {
        "**vision_model.**": "the vision tower (its attention is listed as not analysed; the whole-model count covers "
                             "the text model only)",
        "**multi_modal_projector.**": "the projector from the vision tower into the text model",
    }

    def twin_settings(self, hf_config, shape: dict) -> dict:
        text = super().twin_settings(hf_config.text_config, shape)
        vision = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_global_layers": 1,
                  "attention_heads": 2, "image_size": 16, "patch_size": 8, "max_num_tiles": 1,
                  "vision_output_dim": 16, "intermediate_layers_indices": [0], "supported_aspect_ratios": [[1, 1]]}
        return {"text_config": text, "vision_config": vision, "image_token_index": 100}


ADAPTERS = (MllamaTextAdapter, MllamaAdapter)
