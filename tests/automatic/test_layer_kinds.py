"""--auto on a list of layers of two kinds (idinspect.automatic.cross_layers): Mllama's text model, whose
layers listed in ``cross_attention_layers`` hold only a cross-attention block (queries from the text,
keys and values from image states, a per-head RMS q/k norm, no RoPE). The agreement with the
hand-written adapter, block by block, is in test_automatic.py (AGREEING)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

import idinspect
from idinspect.errors import IdinspectError
from tests.support.automatic import hidden
from tests.support.tiny import build


def _mllama_text(layers: int, cross: list[int]) -> tf.MllamaTextConfig:
    return tf.MllamaTextConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=layers, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=64, pad_token_id=0, rms_norm_eps=1e-6,
                               cross_attention_layers=cross)


def test_the_trace_twin_lists_its_last_layer_in_a_layer_index_setting():
    """A real model lists a few of its 40 layers (3, 8, ...): the two-layer twin lists its last one, so
    both kinds of layer are traced."""
    from idinspect.automatic import trace_twin

    twin = trace_twin(_mllama_text(6, [3, 5]), tf.MllamaForCausalLM)
    assert twin.config.num_hidden_layers == 2 and twin.config.cross_attention_layers == [1]
    assert [type(layer).__name__ for layer in twin.model.layers] == ["MllamaSelfAttentionDecoderLayer",
                                                                    "MllamaCrossAttentionDecoderLayer"]


def test_the_layers_a_setting_lists_hold_the_cross_attention_block():
    hf = build("mllama-text")
    with hidden(hf.config.model_type):
        model = idinspect.load(hf, auto=True)
    adapter = model.adapter
    assert adapter.found.cross_layers_key == "cross_attention_layers"
    assert [(s.layer, s.block.kind) for s in adapter.sites] == [(0, "self"), (1, "cross"), (2, "self")]
    cross = model.layer(1)
    assert cross.positional.kind == "none" and not cross.causal
    assert (cross.qk_norm.kind, cross.qk_norm.scope) == ("rms", "head")
    assert cross.tensor_names["W_Q"].endswith("layers.1.cross_attn.q_proj.weight")
    assert model.layer(0).qk_norm is None and model.layer(0).positional.kind == "rope"


def test_cross_attention_states_come_with_a_mask_showing_every_state():
    """Without a mask, sdpa masks Mllama's cross-attention causally (its module does not say otherwise),
    which no canonical cross block reproduces: the inputs carry an additive mask of zeros."""
    from idinspect.adapters.example_inputs import example_inputs
    from idinspect.adapters.inferred_inputs import cross_inputs, cross_states_argument

    from idinspect.automatic import TRACE_TOKENS, trace_twin
    from idinspect.automatic.cross_layers import layouts_by_layer_kind
    from idinspect.automatic.settle import settle
    from idinspect.forms import reference_attention
    from idinspect.sources.checkpoint import StateDictReader
    from idinspect.testing import captured_blocks

    twin = trace_twin(build("mllama-text").config, tf.MllamaForCausalLM)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 32, (2, TRACE_TOKENS), generator=g)
    inputs = example_inputs(twin, ids, g)
    assert cross_states_argument(twin, inputs) == "cross_attention_states"
    extra = cross_inputs(twin, "cross_attention_states", ids, g)
    assert extra["cross_attention_states"].shape == (2, TRACE_TOKENS + 3, 16)
    assert extra["cross_attention_mask"].shape == (2, 1, TRACE_TOKENS, TRACE_TOKENS + 3)
    assert not extra["cross_attention_mask"].any()
    layouts, found = layouts_by_layer_kind(twin, {**inputs, **extra}, "mllama_text_model")
    settled = settle(twin, layouts, found, TRACE_TOKENS, "cross_attention_states")[0]
    assert settled.found.cross_layers_key == "cross_attention_layers"

    class CausalCross(settled):      # the same layout, its inputs without the mask
        def example_inputs(self, hf_model, input_ids, generator):
            kw = super().example_inputs(hf_model, input_ids, generator)
            kw.pop("cross_attention_mask")
            return kw

    adapter = CausalCross(twin.config, StateDictReader(twin.state_dict()))
    x, y, x_kv = captured_blocks(twin, adapter, TRACE_TOKENS, 0)[1]
    assert x_kv is not None
    assert float((reference_attention(adapter.read_layer(1), x, x_kv=x_kv) - y).abs().max()) > 1e-3


def test_a_second_kind_of_layer_that_does_not_run_is_refused_by_name():
    """Inside the multimodal Mllama, on token ids, the text model's cross layers do not run (its image
    states come from pixel values): read there, the list of layers is refused naming the layer rather
    than leave it out (--auto then traces that tower as a model of its own, tests/automatic/test_towers.py)."""
    from idinspect.adapters.example_inputs import example_inputs

    from idinspect.automatic import TRACE_TOKENS, trace_twin
    from idinspect.automatic.cross_layers import layouts_by_layer_kind

    hf = build("mllama")
    twin = trace_twin(hf.config, type(hf))
    g = torch.Generator().manual_seed(0)
    inputs = example_inputs(twin, torch.randint(2, 32, (2, TRACE_TOKENS), generator=g), g)
    assert set(inputs) == {"input_ids"}
    refused = pytest.raises(IdinspectError, match=r"layer 1 of model.language_model.layers \(MllamaCrossAttention")
    with refused:
        layouts_by_layer_kind(twin, inputs, "mllama", "model.language_model.layers", "text", ("vision_model",),
                              config_key="text_config")
