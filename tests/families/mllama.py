"""Tiny Mllama text-model variants for the generic tests (see tests/tiny.py): Llama self-attention
layers with a cross-attention layer (per-head RMS q/k norm, no RoPE) reading image states."""

import transformers as tf

from tests.tiny import Variant

_TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=64, max_position_embeddings=64, pad_token_id=0, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

VARIANTS = {
    "mllama-text": Variant(lambda: tf.MllamaTextConfig(**_TEXT, cross_attention_layers=[1]), tf.MllamaForCausalLM,
                           frozenset({"rope", "cross"})),
}
