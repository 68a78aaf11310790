"""Tiny Llama 4 (text) variant for the generic tests (see tests/tiny.py): one RoPE layer (interleaved
RoPE, weightless RMS q/k norm after RoPE, chunked attention) and one NoPE layer (temperature-tuned
queries, full attention), GQA, all four biases. Chunks of 4 and floor_scale 2 make the chunk mask and
the temperature act within the tests' 8- and 9-token sequences."""

import transformers as tf

from tests.tiny import Variant

ROPE_LM = frozenset({"rope", "lm"})

VARIANTS = {
    "llama4-text": Variant(lambda: tf.Llama4TextConfig(
        hidden_size=16, intermediate_size=32, intermediate_size_mlp=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=4, vocab_size=64, max_position_embeddings=64, num_local_experts=1,
        no_rope_layers=[1, 0], attention_chunk_size=4, floor_scale=2, attn_scale=0.5, attention_bias=False,
        rms_norm_eps=1e-6, pad_token_id=0), tf.Llama4ForCausalLM, ROPE_LM),
}
