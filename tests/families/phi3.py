"""Tiny Phi-3 variants for the generic tests (see tests/support/tiny.py): fused qkv_proj [Q|K|V], partial RoPE."""

import transformers as tf

from tests.support.tiny import Variant

# intermediate_size 16: with N(0, 0.5) weights a wider MLP puts the float32 logits' own rounding noise
# (float32 vs float64 forward of the same weights) near the 1e-6 bound of the float32 export test

ROPE_LM = frozenset({"rope", "lm"})


def _phi3(**kw):
    return tf.Phi3Config(**{**dict(hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=64, max_position_embeddings=64,
                                   pad_token_id=0, bos_token_id=1, eos_token_id=2), **kw})


VARIANTS = {
    "phi3": Variant(lambda: _phi3(), tf.Phi3ForCausalLM, ROPE_LM),
    # MHA with a sliding window on every layer
    "phi3-mha-sliding": Variant(lambda: _phi3(num_key_value_heads=4, sliding_window=4), tf.Phi3ForCausalLM, ROPE_LM),
    # head_dim 8, half rotated (Phi-4-mini style), multi-query
    "phi3-partial-mqa": Variant(lambda: _phi3(num_attention_heads=2, num_key_value_heads=1,
                                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                               "partial_rotary_factor": 0.5}),
                                tf.Phi3ForCausalLM, ROPE_LM),
    # Phi-3-mini-128k style longrope (short factors apply below original_max_position_embeddings)
    "phi3-longrope": Variant(lambda: _phi3(max_position_embeddings=128, original_max_position_embeddings=32,
                                           rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                            "short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0],
                                                            "partial_rotary_factor": 1.0}),
                             tf.Phi3ForCausalLM, ROPE_LM),
}
