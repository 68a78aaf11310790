"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: the text model of the multimodal checkpoint, read from config.json's
``text_config``; the vision tower is listed as not analysed.

Layer i of the text model (prefix 'model.language_model.' for *ForConditionalGeneration):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   Qwen2-VL / 2.5-VL: bias [H*hd | G*hd]
    layers.i.self_attn.o_proj.weight       [d, H*hd]          no bias
    layers.i.self_attn.{q,k}_norm.weight   [hd]               Qwen3-VL: Qwen3's per-head RMS q/k norm
RoPE is *multimodal* (M-RoPE): the head's rotate_half planes are split into sections (``mrope_section``:
contiguous for Qwen2-VL and 2.5-VL, interleaved T, H, W for Qwen3-VL) and each section rotates by
one of three position streams (time, height, width of an image patch; the three are equal for text).
Every plane still rotates by its own frequency, by some position: the QK gauge is the commutant of
those rotations, plane by plane, the same as for RoPE with one position stream (docs/mathematics.md),
so the layer is counted as rotate_half RoPE with the model's frequencies.
"""

from __future__ import annotations

import contextlib
import re

from ..layer.attention_layer import QKNorm
from .base import Site
from .float64 import exact_norms, weighted_rms
from .multimodal import TextOfMultimodal
from .qkvo_decoder import QKVODecoderAdapter

#: model_type of the checkpoint -> model_type of its text_config.
TEXT_TYPES = {"qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text", "qwen3_vl": "qwen3_vl_text"}

VISION_REASON = ("the vision tower: its attention rotates each head by a 2-D RoPE over the patch grid, a positional "
                 "scheme the canonical form does not describe")

#: A vision-tower tensor: (everything up to the tower, its blocks' attention module or None).
_VISION = re.compile(r"^((?:.+\.)?visual\.)(?:(blocks\.\d+\.attn)\.)?")


class QwenVLAdapter(TextOfMultimodal, QKVODecoderAdapter):
    family = "qwen_vl"
    model_types = tuple(TEXT_TYPES)
    model_tensors = {**QKVODecoderAdapter.model_tensors, "layers.{n}.mlp.**": "mlp"}
    not_analysed_tensors = {"**visual.**": "the vision tower and its merger into the text model (its attention is "
                                           "listed as not analysed; the whole-model count covers the text model only)"}
    vision_tower = "visual"
    vision_modules = _VISION
    vision_reason = VISION_REASON

    @property
    def text_model_type(self) -> str:
        return TEXT_TYPES[self.outer.model_type]

    @property
    def qwen3(self) -> bool:
        return self.outer.model_type == "qwen3_vl"

    def _biases(self) -> tuple[bool, bool]:
        """Qwen2-VL and 2.5-VL: q/k/v biases, none on o_proj; Qwen3-VL: ``attention_bias`` on all four."""
        if self.qwen3:
            return super()._biases()
        return True, False

    def qk_norm(self, site: Site) -> QKNorm | None:
        if not self.qwen3:
            return None
        return self.read_qk_norm(site, "rms", "head", self.config.rms_norm_eps, ("self_attn.q_norm", "self_attn.k_norm"))

    def sliding_window(self, site: Site) -> int | None:
        """Qwen2-VL's windows as Qwen2's: with ``use_sliding_window``, on ``layer_types`` "sliding_attention"
        layers; Qwen3-VL has none."""
        if self.qwen3 or not self.optional("use_sliding_window", False):
            return None
        return self.window_by_layer_type(site)

    def exact_float64(self) -> contextlib.AbstractContextManager:
        """The text model's RMSNorm computes in float32; within this context a float64 input stays float64."""
        if self.qwen3:
            from transformers.models.qwen3_vl import modeling_qwen3_vl as m
            return exact_norms({m.Qwen3VLTextRMSNorm: weighted_rms})
        return contextlib.nullcontext()

    def twin_settings(self, hf_config, shape: dict) -> dict:
        text_hf = hf_config.text_config
        rope = dict(text_hf.rope_parameters)
        if "mrope_section" in rope:   # the twin's planes, all in the first section (the streams are equal for text)
            rope["mrope_section"] = [shape["head_dim"] // 2, 0, 0]
        text = {**super().twin_settings(text_hf, shape), "num_hidden_layers": 1, "vocab_size": 32,
                "rms_norm_eps": text_hf.rms_norm_eps, "rope_parameters": rope, "pad_token_id": None}
        vision = {"depth": 1, "hidden_size": 8, "num_heads": 2, "patch_size": 2, "spatial_merge_size": 1,
                  "temporal_patch_size": 1, "in_channels": 3}
        if self.qwen3:
            vision.update(intermediate_size=16, out_hidden_size=shape["hidden_size"], num_position_embeddings=4,
                          deepstack_visual_indexes=[])
        elif self.outer.model_type == "qwen2_vl":
            vision.update(embed_dim=8, mlp_ratio=2)
        else:
            vision.update(intermediate_size=16, out_hidden_size=shape["hidden_size"], window_size=4,
                          fullatt_block_indexes=[0])
        return {"text_config": text, "vision_config": vision, "image_token_id": 31, "video_token_id": 30,
                "vision_start_token_id": 29}


ADAPTERS = (QwenVLAdapter,)
