"""The plugin's own CI: idinspect's adapter contract on tiny Helium models."""

import pytest
import transformers as tf

from idinspect.testing import check_adapter


@pytest.mark.parametrize("bias", [False, True])
def test_helium_meets_the_adapter_contract(bias):
    config = tf.HeliumConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=4, vocab_size=64, max_position_embeddings=64,
                             attention_bias=bias, pad_token_id=0)
    result = check_adapter(tf.HeliumForCausalLM(config))
    assert result["blocks"] == 2 and result["proof"]["agree"] is True
