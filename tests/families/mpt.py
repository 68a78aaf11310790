"""Tiny MPT variants for the generic tests (see tests/support/tiny.py): fused Wqkv, no biases, ALiBi with
MPT's own slopes (a head count that is not a power of two reorders them)."""

import transformers as tf

from tests.support.tiny import Variant

VARIANTS = {
    "mpt": Variant(lambda: tf.MptConfig(d_model=16, n_heads=4, n_layers=2, expansion_ratio=2, vocab_size=64,
                                        max_seq_len=64), tf.MptForCausalLM, frozenset({"lm"})),
    "mpt-6-heads": Variant(lambda: tf.MptConfig(d_model=12, n_heads=6, n_layers=2, expansion_ratio=2, vocab_size=64,
                                                max_seq_len=64, attn_config={"alibi_bias_max": 4}), tf.MptModel),
}
