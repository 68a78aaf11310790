"""Tiny Gemma 3 (text) variants for the generic tests (see tests/support/tiny.py): per-head (1 + w) RMS q/k
norm shared by all heads, query_pre_attn_scalar, sliding and full layers with their own RoPE."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _gemma3(**kw):
    return tf.Gemma3TextConfig(**{**dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                                         query_pre_attn_scalar=8, vocab_size=64, max_position_embeddings=64,
                                         sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                                         rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                          "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                             "rope_theta": 1000000.0}},
                                         pad_token_id=0), **kw})


VARIANTS = {
    "gemma3-text": Variant(lambda: _gemma3(), tf.Gemma3ForCausalLM, ROPE_LM),
    # soft-capped scores on top of the q/k norm (c tanh(s / c): one-to-one, so the same scores are identified)
    "gemma3-softcap": Variant(lambda: _gemma3(attn_logit_softcapping=2.0), tf.Gemma3ForCausalLM, ROPE_LM),
}
