"""Llama, Mistral and Qwen2: unfused q/k/v/o_proj with GQA, RoPE rotate_half over the head.

Layer i (prefix '' for LlamaModel saves, 'model.' for *ForCausalLM):
    layers.i.self_attn.q_proj.weight [H*hd, d]     bias [H*hd] (Llama: attention_bias; Qwen2: always)
    layers.i.self_attn.k_proj.weight [G*hd, d]     bias [G*hd] (same)
    layers.i.self_attn.v_proj.weight [G*hd, d]     bias [G*hd] (same)
    layers.i.self_attn.o_proj.weight [d, H*hd]     bias [d]    (Llama: attention_bias; Qwen2: never)
hd is config.head_dim when set (not always d / H). Query head h reads kv head h // (H / G).
RoPE inverse frequencies come from transformers' rope-init functions for the config (idinspect.sources.rope_config).
"""

from __future__ import annotations

import torch

from ..layer.attention_layer import AttentionLayer, Positional
from ..errors import IdinspectError, one_line
from ..sources.rope_config import rotary_spec_from_config
from .base import (Adapter, ConfigSpec, heads_from_bias, heads_from_linear_cols, heads_from_linear_rows,
                   linear_cols_from_heads, linear_rows_from_heads)

_ATTN = "self_attn"


class LlamaAdapter(Adapter):
    family = "llama"
    configs = {
        "llama": ConfigSpec("LlamaConfig", {
            "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": None,
            "head_dim": None, "attention_bias": False, "max_position_embeddings": 2048, "rope_parameters": None}),
        "mistral": ConfigSpec("MistralConfig", {
            "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": None, "sliding_window": 4096, "max_position_embeddings": 4096 * 32, "rope_parameters": None}),
        "qwen2": ConfigSpec("Qwen2Config", {
            "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
            "max_position_embeddings": 32768, "use_sliding_window": False, "sliding_window": 4096,
            "max_window_layers": 28, "layer_types": None, "rope_parameters": None}),
    }
    layer_container = "layers"
    probe_suffix = f"{_ATTN}.q_proj.weight"
    buffer_suffixes = (".rotary_emb.inv_freq",)

    @property
    def n_kv_heads(self) -> int:
        return int(getattr(self.config, "num_key_value_heads", None) or self.n_heads)

    @property
    def head_dim(self) -> int:
        return int(getattr(self.config, "head_dim", None) or self.hidden_size // self.n_heads)

    def _biases(self) -> tuple[bool, bool]:
        """(q/k/v have biases, o_proj has a bias), as the modeling code decides."""
        if self.config.model_type == "qwen2":
            return True, False
        bias = bool(getattr(self.config, "attention_bias", False))
        return bias, bias

    def _names(self, i: int) -> dict[str, str]:
        qkv_bias, o_bias = self._biases()
        names = {f"W_{r}": self.key(i, f"{_ATTN}.{p}_proj.weight") for r, p in zip("QKVO", "qkvo")}
        if qkv_bias:
            names.update({f"b_{r}": self.key(i, f"{_ATTN}.{p}_proj.bias") for r, p in zip("QKV", "qkv")})
        if o_bias:
            names["b_O"] = self.key(i, f"{_ATTN}.o_proj.bias")
        return names

    def attention_keys(self, i: int) -> list[str]:
        return list(self._names(i).values())

    def _make_positional(self) -> Positional:
        try:
            return Positional("rope", rotary=rotary_spec_from_config(self.config, "half"))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise IdinspectError(f"config.json: RoPE settings that transformers cannot use ({type(exc).__name__}: "
                                 f"{one_line(exc)}); fix rope_parameters / rope_scaling") from None

    def _sliding_window(self, i: int) -> int | None:
        """Layer i's window, as the config class resolves it (Qwen2Config.__post_init__: the window only
        with use_sliding_window, and by default on layers i >= max_window_layers)."""
        cfg = self.config
        window = getattr(cfg, "sliding_window", None)
        if cfg.model_type == "mistral":
            return window
        layer_types = getattr(cfg, "layer_types", None)
        if cfg.model_type == "qwen2":
            window = window if getattr(cfg, "use_sliding_window", False) else None
            if layer_types is None:
                return window if window is not None and i >= getattr(cfg, "max_window_layers", 28) else None
        if window is not None and layer_types and layer_types[i] == "sliding_attention":
            return window
        return None

    def read_layer(self, i: int) -> AttentionLayer:
        n = self._names(i)
        H, G, hd, d = self.n_heads, self.n_kv_heads, self.head_dim, self.hidden_size
        rows = {"Q": H, "K": G, "V": G}
        t = {}
        for r, count in rows.items():
            t[f"W_{r}"] = heads_from_linear_rows(self._load(n[f"W_{r}"], (count * hd, d)), count, hd)
            if f"b_{r}" in n:
                t[f"b_{r}"] = heads_from_bias(self._load(n[f"b_{r}"], (count * hd,)), count, hd)
        t["W_O"] = heads_from_linear_cols(self._load(n["W_O"], (d, H * hd)), H, hd)
        if "b_O" in n:
            t["b_O"] = self._load(n["b_O"], (d,))
        return AttentionLayer(index=i, **t, scale=hd ** -0.5, causal=True, positional=self.positional(),
                              sliding_window=self._sliding_window(i), tensor_names=n)

    def write_layer(self, layer: AttentionLayer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        n = self._names(layer.index)
        out = {n[f"W_{r}"]: linear_rows_from_heads(getattr(layer, f"W_{r}")) for r in "QKV"}
        out[n["W_O"]] = linear_cols_from_heads(layer.W_O)
        for r in "QKVO":
            if f"b_{r}" in n:
                out[n[f"b_{r}"]] = getattr(layer, f"b_{r}").reshape(-1)
        return {k: self._cast(k, v, dtype) for k, v in out.items()}
