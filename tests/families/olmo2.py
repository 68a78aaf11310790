"""Tiny OLMo 2 / OLMo 3 / OLMoE variants for the generic tests (see tests/support/tiny.py): an RMSNorm over the whole
query projection and one over the whole key projection, before RoPE."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})
_OLMO = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=64, max_position_embeddings=64, pad_token_id=0)

VARIANTS = {
    # the shape: d=16, H=4, G=2, d_k=4
    "olmo2": Variant(lambda: tf.Olmo2Config(**_OLMO), tf.Olmo2ForCausalLM, ROPE_LM),
    "olmoe-bias": Variant(lambda: tf.OlmoeConfig(**{**_OLMO, "attention_bias": True, "num_experts": 2,
                                                    "num_experts_per_tok": 1}), tf.OlmoeForCausalLM, ROPE_LM),
    # OLMo 3: OLMo 2's norms, sliding-window layers by layer_types
    "olmo3": Variant(lambda: tf.Olmo3Config(**{**_OLMO, "sliding_window": 4,
                                               "layer_types": ["sliding_attention", "full_attention"]}),
                     tf.Olmo3ForCausalLM, ROPE_LM),
}
