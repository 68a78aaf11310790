"""Tiny Llama/Mistral/Qwen2 variants for the generic tests (see tests/support/tiny.py)."""

import transformers as tf

from tests.support.tiny import Variant

_LLAMA = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=4, vocab_size=64, max_position_embeddings=64)


def _llama(**kw):
    return tf.LlamaConfig(**{**_LLAMA, **kw})


ROPE_LM = frozenset({"rope", "lm"})
VARIANTS = {
    "llama-mha": Variant(lambda: _llama(), tf.LlamaForCausalLM, ROPE_LM),
    "llama-gqa": Variant(lambda: _llama(num_key_value_heads=2), tf.LlamaForCausalLM, ROPE_LM),
    "llama-mqa": Variant(lambda: _llama(num_key_value_heads=1), tf.LlamaForCausalLM, ROPE_LM),
    "llama-bias": Variant(lambda: _llama(num_key_value_heads=2, attention_bias=True), tf.LlamaForCausalLM, ROPE_LM),
    "llama-head-dim": Variant(lambda: _llama(num_key_value_heads=2, head_dim=8), tf.LlamaForCausalLM, ROPE_LM),
    "llama3-rope": Variant(lambda: _llama(num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=256,
                                          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 64}),
                           tf.LlamaForCausalLM, ROPE_LM),
    "llama-yarn": Variant(lambda: _llama(num_key_value_heads=2, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}),
        tf.LlamaForCausalLM, ROPE_LM),
    "llama-base-model": Variant(lambda: _llama(num_key_value_heads=2), tf.LlamaModel, frozenset({"rope"})),
    "mistral": Variant(lambda: tf.MistralConfig(**{**_LLAMA, "num_key_value_heads": 2, "sliding_window": 4}),
                       tf.MistralForCausalLM, ROPE_LM),
    "ministral": Variant(lambda: tf.MinistralConfig(**{**_LLAMA, "num_key_value_heads": 2, "head_dim": 4, "sliding_window": 4,
                                                      "layer_types": ["sliding_attention", "full_attention"]}),
                         tf.MinistralForCausalLM, ROPE_LM),
    "mixtral": Variant(lambda: tf.MixtralConfig(**{**_LLAMA, "num_key_value_heads": 2, "num_local_experts": 2,
                                                  "num_experts_per_tok": 1}), tf.MixtralForCausalLM, ROPE_LM),
    "qwen2": Variant(lambda: tf.Qwen2Config(**{**_LLAMA, "num_key_value_heads": 2}), tf.Qwen2ForCausalLM, ROPE_LM),
}
