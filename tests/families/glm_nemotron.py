"""Tiny GLM, GLM-4 and Nemotron variants for the generic tests (see tests/support/tiny.py): RoPE over part of
each head, interleaved pairs (GLM) or rotate_half (Nemotron)."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})
_SIZES = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=64, max_position_embeddings=64, pad_token_id=0, head_dim=4)

VARIANTS = {
    "glm": Variant(lambda: tf.GlmConfig(**_SIZES), tf.GlmForCausalLM, ROPE_LM),
    "glm4": Variant(lambda: tf.Glm4Config(**_SIZES), tf.Glm4ForCausalLM, ROPE_LM),
    # head width 8 with half rotated: two rotated planes and four unrotated dims per head
    "nemotron": Variant(lambda: tf.NemotronConfig(**{**_SIZES, "head_dim": 8, "attention_bias": True}),
                        tf.NemotronForCausalLM, ROPE_LM),
}
