"""Tiny Qwen3 / Qwen3-MoE variants for the generic tests (see tests/support/tiny.py): per-head RMS q/k norm
with one gain vector shared by all heads, before RoPE."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})
_QWEN3 = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=4, vocab_size=64, max_position_embeddings=64)

VARIANTS = {
    # the shape: d=16, H=4, G=2, d_k=4
    "qwen3": Variant(lambda: tf.Qwen3Config(**_QWEN3), tf.Qwen3ForCausalLM, ROPE_LM),
    "qwen3-bias-window": Variant(lambda: tf.Qwen3Config(**{**_QWEN3, "attention_bias": True, "head_dim": 8,
                                                           "use_sliding_window": True, "sliding_window": 4,
                                                           "max_window_layers": 1}),
                                 tf.Qwen3ForCausalLM, ROPE_LM),
    "qwen3-moe": Variant(lambda: tf.Qwen3MoeConfig(**{**_QWEN3, "num_key_value_heads": 1, "num_experts": 2,
                                                      "num_experts_per_tok": 1, "moe_intermediate_size": 8}),
                         tf.Qwen3MoeForCausalLM, ROPE_LM),
}
