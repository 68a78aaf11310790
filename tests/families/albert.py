"""Tiny ALBERT variants for the generic tests (see tests/support/tiny.py): one shared block, and two groups."""

import transformers as tf

from tests.support.tiny import Variant

_ALBERT = dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=3, intermediate_size=32, vocab_size=64,
               embedding_size=8, max_position_embeddings=64)

VARIANTS = {
    "albert-shared": Variant(lambda: tf.AlbertConfig(**_ALBERT), tf.AlbertForMaskedLM),
    "albert-groups": Variant(lambda: tf.AlbertConfig(**_ALBERT, num_hidden_groups=3), tf.AlbertForMaskedLM),
}
