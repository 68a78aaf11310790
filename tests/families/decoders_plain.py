"""Tiny variants of the 2025-2026 decoders that store attention as the generic q/k/v/o decoder does
(SmolLM3 with NoPE layers, Seed-OSS, the first OLMo) for the generic tests (see tests/support/tiny.py)."""

import transformers as tf

from tests.support.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})
_SIZES = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=64, max_position_embeddings=64, pad_token_id=0)

VARIANTS = {
    # layer 0 uses RoPE, layer 1 none (no_rope_layers = [1, 0]); q/k/v/o biases
    "smollm3-nope": Variant(lambda: tf.SmolLM3Config(**_SIZES, no_rope_layers=[1, 0], attention_bias=True),
                            tf.SmolLM3ForCausalLM, ROPE_LM),
    # q/k/v biases without an o_proj bias
    "seed_oss": Variant(lambda: tf.SeedOssConfig(**_SIZES, head_dim=4, attention_bias=True, attention_out_bias=False),
                        tf.SeedOssForCausalLM, ROPE_LM),
    "olmo": Variant(lambda: tf.OlmoConfig(**_SIZES), tf.OlmoForCausalLM, ROPE_LM),
}
