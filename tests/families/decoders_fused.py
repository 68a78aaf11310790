"""Tiny OPT, GPTBigCode, Falcon and BLOOM variants for the generic tests (see tests/support/tiny.py)."""

import transformers as tf

from tests.support.tiny import Variant

LM = frozenset({"lm"})
ROPE_LM = frozenset({"rope", "lm"})
_OPT = dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, ffn_dim=32, vocab_size=64,
            max_position_embeddings=64, word_embed_proj_dim=16)
_BIGCODE = dict(n_embd=16, n_head=4, n_layer=2, n_inner=32, vocab_size=64, n_positions=64)
_FALCON = dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, vocab_size=64, ffn_hidden_size=32,
               max_position_embeddings=64)

VARIANTS = {
    "opt": Variant(lambda: tf.OPTConfig(**_OPT), tf.OPTForCausalLM, LM),
    "opt-no-bias": Variant(lambda: tf.OPTConfig(**_OPT, enable_bias=False), tf.OPTForCausalLM, LM),
    "gpt-bigcode-mqa": Variant(lambda: tf.GPTBigCodeConfig(**_BIGCODE), tf.GPTBigCodeForCausalLM, LM),
    "gpt-bigcode-mha": Variant(lambda: tf.GPTBigCodeConfig(**_BIGCODE, multi_query=False), tf.GPTBigCodeForCausalLM, LM),
    "falcon-mqa": Variant(lambda: tf.FalconConfig(**_FALCON), tf.FalconForCausalLM, ROPE_LM),
    "falcon-new-arch": Variant(lambda: tf.FalconConfig(**_FALCON, new_decoder_architecture=True, num_kv_heads=2,
                                                       bias=True), tf.FalconForCausalLM, ROPE_LM),
    "falcon-legacy-alibi": Variant(lambda: tf.FalconConfig(**_FALCON, multi_query=False, alibi=True, bias=True,
                                                           parallel_attn=False), tf.FalconForCausalLM, LM),
    "bloom": Variant(lambda: tf.BloomConfig(hidden_size=16, n_head=4, n_layer=2, vocab_size=64), tf.BloomForCausalLM, LM),
}
