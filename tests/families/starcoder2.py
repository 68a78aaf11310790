"""Tiny StarCoder2 variants for the generic tests (see tests/support/tiny.py): biases, GQA, RoPE, sliding window."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _sc2(**kw):
    return tf.Starcoder2Config(**{**dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                                         max_position_embeddings=64, bos_token_id=0, eos_token_id=0), **kw})


VARIANTS = {
    "starcoder2": Variant(lambda: _sc2(), tf.Starcoder2ForCausalLM, ROPE_LM),
    "starcoder2-no-bias-sliding": Variant(lambda: _sc2(use_bias=False, sliding_window=4, num_key_value_heads=1),
                                          tf.Starcoder2ForCausalLM, ROPE_LM),
}
