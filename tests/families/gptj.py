"""Tiny GPT-J variants for the generic tests (see tests/support/tiny.py): interleaved RoPE on the first rotary_dim dims."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _gptj(**kw):
    return tf.GPTJConfig(**{**dict(n_embd=16, n_inner=32, n_layer=2, n_head=2, vocab_size=64, n_positions=64,
                                   rotary_dim=4), **kw})


VARIANTS = {
    # head_dim 8: the first 4 dims rotated in interleaved planes (0,1), (2,3); 4 unrotated
    "gptj": Variant(lambda: _gptj(), tf.GPTJForCausalLM, ROPE_LM),
    "gptj-full-rotary": Variant(lambda: _gptj(n_head=4, rotary_dim=4), tf.GPTJForCausalLM, ROPE_LM),
}
