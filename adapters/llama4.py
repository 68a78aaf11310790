"""Llama 4 (text): unfused q/k/v/o_proj with GQA and an explicit head_dim, interleaved RoPE (complex
pairs (2p, 2p + 1)) on the layers that use it, an RMS norm without gains on the rotated queries and
keys of those layers, and attention temperature tuning on the layers without RoPE.

Layer i (prefix 'model.' for Llama4ForCausalLM):
    layers.i.self_attn.{q,k,v}_proj.weight [H*hd | G*hd, d]   bias with attention_bias
    layers.i.self_attn.o_proj.weight       [d, H*hd]          bias with attention_bias
Per layer, as Llama4TextConfig resolves them: ``no_rope_layers[i]`` (1: RoPE layer, 0: NoPE layer);
on RoPE layers with ``use_qk_norm`` the weightless RMS norm (eps ``rms_norm_eps``) after RoPE; on NoPE
layers with ``attn_temperature_tuning`` queries times 1 + attn_scale log(1 + floor((t + 1) /
floor_scale)); ``layer_types[i] == "chunked_attention"`` (RoPE layers, by default) attends within
chunks of ``attention_chunk_size``. The experts and the router are MLPs, not read.

``llama4`` (Llama4ForConditionalGeneration): the same text model below ``language_model.model.``,
read from config.json's ``text_config`` (:class:`Llama4Adapter`); its vision tower's attention (a 2-D
RoPE) is not modelled and is listed in every report as not analysed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import torch

from ..errors import IdinspectError
from ..layer.attention_layer import Positional, QKNorm, QueryTemperature
from .base import Site, rope_positional
from .float64 import exact_norms, rms, weighted_rms
from .multimodal import TextOfMultimodal
from .qkvo_decoder import QKVODecoderAdapter


class Llama4TextAdapter(QKVODecoderAdapter):
    family = "llama4"
    model_types = ("llama4_text",)
    model_tensors = {
        "embed_tokens.weight": "embedding",
        "layers.{n}.(input_layernorm|post_attention_layernorm).weight": "norm",
        "layers.{n}.feed_forward.**": "mlp",         # dense MLP, or router, experts and shared expert
        "norm.weight": "norm",
        "language_model.lm_head.weight": "head",
    }

    def resolved(self, name: str) -> Any:
        """``name`` as Llama4TextConfig resolves it: config.json's value where it stores a non-empty
        one (save_pretrained writes the resolved lists), else the config class's (its __post_init__
        derives ``no_rope_layers`` and ``layer_types`` from the other settings)."""
        value = self.optional(name)
        if value:
            return value
        full = self.config.full_config() if hasattr(self.config, "full_config") else self.config
        return getattr(full, name)

    @property
    def head_dim(self) -> int:
        return int(self.config.head_dim)

    def _per_layer(self, name: str) -> list:
        values = list(self.resolved(name))
        if len(values) < self.num_layers:
            raise IdinspectError(f"config.json: {name} has {len(values)} entries for {self.num_layers} layers; "
                                 "fix the config")
        return values

    @cached_property
    def _uses_rope(self) -> list[bool]:
        flags = self._per_layer("no_rope_layers")
        if any(v not in (0, 1) or isinstance(v, float) for v in flags):
            raise IdinspectError(f"config.json: no_rope_layers is {flags!r}; each entry must be 1 (a RoPE layer) or "
                                 "0 (a layer without RoPE); fix the config")
        return [bool(v) for v in flags]

    def uses_rope(self, site: Site) -> bool:
        """transformers' ``use_rope = config.no_rope_layers[i]`` (the list names the RoPE layers with 1)."""
        return self._uses_rope[site.layer]

    @cached_property
    def _rope(self) -> Positional:
        """Interleaved pairs, cos and sin as ``torch.polar`` forms them (complex RoPE)."""
        rope = rope_positional(self.config, "interleaved")
        return dataclasses.replace(rope, rotary=dataclasses.replace(rope.rotary, polar=True))

    def positional(self, site: Site | None = None) -> Positional:
        return self._rope if self.uses_rope(site if site is not None else self.sites[0]) else Positional("none")

    def sliding_window(self, site: Site) -> int | None:
        return None

    def attention_chunk(self, site: Site) -> int | None:
        if self._per_layer("layer_types")[site.layer] != "chunked_attention":
            return None
        chunk = self.config.attention_chunk_size
        if chunk is None:
            raise IdinspectError(f"config.json: layer {site.layer} is a chunked_attention layer but "
                                 "attention_chunk_size is null; set it or make the layer full_attention")
        return int(chunk)

    def qk_norm(self, site: Site) -> QKNorm | None:
        if not (self.uses_rope(site) and self.config.use_qk_norm):
            return None
        return QKNorm("l2", "head", float(self.config.rms_norm_eps), after_rope=True)

    def query_temperature(self, site: Site) -> QueryTemperature | None:
        if self.uses_rope(site) or not self.config.attn_temperature_tuning:
            return None
        return QueryTemperature(float(self.config.floor_scale), float(self.config.attn_scale))

    @contextlib.contextmanager
    def exact_float64(self) -> Iterator[None]:
        """Llama 4's norms (x.float()) and its complex RoPE (complex64) compute in float32; within this
        context a float64 input stays float64."""
        from transformers.models.llama4 import modeling_llama4 as m

        original = m.apply_rotary_emb

        def apply_rotary_emb(xq, xk, freqs_cis):
            if xq.dtype != torch.float64:
                return original(xq, xk, freqs_cis)
            freqs = freqs_cis.to(torch.complex128)[:, :, None, :]
            q, k = (torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous()) for x in (xq, xk))
            return torch.view_as_real(q * freqs).flatten(3), torch.view_as_real(k * freqs).flatten(3)

        m.apply_rotary_emb = apply_rotary_emb
        try:
            with exact_norms({m.Llama4TextWeightlessRMSNorm: lambda mod, x: rms(x, mod.variance_epsilon),
                              m.Llama4TextRMSNorm: weighted_rms}):
                yield
        finally:
            m.apply_rotary_emb = original

    def twin_settings(self, hf_config, shape: dict) -> dict:
        """One layer of each kind the model has (RoPE first, then NoPE), with the model's own settings."""
        kinds = sorted({bool(v) for v in hf_config.no_rope_layers[:hf_config.num_hidden_layers]}, reverse=True)
        chunk = hf_config.attention_chunk_size
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
                "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"], "intermediate_size": 16,
                "intermediate_size_mlp": 16, "num_local_experts": 1, "num_hidden_layers": len(kinds),
                "no_rope_layers": [int(k) for k in kinds],
                "layer_types": ["chunked_attention" if k and chunk is not None else "full_attention" for k in kinds],
                "attention_chunk_size": chunk, "attention_bias": hf_config.attention_bias,
                "use_qk_norm": hf_config.use_qk_norm, "attn_temperature_tuning": hf_config.attn_temperature_tuning,
                "floor_scale": hf_config.floor_scale, "attn_scale": hf_config.attn_scale,
                # the count holds for every eps > 0; a small one keeps the twin's nearly-null band
                # (~eps / mean square) well below the proof's 1e-6 cut
                "rms_norm_eps": min(hf_config.rms_norm_eps, 1e-6),
                "max_position_embeddings": hf_config.max_position_embeddings,
                "rope_parameters": dict(hf_config.rope_parameters)}


