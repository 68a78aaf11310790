"""T5, mT5 and UMT5: encoder and decoder stacks of q/k/v/o without biases, no softmax scale, a bucketed
relative-position bias on the self-attention logits.

Layer i of each stack (prefix '' for T5Model and T5ForConditionalGeneration saves):
    encoder.block.i.layer.0.SelfAttention.{q,k,v}.weight [H*d_kv, d]    o.weight [d, H*d_kv]    self
    decoder.block.i.layer.0.SelfAttention.{q,k,v,o}.weight                                      self (causal)
    decoder.block.i.layer.1.EncDecAttention.{q,k,v,o}.weight                                   cross
    {encoder,decoder}.block.0.layer.0.SelfAttention.relative_attention_bias.weight [buckets, H]
The relative bias table lives in layer 0 of each stack and every self-attention layer of that stack
adds the same bias (UMT5: every self-attention layer has its own table, in its own block) (bidirectional buckets in the encoder, past-only in the decoder); cross-attention
has none. Head width d_kv is its own setting (H d_kv need not be d). Scale 1: T5 folds d_kv^-1/2 into
its initialisation. ``T5EncoderModel`` / ``MT5EncoderModel`` saves hold the encoder stack alone
(:mod:`.stacks`): that is what is counted.
"""

from __future__ import annotations

from functools import cached_property

from ..layer.attention_layer import Positional, RelativeBias
from .base import Adapter, Site
from .layout import Block, Projection
from .stacks import stored_stacks

TABLE = "layer.0.SelfAttention.relative_attention_bias.weight"


def _block(kind: str, attn: str) -> Block:
    return Block(kind, tuple(Projection(f"{attn}.{r}", r, bias=False) for r in "qkvo"))


SELF = _block("self", "layer.0.SelfAttention")
CROSS = _block("cross", "layer.1.EncDecAttention")


class T5Adapter(Adapter):
    family = "t5"
    model_types = ("t5", "mt5", "umt5")
    model_tensors = {
        "shared.weight": "embedding",
        "(encoder|decoder).embed_tokens.weight": "embedding",
        "(encoder|decoder).block.{n}.layer.{n}.layer_norm.weight": "norm",
        "(encoder|decoder).block.{n}.layer.{n}.DenseReluDense.(wi|wi_0|wi_1|wo).weight": "mlp",
        "(encoder|decoder).final_layer_norm.weight": "norm",
    }
    layer_container = "encoder.block"
    config_names = {"hidden_size": "d_model", "num_attention_heads": "num_heads", "num_hidden_layers": "num_layers",
                    "head_dim": "d_kv"}
    hf_modules = {"self": ("layer.0.SelfAttention", None), "cross": ("layer.1.EncDecAttention", None)}

    @property
    def head_dim(self) -> int:
        return int(self.config.d_kv)

    @cached_property
    def stacks(self) -> tuple[str, ...]:
        """"encoder" and "decoder", or the one a ``*EncoderModel`` save holds (:mod:`.stacks`)."""
        first = {stack: f"{stack}.block.0.{SELF.projections[0].weight_name}" for stack in ("encoder", "decoder")}
        return stored_stacks(self.config, self.reader.keys(), first)

    @property
    def _encoder_layers(self) -> int:
        return int(self.config.num_layers) if "encoder" in self.stacks else 0

    @property
    def _decoder_layers(self) -> int:
        return int(self.optional("num_decoder_layers") or self.config.num_layers) if "decoder" in self.stacks else 0

    @property
    def num_layers(self) -> int:
        return self._encoder_layers + self._decoder_layers

    @cached_property
    def sites(self) -> list[Site]:
        """Encoder layers (self), then decoder layers (self, cross), of the stacks stored."""
        return ([Site(f"encoder.block.{i}", "encoder", i, SELF) for i in range(self._encoder_layers)]
                + [Site(f"decoder.block.{i}", "decoder", i, b) for i in range(self._decoder_layers) for b in (SELF, CROSS)])

    def scale(self, site: Site) -> float:
        return 1.0

    def causal(self, site: Site) -> bool:
        return site.stack == "decoder"

    @property
    def _table_per_layer(self) -> bool:
        """UMT5: every self-attention layer has its own table (T5 and mT5: layer 0's, shared by the stack)."""
        return self.config.model_type == "umt5"

    def _table_name(self, stack: str, layer: int) -> str:
        return f"{self.prefix}{stack}.block.{layer if self._table_per_layer else 0}.{TABLE}"

    def positional_keys(self) -> list[str]:
        return list(dict.fromkeys(self._table_name(s.stack, s.layer) for s in self.sites if s.block.kind == "self"))

    def positional(self, site: Site | None = None) -> Positional:
        if site is None:
            return Positional("relative")
        if site.block.kind == "cross":
            return Positional("none")
        name = self._table_name(site.stack, site.layer)
        table = self._load(name, (int(self.config.relative_attention_num_buckets), self.n_heads))
        return Positional("relative", relative=RelativeBias(
            table=table, bidirectional=site.stack == "encoder",
            max_distance=int(self.config.relative_attention_max_distance),
            owned=self._table_per_layer or site.layer == 0, tensor_name=name))

    @property
    def twin_class(self) -> str | None:
        """An encoder-only save's twin is the encoder alone too (T5Model would prove a decoder it lacks)."""
        return self.architecture if self.stacks == ("encoder",) else None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        # 8 buckets over distance 8: the twin's 8-token sequences reach every bucket of both stacks
        return {"d_model": shape["hidden_size"], "num_heads": shape["heads"], "d_kv": shape["head_dim"],
                "num_layers": 1, "num_decoder_layers": 1, "d_ff": 16, "relative_attention_num_buckets": 8,
                "relative_attention_max_distance": 8, "decoder_start_token_id": 0,
                "feed_forward_proj": getattr(hf_config, "feed_forward_proj", "relu")}


ADAPTERS = (T5Adapter,)
