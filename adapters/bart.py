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

from ..errors import IdinspectError
from .base import Adapter, Site
from .layout import Block, Projection


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

    @property
    def num_layers(self) -> int:
        return int(self.config.encoder_layers) + int(self.config.decoder_layers)

    @cached_property
    def sites(self) -> list[Site]:
        """Encoder layers (self), then decoder layers (self, cross), each with its stack and layer number."""
        kb = self._key_bias
        enc_self, dec_self = _block("self", "self_attn", kb), _block("self", "self_attn", kb)
        cross = _block("cross", "encoder_attn", kb)
        return ([Site(f"encoder.layers.{i}", "encoder", i, enc_self) for i in range(int(self.config.encoder_layers))]
                + [Site(f"decoder.layers.{i}", "decoder", i, b)
                   for i in range(int(self.config.decoder_layers)) for b in (dec_self, cross)])

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
