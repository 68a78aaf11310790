"""Tiny StableLM variants for the generic tests (see tests/support/tiny.py): partial RoPE, optional q/k/v biases, GQA."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _stablelm(**kw):
    return tf.StableLmConfig(**{**dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, num_key_value_heads=2, vocab_size=64,
                                       max_position_embeddings=64), **kw})


VARIANTS = {
    # head_dim 8, StableLmConfig's default partial_rotary_factor 0.25: 2 rotated dims
    "stablelm": Variant(lambda: _stablelm(), tf.StableLmForCausalLM, ROPE_LM),
    # StableLM-2 style: q/k/v biases, GQA, half rotated, parallel residual
    "stablelm-qkv-bias-gqa": Variant(lambda: _stablelm(num_attention_heads=4, num_key_value_heads=2, use_qkv_bias=True,
                                                       use_parallel_residual=True,
                                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                        "partial_rotary_factor": 0.5}),
                                     tf.StableLmForCausalLM, ROPE_LM),
}
# StableLM-2-12B style: per-head LayerNorm (no bias) on queries and keys, GQA, partial RoPE
VARIANTS["stablelm-qk-layernorm"] = Variant(lambda: _stablelm(num_attention_heads=4, num_key_value_heads=2,
                                                              qk_layernorm=True, layer_norm_eps=1e-7,
                                                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                               "partial_rotary_factor": 0.5}),
                                            tf.StableLmForCausalLM, ROPE_LM)