VISION_REASON = ("Llama 4's vision tower: each head is rotated by a 2-D RoPE (half the planes by the patch's column, "
                 "half by its row, the class token unrotated), a positional scheme the canonical form does not describe")


class Llama4Adapter(TextOfMultimodal, Llama4TextAdapter):
    """Llama4ForConditionalGeneration: the text model (``language_model.model.layers.i``) read as
    ``llama4_text`` from config.json's ``text_config``; the vision tower's attention is listed as not
    analysed (:data:`VISION_REASON`), never counted silently."""

    family = "llama4"
    model_types = ("llama4",)
    text_model_type = "llama4_text"
    vision_tower = "vision_model"
    vision_reason = VISION_REASON
    not_analysed_tensors = {
        "**vision_model.**": "the vision tower (its attention is listed as not analysed; the whole-model "
                             "count covers the text model only)",
        "**multi_modal_projector.**": "the projector from the vision tower into the text model",
    }

    #: A vision-tower tensor: (everything up to the tower, "self_attn" module of a layer or None).
    vision_modules = re.compile(r"^((?:.+\.)?vision_model\.)(?:(model\.layers\.\d+\.self_attn)\.)?")

    def twin_settings(self, hf_config, shape: dict) -> dict:
        text = {**super().twin_settings(hf_config.text_config, shape), "vocab_size": 32, "pad_token_id": None,
                "bos_token_id": None, "eos_token_id": None}
        vision = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                  "image_size": 16, "patch_size": 8, "vision_output_dim": 8, "projector_input_dim": 8,
                  "projector_output_dim": 8}
        return {"text_config": text, "vision_config": vision}


ADAPTERS = (Llama4TextAdapter, Llama4Adapter)
