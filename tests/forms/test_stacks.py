"""One stack of an encoder-decoder saved alone is counted as what it is (issue 38: a T5EncoderModel
checkpoint, the text encoder of many image and video generators, was refused as incomplete)."""

from __future__ import annotations

import pytest
import transformers as tf

import idinspect
from tests.support.cli import run_cli

_T5 = dict(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=3, num_heads=4,
           relative_attention_num_buckets=8, relative_attention_max_distance=8, decoder_start_token_id=0)
_WHISPER = dict(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=4, max_source_positions=8,
                max_target_positions=64, suppress_tokens=None, begin_suppress_tokens=None, pad_token_id=1,
                bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
_BART = dict(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)


@pytest.mark.parametrize("cls, config, stacks, blocks", [
    (tf.T5EncoderModel, lambda: tf.T5Config(**_T5), ["encoder"], 2),
    (tf.MT5EncoderModel, lambda: tf.MT5Config(**_T5), ["encoder"], 2),
    (tf.T5ForConditionalGeneration, lambda: tf.T5Config(**_T5), ["encoder", "decoder"], 2 + 2 * 3),
    (tf.BartForCausalLM, lambda: tf.BartConfig(**_BART), ["decoder"], 2 * 3),
    (tf.BartForConditionalGeneration, lambda: tf.BartConfig(**_BART), ["encoder", "decoder"], 2 + 2 * 3),
    (tf.UMT5EncoderModel, lambda: tf.UMT5Config(**_T5), ["encoder"], 2),
    (tf.WhisperForCausalLM, lambda: tf.WhisperConfig(**_WHISPER), ["decoder"], 2 * 3),
    (tf.WhisperForAudioClassification, lambda: tf.WhisperConfig(**_WHISPER), ["encoder"], 2),
], ids=["t5-encoder", "mt5-encoder", "t5-both", "bart-decoder", "bart-both", "umt5-encoder", "whisper-decoder",
        "whisper-encoder"])
def test_the_stacks_counted_are_the_stacks_stored(tmp_path, cls, config, stacks, blocks):
    cls(config()).save_pretrained(tmp_path)
    with idinspect.load(tmp_path) as model:
        summary = model.summary()
        assert summary["stacks"] == stacks and model.num_layers == blocks
        # every stored attention tensor is read, and nothing the config implies is missing
        model.check_layout()


def test_a_stack_the_architecture_names_but_the_checkpoint_lacks_is_still_incomplete(tmp_path):
    """T5ForConditionalGeneration's config with the decoder's tensors removed: a broken checkpoint, named."""
    from safetensors.torch import load_file, save_file

    tf.T5ForConditionalGeneration(tf.T5Config(**_T5)).save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    kept = {k: v.contiguous() for k, v in load_file(path).items() if not k.startswith("decoder.")}
    save_file(kept, path, metadata={"format": "pt"})
    result = run_cli(str(tmp_path))
    assert result.code == 2 and "Traceback" not in result.stderr
    assert "decoder.block.0.layer.0.SelfAttention.q.weight is missing" in result.stderr
