"""Helium (Kyutai): the generic q/k/v/o decoder with q/k/v biases under ``attention_bias``, no o_proj
bias, and RoPE on interleaved pairs (2i, 2i + 1) of every head (HeliumAttention, apply_rotary_pos_emb).

An example of an adapter that lives outside idinspect: it subclasses idinspect's own generic decoder
and says only what differs, and the entry point in pyproject.toml hands it to idinspect's registry."""

from __future__ import annotations

from functools import cached_property

from idinspect.adapters.base import rope_positional
from idinspect.adapters.qkvo_decoder import QKVODecoderAdapter
from idinspect.layer.attention_layer import Positional


class HeliumAdapter(QKVODecoderAdapter):
    family = "helium"
    model_types = ("helium",)

    def _biases(self) -> tuple[bool, bool]:
        return bool(self.config.attention_bias), False

    @cached_property
    def _rope(self) -> Positional:
        return rope_positional(self.config, "interleaved")
