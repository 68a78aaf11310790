"""Tiny T5 and mT5 variants for the generic tests (see tests/support/tiny.py).

8 relative-position buckets over distance 8: the tests' 8- and 9-token sequences reach every bucket
of both stacks, so no bucket sits unused (an unused bucket would be an input-dependent null direction).
"""

import transformers as tf

from tests.support.tiny import Variant

_T5 = dict(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
           relative_attention_max_distance=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)

VARIANTS = {
    "t5": Variant(lambda: tf.T5Config(**_T5), tf.T5ForConditionalGeneration, frozenset({"cross", "seq2seq"})),
    "t5-gated-head-dim": Variant(lambda: tf.T5Config(**{**_T5, "d_kv": 5, "num_decoder_layers": 3,
                                                        "feed_forward_proj": "gated-gelu"}),
                                 tf.T5Model, frozenset({"cross"})),
    # the encoder alone (the text encoder of image and video generators): config.json names T5EncoderModel
    "t5-encoder": Variant(lambda: tf.T5Config(**_T5), tf.T5EncoderModel),
    "mt5": Variant(lambda: tf.MT5Config(**{**_T5, "feed_forward_proj": "gated-gelu"}), tf.MT5ForConditionalGeneration,
                   frozenset({"cross", "seq2seq"})),
    # UMT5: a relative-position table in every self-attention layer
    "umt5": Variant(lambda: tf.UMT5Config(**{**_T5, "feed_forward_proj": "gated-gelu"}), tf.UMT5ForConditionalGeneration,
                    frozenset({"cross", "seq2seq"})),
    "umt5-encoder": Variant(lambda: tf.UMT5Config(**{**_T5, "feed_forward_proj": "gated-gelu"}), tf.UMT5EncoderModel),
    "mt5-encoder": Variant(lambda: tf.MT5Config(**{**_T5, "feed_forward_proj": "gated-gelu"}), tf.MT5EncoderModel),
}
