"""Tiny GPT-2 variants for the generic tests (see tests/support/tiny.py)."""

import transformers as tf

from tests.support.tiny import Variant

VARIANTS = {
    "gpt2": Variant(lambda: tf.GPT2Config(n_embd=16, n_head=4, n_layer=2, vocab_size=64, n_positions=64),
                    tf.GPT2LMHeadModel, frozenset({"lm"})),
    "gpt2-base-model": Variant(lambda: tf.GPT2Config(n_embd=16, n_head=2, n_layer=2, vocab_size=64, n_positions=64),
                               tf.GPT2Model),
    "gpt2-cross": Variant(lambda: tf.GPT2Config(n_embd=16, n_head=4, n_layer=2, vocab_size=64, n_positions=64,
                                                add_cross_attention=True, scale_attn_by_inverse_layer_idx=True),
                          tf.GPT2LMHeadModel, frozenset({"cross"})),
    "gpt2-inverse-layer-scale": Variant(lambda: tf.GPT2Config(n_embd=16, n_head=4, n_layer=3, vocab_size=64,
                                                              n_positions=64, scale_attn_by_inverse_layer_idx=True),
                                        tf.GPT2LMHeadModel, frozenset({"lm"})),
}
