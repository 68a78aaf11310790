"""Tiny ModernBERT variants for the generic tests (see tests/support/tiny.py): global and local layers."""

import transformers as tf

from tests.support.tiny import Variant

_MB = dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=3, intermediate_size=32, vocab_size=64,
           max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
           local_attention=4)

VARIANTS = {
    "modernbert": Variant(lambda: tf.ModernBertConfig(**_MB), tf.ModernBertForMaskedLM),
    "modernbert-bias": Variant(lambda: tf.ModernBertConfig(**_MB, attention_bias=True, global_attn_every_n_layers=2),
                               tf.ModernBertForMaskedLM),
    # long-context RoPE on the global layers (linear scaling by 4), default on the local ones
    "modernbert-scaled-rope": Variant(lambda: tf.ModernBertConfig(**_MB, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 160000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}), tf.ModernBertForMaskedLM),
}
