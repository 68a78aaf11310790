"""Tiny Gemma (v1) and Gemma 2 variants for the generic tests (see tests/support/tiny.py).

Gemma: MQA with head_dim 8 != d / H. Gemma 2: GQA with biases on all four projections, soft-capped
scores (attn_logit_softcapping 5: scores of these random weights reach the cap's non-linear range),
query_pre_attn_scalar 6 (not head_dim), a 4-token window on layer 0 (layer_types alternate) and
final-logit soft-capping.
"""

import transformers as tf

from tests.support.tiny import Variant

_GEMMA = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, head_dim=8,
              vocab_size=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=2, eos_token_id=1)
ROPE_LM = frozenset({"rope", "lm"})

VARIANTS = {
    "gemma-mqa": Variant(lambda: tf.GemmaConfig(**_GEMMA, num_key_value_heads=1), tf.GemmaForCausalLM, ROPE_LM),
    "gemma2-softcap": Variant(lambda: tf.Gemma2Config(**_GEMMA, num_key_value_heads=2, attention_bias=True,
                                                      attn_logit_softcapping=5.0, final_logit_softcapping=30.0,
                                                      query_pre_attn_scalar=6, sliding_window=4),
                              tf.Gemma2ForCausalLM, ROPE_LM),
}
