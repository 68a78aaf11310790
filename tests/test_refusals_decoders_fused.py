"""Refusals by name of the fused-decoder families: a setting idinspect does not model is never counted."""

import pytest
import transformers as tf

import idinspect
from tests import tiny


def test_gpt_bigcode_cross_attention_is_refused_by_name(tmp_path):
    cfg = tf.GPTBigCodeConfig(n_embd=16, n_head=4, n_layer=1, n_inner=32, vocab_size=64, n_positions=64,
                              multi_query=False, add_cross_attention=True)
    tiny.save(tf.GPTBigCodeForCausalLM(cfg), tmp_path)
    with pytest.raises(idinspect.IdinspectError, match="gpt_bigcode with add_cross_attention is refused"):
        idinspect.load(tmp_path)


def test_falcon_alibi_slopes_are_blooms():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    import torch

    from idinspect.adapters.falcon import alibi_slopes

    for n in (1, 3, 4, 6, 8, 12):
        alibi = build_alibi_tensor(torch.ones(1, 2), n, torch.float32)     # [n, 1, 2]: slope * position (0, 1)
        assert torch.equal(alibi[:, 0, 1], alibi_slopes(n)), n
