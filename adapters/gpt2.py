"""GPT-2: fused Conv1D c_attn and c_proj, stored [in, out] (y = x W + b), biases on both.

Layer i (prefix '' for base-model saves, 'transformer.' for GPT2LMHeadModel):
    h.i.attn.c_attn.weight [d, 3d]   columns [Q (d) | K (d) | V (d)], heads contiguous in each
    h.i.attn.c_attn.bias   [3d]
    h.i.attn.c_proj.weight [d, d]    rows h*hd:(h+1)*hd are W_O^h (no transpose)
    h.i.attn.c_proj.bias   [d]
``h.i.attn.bias`` / ``h.i.attn.masked_bias`` in old files are causal-mask buffers, not biases.
"""

from __future__ import annotations

import torch

from ..layer.attention_layer import AttentionLayer
from .base import Adapter, ConfigSpec


class GPT2Adapter(Adapter):
    family = "gpt2"
    configs = {
        "gpt2": ConfigSpec("GPT2Config", {
            "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False},
            aliases={"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
                     "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}),
    }
    layer_container = "h"
    probe_suffix = "attn.c_attn.weight"
    buffer_suffixes = (".attn.bias", ".attn.masked_bias")

    def _names(self, i: int) -> dict[str, str]:
        return {
            "c_attn.weight": self.key(i, "attn.c_attn.weight"), "c_attn.bias": self.key(i, "attn.c_attn.bias"),
            "c_proj.weight": self.key(i, "attn.c_proj.weight"), "c_proj.bias": self.key(i, "attn.c_proj.bias"),
        }

    def attention_keys(self, i: int) -> list[str]:
        return list(self._names(i).values())

    def _scale(self, i: int) -> float:
        scale = self.head_dim ** -0.5 if getattr(self.config, "scale_attn_weights", True) else 1.0
        if getattr(self.config, "scale_attn_by_inverse_layer_idx", False):
            scale /= i + 1
        return scale

    def read_layer(self, i: int) -> AttentionLayer:
        n = self._names(i)
        H, hd, d = self.n_heads, self.head_dim, self.hidden_size
        w = self._load(n["c_attn.weight"], (d, 3 * d))
        b = self._load(n["c_attn.bias"], (3 * d,))
        # columns c*d + h*hd + k  ->  [3, H, d, hd]
        W_qkv = w.reshape(d, 3, H, hd).permute(1, 2, 0, 3)
        b_qkv = b.reshape(3, H, hd)
        names = {"W_O": n["c_proj.weight"], "b_O": n["c_proj.bias"]}
        for c, role in enumerate("QKV"):
            names[f"W_{role}"] = f"{n['c_attn.weight']}[:, {c * d}:{(c + 1) * d}]"
            names[f"b_{role}"] = f"{n['c_attn.bias']}[{c * d}:{(c + 1) * d}]"
        return AttentionLayer(
            index=i,
            W_Q=W_qkv[0], W_K=W_qkv[1], W_V=W_qkv[2],
            b_Q=b_qkv[0], b_K=b_qkv[1], b_V=b_qkv[2],
            W_O=self._load(n["c_proj.weight"], (d, d)).reshape(H, hd, d),
            b_O=self._load(n["c_proj.bias"], (d,)),
            scale=self._scale(i), causal=True, positional=self.positional(), tensor_names=names,
        )

    def write_layer(self, layer: AttentionLayer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        n = self._names(layer.index)
        H, d, hd = layer.W_Q.shape
        W = torch.stack([layer.W_Q, layer.W_K, layer.W_V])          # [3, H, d, hd]
        out = {
            n["c_attn.weight"]: W.permute(2, 0, 1, 3).reshape(d, 3 * H * hd),
            n["c_attn.bias"]: torch.stack([layer.b_Q, layer.b_K, layer.b_V]).reshape(-1),
            n["c_proj.weight"]: layer.W_O.reshape(H * hd, d),
            n["c_proj.bias"]: layer.b_O,
        }
        return {k: self._cast(k, v, dtype) for k, v in out.items()}
