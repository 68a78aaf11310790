"""Refusals by name of the fused-decoder families: a setting idinspect does not model is never counted."""

import pytest
import transformers as tf

import idinspect
from tests.support import tiny


def test_gpt_bigcode_cross_attention_is_refused_by_name(tmp_path):
    cfg = tf.GPTBigCodeConfig(n_embd=16, n_head=4, n_layer=1, n_inner=32, vocab_size=64, n_positions=64,
                              multi_query=False, add_cross_attention=True)
    tiny.save(tf.GPTBigCodeForCausalLM(cfg), tmp_path)
    with pytest.raises(idinspect.IdinspectError, match="gpt_bigcode with add_cross_attention is refused"):
        idinspect.load(tmp_path)


def test_falcon_alibi_slopes_are_blooms():
    import torch
    from idinspect.adapters.falcon import alibi_slopes
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    for n in (1, 3, 4, 6, 8, 12):
        alibi = build_alibi_tensor(torch.ones(1, 2), n, torch.float32)     # [n, 1, 2]: slope * position (0, 1)
        assert torch.equal(alibi[:, 0, 1], alibi_slopes(n)), n


@pytest.mark.parametrize("family", ["mpt", "olmo"])
def test_clamped_qkv_is_refused_by_name(tmp_path, family):
    """clip_qkv clamps q, k and v: a nonlinearity between the weights and the score, never counted."""
    if family == "mpt":
        hf = tf.MptForCausalLM(tf.MptConfig(d_model=16, n_heads=4, n_layers=1, expansion_ratio=2, vocab_size=64,
                                            max_seq_len=64, attn_config={"clip_qkv": 8.0}))
    else:
        hf = tf.OlmoForCausalLM(tf.OlmoConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                              num_attention_heads=4, vocab_size=64, pad_token_id=0, clip_qkv=8.0))
    tiny.save(hf, tmp_path)
    with pytest.raises(idinspect.IdinspectError, match="clip_qkv is 8.0"):
        idinspect.load(tmp_path)


def test_mpt_slopes_are_the_ones_mptmodel_adds(tmp_path):
    """MptModel adds build_mpt_alibi_tensor(H, max_seq_len) with the default alibi_bias_max, whatever the
    config says: the adapter's slopes are that tensor's column differences, for any head count."""
    import torch
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for n in (3, 4, 6):
        cfg = tf.MptConfig(d_model=4 * n, n_heads=n, n_layers=1, expansion_ratio=2, vocab_size=64, max_seq_len=16,
                           attn_config={"alibi_bias_max": 4})
        tiny.save(tf.MptModel(cfg), tmp_path / str(n))
        slopes = idinspect.load(tmp_path / str(n)).layer(0).positional.alibi_slopes
        table = build_mpt_alibi_tensor(n, 16)                        # what MptModel.forward adds
        assert torch.equal(slopes, (table[:, 0, 1] - table[:, 0, 0]).to(torch.float64)), n
