"""A tiny gpt-oss variant for the generic tests (see tests/support/tiny.py): GQA, head_dim 8 != d / H, biases
on all four projections, attention sinks, YaRN RoPE, a 4-token window on layer 0 (layer_types
alternate), two experts (MLPs, not read)."""

import transformers as tf

from tests.support.tiny import Variant

VARIANTS = {
    "gpt-oss": Variant(lambda: tf.GptOssConfig(
        hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=64, max_position_embeddings=64, num_local_experts=2, num_experts_per_tok=1,
        sliding_window=4, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                           "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                           "original_max_position_embeddings": 16}),
        tf.GptOssForCausalLM, frozenset({"rope", "lm"})),
}
