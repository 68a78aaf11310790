"""Seed-OSS (ByteDance): the generic q/k/v/o decoder with separate bias switches, ``attention_bias``
for q/k/v and ``attention_out_bias`` for o_proj (SeedOssAttention)."""

from __future__ import annotations

from .qkvo_decoder import QKVODecoderAdapter


class SeedOssAdapter(QKVODecoderAdapter):
    family = "seed_oss"
    model_types = ("seed_oss",)

    def _biases(self) -> tuple[bool, bool]:
        return bool(self.config.attention_bias), bool(self.config.attention_out_bias)

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {**super().twin_settings(hf_config, shape), "attention_out_bias": hf_config.attention_out_bias}


ADAPTERS = (SeedOssAdapter,)
