"""ModernBERT: fused Wqkv [Q | K | V], RoPE rotate_half with a theta per layer type, local layers
with a bidirectional sliding window. transformers rotates q and k in float32 even in a float64
model; the proofs patch that (:meth:`ModernBertAdapter.exact_float64`).

Layer i (prefix 'model.' for ModernBertForMaskedLM, '' for ModernBertModel saves):
    layers.i.attn.Wqkv.weight [3d, d]   rows [Q (d) | K (d) | V (d)], heads contiguous   bias [3d] (attention_bias)
    layers.i.attn.Wo.weight   [d, d]                                                     bias [d]  (attention_bias)
layer_types[i] is "full_attention" (theta rope_parameters["full_attention"]) or "sliding_attention"
(its own theta; any RoPE type transformers knows, by its own init function; key j visible from query i iff |i - j| <= local_attention // 2). Bidirectional.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cached_property

import torch

from ..errors import IdinspectError
from ..layer.attention_layer import Positional
from ..sources.rope_config import rotary_spec_for_layer_type, rotary_spec_from_config
from .base import Adapter, Site
from .layout import Block, Projection


class _LayerRope:
    """The settings transformers' default RoPE reads, with one layer type's ``rope_parameters``."""

    def __init__(self, head_dim: int, params: dict):
        self.head_dim = head_dim
        self.hidden_size, self.num_attention_heads = head_dim, 1
        self.rope_parameters = params


class ModernBertAdapter(Adapter):
    family = "modernbert"
    pre_norm = ("attn_norm.weight",)
    first_block_norm = "embeddings.norm.weight"
    model_types = ("modernbert",)
    model_tensors = {
        "embeddings.tok_embeddings.weight": "embedding",
        "embeddings.norm.(weight|bias)": "norm",
        "layers.{n}.(attn_norm|mlp_norm).(weight|bias)": "norm",
        "layers.{n}.mlp.(Wi|Wo).(weight|bias)": "mlp",
        "final_norm.(weight|bias)": "norm",
        "head.(dense|norm).(weight|bias)": "head",
        "decoder.(weight|bias)": "head",
    }
    layer_container = "layers"
    hf_modules = {"self": ("attn", None)}

    @cached_property
    def block(self) -> Block:
        bias = bool(self.config.attention_bias)
        return Block("self", (Projection("attn.Wqkv", "qkv", bias), Projection("attn.Wo", "o", bias)))

    def _layer_type(self, site: Site) -> str:
        return self.config.layer_types[site.layer]

    @cached_property
    def _rope(self) -> dict[str, Positional]:
        """One RoPE per layer type, as ModernBertRotaryEmbedding computes it: the default type from that
        type's theta, any other (linear, dynamic, yarn, ...) by transformers' own init function."""
        out = {}
        for layer_type, params in (self.config.rope_parameters or {}).items():
            if not isinstance(params, dict):
                raise IdinspectError(f"config.json: ModernBERT rope_parameters[{layer_type!r}] is {params!r}, not "
                                     "a dict of RoPE settings; fix the config")
            if params.get("rope_type", "default") == "default":
                spec = rotary_spec_from_config(_LayerRope(self.head_dim, params), "half")
            else:
                try:
                    spec = rotary_spec_for_layer_type(self.config, layer_type, "half")
                except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
                    raise IdinspectError(f"config.json: ModernBERT rope_parameters[{layer_type!r}] ({params!r}) is not "
                                         f"usable by transformers ({type(exc).__name__}: {exc}); fix the config") from None
            out[layer_type] = Positional("rope", rotary=spec)
        return out

    def positional(self, site: Site | None = None) -> Positional:
        layer_type = self._layer_type(site) if site is not None else "full_attention"
        if layer_type not in self._rope:
            raise IdinspectError(f"config.json: no rope_parameters for ModernBERT layer type {layer_type!r}")
        return self._rope[layer_type]

    def causal(self, site: Site) -> bool:
        return False

    def sliding_window(self, site: Site) -> int | None:
        if self._layer_type(site) != "sliding_attention":
            return None
        return int(self.config.local_attention) // 2 + 1

    @contextlib.contextmanager
    def exact_float64(self) -> Iterator[None]:
        """transformers' ModernBERT rotates q and k in float32 (``q.float()``) even for a float64 model;
        within this context a float64 q and k are rotated in float64 (cos and sin stay as computed)."""
        from transformers.models.modernbert import modeling_modernbert as mb

        original = mb.apply_rotary_pos_emb

        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            if q.dtype != torch.float64:
                return original(q, k, cos, sin, unsqueeze_dim)
            cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
            return q * cos + mb.rotate_half(q) * sin, k * cos + mb.rotate_half(k) * sin

        mb.apply_rotary_pos_emb = apply_rotary_pos_emb
        try:
            yield
        finally:
            mb.apply_rotary_pos_emb = original

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "intermediate_size": 16,
                "attention_bias": hf_config.attention_bias, "layer_types": list(hf_config.layer_types[:1]),
                "rope_parameters": dict(hf_config.rope_parameters), "local_attention": hf_config.local_attention,
                "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": None, "eos_token_id": None,
                "cls_token_id": None, "sep_token_id": None}


ADAPTERS = (ModernBertAdapter,)
