"""Nemotron (NVIDIA Nemotron-3/4 and Minitron): the generic q/k/v/o decoder (biases on all four with
``attention_bias``), rotate_half RoPE over only the first part of each head (``partial_rotary_factor``,
0.5 by default), LayerNorm1P norms (gain 1 + w and a bias; not folded by ``compare``: ``pre_norm``
empty, as for Gemma's 1 + w) and a squared-ReLU MLP without a gate (``mlp.up_proj``, ``mlp.down_proj``).
"""

from __future__ import annotations

from .qkvo_decoder import QKVODecoderAdapter


class NemotronAdapter(QKVODecoderAdapter):
    family = "nemotron"
    model_types = ("nemotron",)
    model_tensors = {**QKVODecoderAdapter.model_tensors,
                     "layers.{n}.(input_layernorm|post_attention_layernorm).bias": "norm", "norm.bias": "norm"}
    pre_norm = ()
    partial_rotary = True


ADAPTERS = (NemotronAdapter,)
