"""Tiny Granite variants for the generic tests (see tests/support/tiny.py): attention_multiplier as the softmax scale."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _granite(**kw):
    return tf.GraniteConfig(**{**dict(hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=64, max_position_embeddings=64,
                                      attention_multiplier=0.37, embedding_multiplier=1.5, residual_multiplier=0.6,
                                      logits_scaling=2.0), **kw})


VARIANTS = {
    "granite": Variant(lambda: _granite(), tf.GraniteForCausalLM, ROPE_LM),
    "granite-bias-mha": Variant(lambda: _granite(attention_bias=True, num_key_value_heads=4, attention_multiplier=1.0),
                                tf.GraniteForCausalLM, ROPE_LM),
}
