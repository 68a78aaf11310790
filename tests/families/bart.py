"""Tiny encoder-decoder variants (BART, mBART, Marian, Whisper) for the generic tests (see tests/support/tiny.py)."""

import transformers as tf

from tests.support.tiny import Variant

_SIZES = dict(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32)
_TOKENS = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
CROSS = frozenset({"cross"})
SEQ2SEQ = frozenset({"cross", "seq2seq"})

VARIANTS = {
    "bart": Variant(lambda: tf.BartConfig(**_SIZES, **_TOKENS, max_position_embeddings=64),
                    tf.BartForConditionalGeneration, SEQ2SEQ),
    "bart-base-model": Variant(lambda: tf.BartConfig(**{**_SIZES, "encoder_attention_heads": 2,
                                                        "decoder_attention_heads": 2, "decoder_layers": 1},
                                                     **_TOKENS, max_position_embeddings=64),
                               tf.BartModel, CROSS),
    "mbart": Variant(lambda: tf.MBartConfig(**_SIZES, **_TOKENS, max_position_embeddings=64),
                     tf.MBartForConditionalGeneration, SEQ2SEQ),
    "marian": Variant(lambda: tf.MarianConfig(**_SIZES, **_TOKENS, max_position_embeddings=64),
                      tf.MarianMTModel, SEQ2SEQ),
    "whisper": Variant(lambda: tf.WhisperConfig(**_SIZES, **_TOKENS, num_mel_bins=4, max_source_positions=8,
                                                max_target_positions=64, suppress_tokens=None,
                                                begin_suppress_tokens=None),
                       tf.WhisperForConditionalGeneration, SEQ2SEQ),
    # one stack saved alone: the decoder (its cross-attention kept: it attends to the states it is given)
    # and Whisper's encoder under an audio classifier
    "bart-decoder": Variant(lambda: tf.BartConfig(**_SIZES, **_TOKENS, max_position_embeddings=64),
                            tf.BartForCausalLM, CROSS),
    "whisper-encoder": Variant(lambda: tf.WhisperConfig(**_SIZES, **_TOKENS, num_mel_bins=4, max_source_positions=8,
                                                        max_target_positions=64, suppress_tokens=None,
                                                        begin_suppress_tokens=None),
                               tf.WhisperForAudioClassification),
}
