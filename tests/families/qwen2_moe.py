"""Tiny Qwen2-MoE variants for the generic tests (see tests/support/tiny.py): Qwen2 attention, MoE MLPs not read."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _moe(**kw):
    return tf.Qwen2MoeConfig(**{**dict(hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, vocab_size=64, max_position_embeddings=64, num_experts=2,
                                       num_experts_per_tok=1, moe_intermediate_size=8,
                                       shared_expert_intermediate_size=8), **kw})


VARIANTS = {
    "qwen2-moe": Variant(lambda: _moe(), tf.Qwen2MoeForCausalLM, ROPE_LM),
    # no q/k/v biases; layer 0 slides (window 4), layer 1 is full
    "qwen2-moe-sliding-no-bias": Variant(lambda: _moe(qkv_bias=False, use_sliding_window=True, sliding_window=4,
                                                      max_window_layers=2), tf.Qwen2MoeForCausalLM, ROPE_LM),
}
