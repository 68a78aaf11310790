"""OLMo (the first): the generic q/k/v/o decoder (biases with ``attention_bias``) whose LayerNorms have
no parameters at all (OlmoLayerNorm: no gain, no bias), so no norm gain is stored or folded
(``pre_norm`` empty). ``clip_qkv`` (clamping q, k, v) is a nonlinearity between the weights and the
score: refused by name, as for OLMoE."""

from __future__ import annotations

from ..errors import IdinspectError
from .qkvo_decoder import QKVODecoderAdapter


class OlmoAdapter(QKVODecoderAdapter):
    family = "olmo"
    model_types = ("olmo",)
    pre_norm = ()

    def __init__(self, config, reader):
        super().__init__(config, reader)
        if self.optional("clip_qkv") is not None:
            raise IdinspectError(f"config.json: clip_qkv is {self.optional('clip_qkv')} (olmo clamps q, k and v, a "
                                 "nonlinearity between the weights and the score that idinspect does not model); "
                                 "idinspect refuses rather than miscount")

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {**super().twin_settings(hf_config, shape), "clip_qkv": None}


ADAPTERS = (OlmoAdapter,)
