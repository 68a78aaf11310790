"""BART, mBART, Marian and Whisper: an encoder stack and a decoder stack, unfused q/k/v/out_proj.

Layer i of each stack (prefix '' for *Model saves, 'model.' for *ForConditionalGeneration / MarianMTModel):
    encoder.layers.i.self_attn.{q,k,v,out}_proj.{weight [d, d], bias [d]}        stack "encoder", self
    decoder.layers.i.self_attn.{q,k,v,out}_proj.{weight [d, d], bias [d]}        stack "decoder", self (causal)
    decoder.layers.i.encoder_attn.{q,k,v,out}_proj.{weight [d, d], bias [d]}     stack "decoder", cross
Whisper's k_proj has no bias (in both kinds of block); every other projection has one. Blocks are
numbered encoder first, then decoder (self, cross per layer). Positions are absolute embeddings
(learned or sinusoidal) added to the input; nothing positional inside attention; the softmax
scale is d_k^-1/2. Sizes: d_model, encoder/decoder_attention_heads (must be equal: one head count
per model), encoder_layers, decoder_layers.
"""

from __future__ import annotations

from functools import cached_property

import torch

from ..errors import IdinspectError
from .base import Adapter, Site
from .layout import Block, Projection
from .stacks import stored_stacks


def _block(kind: str, attn: str, key_bias: bool) -> Block:
    return Block(kind, (Projection(f"{attn}.q_proj", "q"), Projection(f"{attn}.k_proj", "k", key_bias),
                        Projection(f"{attn}.v_proj", "v"), Projection(f"{attn}.out_proj", "o")))


class BartAdapter(Adapter):
    family = "bart"
    model_types = ("bart", "mbart", "marian", "whisper")
    model_tensors = {
        "shared.weight": "embedding",
        "(encoder|decoder).embed_tokens.weight": "embedding",
        "(encoder|decoder).embed_positions.weight": "position",
        "encoder.(conv1|conv2).(weight|bias)": "embedding",   # Whisper's audio stem
        "(encoder|decoder).(layer_norm|layernorm_embedding).(weight|bias)": "norm",
        "(encoder|decoder).layers.{n}.(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm).(weight|bias)": "norm",
        "(encoder|decoder).layers.{n}.(fc1|fc2).(weight|bias)": "mlp",
        "final_logits_bias": "head",
        "proj_out.weight": "head",
        "projector.(weight|bias)": "head",        # WhisperForAudioClassification's, before its classifier
    }
    layer_container = "encoder.layers"
    config_names = {"hidden_size": "d_model", "num_attention_heads": "encoder_attention_heads",
                    "num_hidden_layers": "encoder_layers"}
    hf_modules = {"self": ("self_attn", None), "cross": ("encoder_attn", None)}

    def __init__(self, config, reader):
        enc, dec = config.encoder_attention_heads, config.decoder_attention_heads
        if enc != dec:
            raise IdinspectError(f"config.json: encoder_attention_heads={enc} and decoder_attention_heads={dec} "
                                 "differ; idinspect reads one head count per model and refuses rather than miscount")
        super().__init__(config, reader)

    @property
    def _key_bias(self) -> bool:
        return self.config.model_type != "whisper"

    @cached_property
    def stacks(self) -> tuple[str, ...]:
        """"encoder" and "decoder", or the one a ``*ForCausalLM`` (decoder) or
        ``WhisperForAudioClassification`` (encoder) save holds (:mod:`.stacks`)."""
        first = {stack: f"{stack}.layers.0.self_attn.q_proj.weight" for stack in ("encoder", "decoder")}
        return stored_stacks(self.config, self.reader.keys(), first)

    @property
    def _encoder_layers(self) -> int:
        return int(self.config.encoder_layers) if "encoder" in self.stacks else 0

    @property
    def _decoder_layers(self) -> int:
        return int(self.config.decoder_layers) if "decoder" in self.stacks else 0

    @property
    def num_layers(self) -> int:
        return self._encoder_layers + self._decoder_layers

    @cached_property
    def sites(self) -> list[Site]:
        """Encoder layers (self), then decoder layers (self, cross), of the stacks stored, each with its
        stack and layer number. A decoder saved alone (``BartForCausalLM``, the decoder of a
        VisionEncoderDecoder) keeps its cross-attention blocks: it attends to the states it is given."""
        kb = self._key_bias
        enc_self, dec_self = _block("self", "self_attn", kb), _block("self", "self_attn", kb)
        cross = _block("cross", "encoder_attn", kb)
        return ([Site(f"encoder.layers.{i}", "encoder", i, enc_self) for i in range(self._encoder_layers)]
                + [Site(f"decoder.layers.{i}", "decoder", i, b)
                   for i in range(self._decoder_layers) for b in (dec_self, cross)])

    def example_inputs(self, hf_model, input_ids: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """A decoder saved alone runs its cross-attention blocks on N(0, 1) encoder states of T + 3 positions."""
        kw = super().example_inputs(hf_model, input_ids, generator)
        if self.stacks == ("decoder",) and "encoder_hidden_states" not in kw:
            B, T = input_ids.shape
            kw["encoder_hidden_states"] = torch.randn(B, T + 3, self.hidden_size, generator=generator,
                                                      dtype=next(hf_model.parameters()).dtype)
        return kw

    @property
    def twin_class(self) -> str | None:
        """A one-stack save's twin is that stack's model too (BartModel would prove a stack it lacks)."""
        return self.architecture if len(self.stacks) == 1 else None

    def causal(self, site: Site) -> bool:
        return site.stack == "decoder"

    def twin_settings(self, hf_config, shape: dict) -> dict:
        kw = {"d_model": shape["hidden_size"], "encoder_attention_heads": shape["heads"],
              "decoder_attention_heads": shape["heads"], "encoder_layers": 1, "decoder_layers": 1,
              "encoder_ffn_dim": 16, "decoder_ffn_dim": 16, "decoder_start_token_id": 0}
        if hf_config.model_type == "whisper":
            kw.update(num_mel_bins=4, max_source_positions=8, max_target_positions=16, suppress_tokens=None,
                      begin_suppress_tokens=None)
        else:
            kw["max_position_embeddings"] = 16
        return kw


ADAPTERS = (BartAdapter,)
