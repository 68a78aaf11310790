"""Tiny MPNet variants for the generic tests (see tests/support/tiny.py): 96-token sequences, so that the
model-level relative-position table's 31 reachable buckets (distances up to 91) are all exercised."""

import transformers as tf

from tests.support.tiny import Variant


def _mpnet(**kw):
    return tf.MPNetConfig(**{**dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
                                    vocab_size=64, max_position_embeddings=130), **kw})


VARIANTS = {
    "mpnet": Variant(lambda: _mpnet(), tf.MPNetForMaskedLM, tokens=96),
    "mpnet-base-model": Variant(lambda: _mpnet(num_attention_heads=2), tf.MPNetModel, tokens=96),
}
