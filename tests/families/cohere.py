"""Tiny Cohere variants for the generic tests (see tests/support/tiny.py): interleaved RoPE, GQA; plain, and
with use_qk_norm (per-head LayerNorm with gains per head) and all biases."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _cohere(**kw):
    return tf.CohereConfig(**{**dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=64, max_position_embeddings=64,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2), **kw})


VARIANTS = {
    "cohere": Variant(lambda: _cohere(), tf.CohereForCausalLM, ROPE_LM),
    # eps 1e-6 (CohereConfig's default 1e-5 puts the nearly-null band at ~7e-7, too close to the 1e-6 cut)
    "cohere-qk-norm-bias": Variant(lambda: _cohere(use_qk_norm=True, attention_bias=True, layer_norm_eps=1e-6),
                                   tf.CohereForCausalLM, ROPE_LM),
}
