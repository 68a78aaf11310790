"""Tiny BERT/RoBERTa variants for the generic tests (see tests/support/tiny.py)."""

import transformers as tf

from tests.support.tiny import Variant


def _bert(cls=tf.BertConfig, **kw):
    return cls(**{**dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
                         vocab_size=64, max_position_embeddings=64), **kw})


VARIANTS = {
    "bert": Variant(lambda: _bert(), tf.BertForMaskedLM),
    "bert-base-model": Variant(lambda: _bert(num_attention_heads=2), tf.BertModel),
    "bert-decoder": Variant(lambda: _bert(is_decoder=True), tf.BertForMaskedLM),
    "bert-cross": Variant(lambda: _bert(is_decoder=True, add_cross_attention=True), tf.BertLMHeadModel,
                          frozenset({"cross"})),
    "roberta": Variant(lambda: _bert(tf.RobertaConfig), tf.RobertaForMaskedLM),
    "xlm-roberta": Variant(lambda: _bert(tf.XLMRobertaConfig), tf.XLMRobertaForMaskedLM),
    # pre-LayerNorm: attention reads attention.self_attn_layer_norm(x)
    "xlm-roberta-xl": Variant(lambda: _bert(tf.XLMRobertaXLConfig), tf.XLMRobertaXLForMaskedLM),
    "electra": Variant(lambda: _bert(tf.ElectraConfig, embedding_size=8), tf.ElectraForMaskedLM),
    "distilbert": Variant(lambda: tf.DistilBertConfig(dim=16, n_heads=4, n_layers=2, hidden_dim=32, vocab_size=64,
                                                      max_position_embeddings=64), tf.DistilBertForMaskedLM),
}
