"""Tiny Phi variants for the generic tests (see tests/support/tiny.py): biases everywhere, partial RoPE."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _phi(**kw):
    return tf.PhiConfig(**{**dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  vocab_size=64, max_position_embeddings=64), **kw})


VARIANTS = {
    # head_dim 8, PhiConfig's default partial_rotary_factor 0.5: 4 rotated dims, 4 unrotated
    "phi": Variant(lambda: _phi(), tf.PhiForCausalLM, ROPE_LM),
    # GQA, a quarter of each head rotated (2 of 8 dims), another theta
    "phi-gqa-quarter": Variant(lambda: _phi(num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                            rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                             "partial_rotary_factor": 0.25}),
                               tf.PhiForCausalLM, ROPE_LM),
    "phi-full-rotary": Variant(lambda: _phi(num_attention_heads=4, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}), tf.PhiForCausalLM, ROPE_LM),
    # one LayerNorm (gain and bias) shared by all heads on queries and keys, before the partial RoPE
    "phi-qk-layernorm": Variant(lambda: _phi(qk_layernorm=True, layer_norm_eps=1e-7), tf.PhiForCausalLM, ROPE_LM),
}
