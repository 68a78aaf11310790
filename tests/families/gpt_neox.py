"""Tiny GPT-NeoX (Pythia) variants for the generic tests (see tests/support/tiny.py): per-head fused qkv, rotary_pct."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})


def _neox(**kw):
    return tf.GPTNeoXConfig(**{**dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      vocab_size=64, max_position_embeddings=64), **kw})


VARIANTS = {
    # head_dim 8, GPTNeoXConfig's default rotary_pct 0.25: 2 rotated dims of 8; parallel residual
    "gpt-neox": Variant(lambda: _neox(), tf.GPTNeoXForCausalLM, ROPE_LM),
    # Pythia's rotary_pct 0.25 and rotary_emb_base as legacy keywords, sequential residual, four heads
    "gpt-neox-sequential": Variant(lambda: _neox(num_attention_heads=4, use_parallel_residual=False,
                                                 rope_parameters={"rope_type": "default", "rope_theta": 20000.0,
                                                                  "partial_rotary_factor": 0.5}),
                                   tf.GPTNeoXForCausalLM, ROPE_LM),
    "gpt-neox-no-bias-full-rotary": Variant(lambda: _neox(attention_bias=False, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}),
        tf.GPTNeoXForCausalLM, ROPE_LM),
}
