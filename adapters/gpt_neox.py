"""GPT-NeoX (Pythia, GPT-NeoX-20B): fused ``query_key_value`` laid out per head [H, 3, hd], ``dense``,
biases on both with ``attention_bias`` (default true), multi-head only; rotate_half RoPE over the
first int(head_dim * rotary_pct) dims of each head.

Layer i (prefix 'gpt_neox.' for GPTNeoXForCausalLM):
    layers.i.attention.query_key_value.weight [3d, d]   rows: head h's q, k, v (hd each) adjacent
    layers.i.attention.query_key_value.bias   [3d]
    layers.i.attention.dense.weight           [d, d]   bias [d]
Old checkpoints also store ``attention.bias`` / ``attention.masked_bias`` (causal-mask buffers) and
``attention.rotary_emb.inv_freq``. ``use_parallel_residual`` changes the block's residual wiring,
not the attention. RoPE: ``rotary_pct`` / ``rotary_emb_base`` in legacy config.json, standardised by
GPTNeoXConfig into rope_parameters (partial_rotary_factor, rope_theta).
"""

from __future__ import annotations

from functools import cached_property

from .base import Adapter
from .layout import Block, Projection
from .qkvo_decoder import QKVODecoderAdapter


class GPTNeoXAdapter(QKVODecoderAdapter):
    family = "gpt_neox"
    model_types = ("gpt_neox",)
    model_tensors = {
        "embed_in.weight": "embedding",
        "embed_out.weight": "head",
        "layers.{n}.(input_layernorm|post_attention_layernorm).(weight|bias)": "norm",
        "layers.{n}.mlp.(dense_h_to_4h|dense_4h_to_h).(weight|bias)": "mlp",
        "final_layer_norm.(weight|bias)": "norm",
    }
    partial_rotary = True
    buffer_suffixes = (".attention.bias", ".attention.masked_bias")
    hf_modules = {"self": ("attention", None)}

    # multi-head, head width d / H: the generic sizes, not Llama's num_key_value_heads / head_dim keys
    n_kv_heads = Adapter.n_kv_heads
    head_dim = Adapter.head_dim

    @cached_property
    def block(self) -> Block:
        bias = bool(self.config.attention_bias)
        return Block("self", (Projection("attention.query_key_value", "qkv", bias, layout="per_head"),
                              Projection("attention.dense", "o", bias)))

    def sliding_window(self, site):
        return None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "intermediate_size": 16,
                "attention_bias": hf_config.attention_bias, "use_parallel_residual": hf_config.use_parallel_residual,
                "max_position_embeddings": hf_config.max_position_embeddings,
                "rope_parameters": self.twin_rope(hf_config.rope_parameters, shape)}


ADAPTERS = (GPTNeoXAdapter,)
