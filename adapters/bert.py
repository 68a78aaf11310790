"""BERT and RoBERTa: unfused nn.Linear query/key/value and output.dense, all four biases.

Layer i (prefix '' for base-model saves such as all-MiniLM-L6-v2, 'bert.' / 'roberta.' for task models):
    encoder.layer.i.attention.self.{query,key,value}.{weight [d, d], bias [d]}
    encoder.layer.i.attention.output.dense.{weight [d, d], bias [d]}
Positions are learned absolute embeddings added to the input; nothing positional inside attention.
"""

from __future__ import annotations

import torch

from ..layer.attention_layer import AttentionLayer
from .base import (Adapter, ConfigSpec, heads_from_bias, heads_from_linear_cols, heads_from_linear_rows,
                   linear_cols_from_heads, linear_rows_from_heads)

_SELF = "attention.self"
_OUT = "attention.output.dense"


class BertAdapter(Adapter):
    family = "bert"
    configs = {
        model_type: ConfigSpec(class_name, {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                                            "is_decoder": False, "max_position_embeddings": 512})
        for model_type, class_name in (("bert", "BertConfig"), ("roberta", "RobertaConfig"))
    }
    layer_container = "encoder.layer"
    probe_suffix = f"{_SELF}.query.weight"

    def _names(self, i: int) -> dict[str, str]:
        return {
            "W_Q": self.key(i, f"{_SELF}.query.weight"), "b_Q": self.key(i, f"{_SELF}.query.bias"),
            "W_K": self.key(i, f"{_SELF}.key.weight"), "b_K": self.key(i, f"{_SELF}.key.bias"),
            "W_V": self.key(i, f"{_SELF}.value.weight"), "b_V": self.key(i, f"{_SELF}.value.bias"),
            "W_O": self.key(i, f"{_OUT}.weight"), "b_O": self.key(i, f"{_OUT}.bias"),
        }

    def attention_keys(self, i: int) -> list[str]:
        return list(self._names(i).values())

    def read_layer(self, i: int) -> AttentionLayer:
        n = self._names(i)
        H, hd, d = self.n_heads, self.head_dim, self.hidden_size
        qkv = {}
        for role in "QKV":
            qkv[f"W_{role}"] = heads_from_linear_rows(self._load(n[f"W_{role}"], (H * hd, d)), H, hd)
            qkv[f"b_{role}"] = heads_from_bias(self._load(n[f"b_{role}"], (H * hd,)), H, hd)
        return AttentionLayer(
            index=i, **qkv,
            W_O=heads_from_linear_cols(self._load(n["W_O"], (d, H * hd)), H, hd),
            b_O=self._load(n["b_O"], (d,)),
            scale=hd ** -0.5,
            causal=bool(getattr(self.config, "is_decoder", False)),
            positional=self.positional(),
            tensor_names=n,
        )

    def write_layer(self, layer: AttentionLayer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        n = self._names(layer.index)
        out = {}
        for role in "QKV":
            out[n[f"W_{role}"]] = linear_rows_from_heads(getattr(layer, f"W_{role}"))
            out[n[f"b_{role}"]] = getattr(layer, f"b_{role}").reshape(-1)
        out[n["W_O"]] = linear_cols_from_heads(layer.W_O)
        out[n["b_O"]] = layer.b_O
        return {k: self._cast(k, v, dtype) for k, v in out.items()}
