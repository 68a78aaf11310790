"""--auto settles laws over the config, not the twin's numbers: the facts it finds on a twin of d_k = 4
(or 8) and two layers must hold for the model itself, whose sizes and layer count differ.

Each model here differs from its trace twin in the way that would expose a fact kept as the twin's
constant: a head width of 16 (the scale d_k^-1/2, the rotated dims), a NoPE layer that is not among
the first two, a rotary_dim that rotates part of the head, a relative-position distance beyond the
trace's 8 tokens. The inferred adapter must read every block
as the hand-written one does (:func:`tests.support.automatic.layer_facts`: scale, window, RoPE pairing,
rotated dims and frequencies, tensors) and count the same.
"""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from idinspect.adapters import ADAPTERS
from idinspect.adapters.inferred import twin_settings_from

import idinspect
from idinspect.automatic import trace_twin
from idinspect.errors import IdinspectError
from tests.support.automatic import counted, hidden, layer_facts


def _agrees(hf) -> dict:
    read = idinspect.load(hf)
    with hidden(hf.config.model_type):
        model = idinspect.load(hf, auto=True)
        assert counted(model) == counted(read)
        assert layer_facts(model) == layer_facts(read)
        return model.adapter.found


def _model(config, cls):
    torch.manual_seed(0)
    return cls(config).to(torch.float64).eval()


def test_the_scale_follows_the_models_head_width_not_the_twins():
    """d_k = 16 in the model, 4 in the twin: a scale kept as the twin's number (0.5) would be 2x the model's."""
    cfg = tf.LlamaConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         intermediate_size=32, num_hidden_layers=2, vocab_size=64)
    found = _agrees(_model(cfg, tf.LlamaForCausalLM))
    assert found.scale_law == "head_dim"


def test_a_nope_layer_beyond_the_twins_two_layers():
    """SmolLM3's default pattern leaves RoPE out of every fourth layer: [1, 1, 1, 0]. The twin must hold
    both kinds (a per-layer setting's kinds are cycled onto its layers), or --auto would find RoPE on
    every layer and miscount layer 3."""
    cfg = tf.SmolLM3Config(hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=64, no_rope_layers=[1, 1, 1, 0],
                           pad_token_id=0, bos_token_id=1, eos_token_id=2)
    hf = _model(cfg, tf.SmolLM3ForCausalLM)
    assert trace_twin(cfg, tf.SmolLM3ForCausalLM).config.no_rope_layers == [1, 0]
    assert _agrees(hf).rope_layers_key == "no_rope_layers"


def test_partial_interleaved_rope_on_a_wide_head():
    """GPT-J with d_k = 16 rotating 8 dims in interleaved pairs: the trace twin gets heads of 8 with two
    rotated planes (one plane would not tell rotate-half pairs from interleaved ones), and the adapter
    reads rotary_dim from the model's config."""
    cfg = tf.GPTJConfig(n_embd=32, n_inner=32, n_layer=2, n_head=2, vocab_size=64, n_positions=64, rotary_dim=8)
    twin = trace_twin(cfg, tf.GPTJForCausalLM)
    assert (twin.config.n_embd // twin.config.n_head, twin.config.rotary_dim) == (8, 4)
    found = _agrees(_model(cfg, tf.GPTJForCausalLM))
    assert (found.positional, found.rope, found.rotary_dim_key) == ("interleaved", "default", "rotary_dim")


@pytest.mark.parametrize("real", [16, 12])
def test_a_width_equal_to_the_models_follows_the_twins(real):
    """OPT projects embeddings only where word_embed_proj_dim differs from hidden_size: a twin keeps
    that relation (equal: equal to its own width; different: the model's number)."""
    cfg = tf.OPTConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, ffn_dim=32, vocab_size=64,
                       word_embed_proj_dim=real)
    settings = twin_settings_from(cfg, {"heads": 2, "kv_heads": 2, "head_dim": 4, "hidden_size": 8})
    assert settings["word_embed_proj_dim"] == (8 if real == 16 else 12)
    _agrees(_model(cfg, tf.OPTForCausalLM))


def test_a_relative_position_table_of_the_released_size():
    """T5's encoder with 32 buckets over distance 128 (the released models'): on 8 tokens every distance
    is below the exact buckets and any setting could be the largest distance. The settle's sequences run
    one token past the largest distance tried, so only 128's setting reproduces the module; the table is
    layer 0's, shared by the stack, in both directions."""
    cfg = tf.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128, pad_token_id=0,
                      eos_token_id=1, decoder_start_token_id=0)
    found = _agrees(_model(cfg, tf.T5EncoderModel))
    assert (found.relative_distance_key, found.relative_bidirectional, found.relative_per_layer) == \
        ("relative_attention_max_distance", True, False)


def test_an_encoder_and_a_decoder_of_different_depths():
    """BART with 3 encoder layers and 2 decoder layers: each stack counts its layers by its own setting
    (num_hidden_layers is encoder_layers; the decoder's is decoder_layers, told apart on the twin, where
    only equal counts follow the twin's)."""
    cfg = tf.BartConfig(vocab_size=64, d_model=16, encoder_layers=3, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    hf = _model(cfg, tf.BartModel)
    found = _agrees(hf)
    assert found.layers_key == "num_hidden_layers"
    with hidden("bart"):
        stacks = idinspect.load(hf, auto=True).adapter.parts
        assert [(c.found.stack, c.found.layers_key) for c in stacks] == [("encoder", "num_hidden_layers"),
                                                                        ("decoder", "decoder_layers")]


def test_layers_kept_in_groups_are_counted_once_each_by_the_settings_that_count_them():
    """ALBERT with 6 layers run from 2 groups of 2 layers each (each group runs 3 times): the settings
    that count the groups and each group's layers are found by changing them on a twin (not by name),
    every stored layer is one block, "shared", numbered g K + k as the hand-written adapter numbers it."""
    from idinspect.automatic.groups import find_groups

    cfg = tf.AlbertConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=6, num_hidden_groups=2,
                          inner_group_num=2, intermediate_size=32, vocab_size=64, embedding_size=8,
                          max_position_embeddings=64)
    twin = trace_twin(cfg, tf.AlbertModel)
    groups = find_groups(twin, lambda overrides: trace_twin(cfg, tf.AlbertModel, overrides))
    assert (groups.container, groups.group_list, groups.groups_key, groups.group_layers_key) == \
        ("encoder.albert_layer_groups", "albert_layers", "num_hidden_groups", "inner_group_num")
    hf = _model(cfg, tf.AlbertModel)
    found = _agrees(hf)
    assert found.group_list == "albert_layers"
    with hidden("albert"):
        sites = idinspect.load(hf, auto=True).adapter.sites
    assert [(s.path, s.layer, s.block.kind) for s in sites] == [
        (f"encoder.albert_layer_groups.{g}.albert_layers.{k}", 2 * g + k, "shared") for g in range(2) for k in range(2)]


def test_alibi_slopes_are_settled_on_the_models_own_head_count():
    """On 4 heads ALiBi's slopes are powers of two and no rounding of them shows. On 12 heads (slopes
    2^-(k/2) among them) BLOOM's unrounded slopes reproduce its module; Falcon's bias, computed in
    bfloat16 (round(round(m_h) j)), is linear in no slopes: refused by name, nothing counted."""
    found = _agrees(_model(tf.BloomConfig(hidden_size=48, n_head=12, n_layer=2, vocab_size=64), tf.BloomForCausalLM))
    assert (found.positional, found.alibi_rounding, found.alibi_scale) == ("alibi", None, "none")
    cfg = tf.FalconConfig(hidden_size=48, num_attention_heads=12, num_hidden_layers=2, vocab_size=64,
                          ffn_hidden_size=32, multi_query=False, alibi=True, bias=True, parallel_attn=False)
    with hidden("falcon"):
        with pytest.raises(IdinspectError, match="model's 12 heads no slopes") as info:
            idinspect.load(_model(cfg, tf.FalconForCausalLM), auto=True)
        assert "falcon" not in ADAPTERS
    assert "\n" not in str(info.value)


def test_a_relative_position_table_of_the_models_read_on_its_longest_sequence():
    """MPNet's encoder holds the table and passes its lookup to every layer (position_bias); the largest
    distance, 128, is a constant of transformers' code, in no setting. With the released 514 positions
    the lookup is read on 513 tokens, where every bucket shows: the distance is the number that fits,
    and --prove's twin runs the 92 tokens that reach the last bucket."""
    cfg = tf.MPNetConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
                         vocab_size=64, max_position_embeddings=514)
    found = _agrees(_model(cfg, tf.MPNetModel))
    assert (found.relative_table, found.relative_keyword, found.relative_distance, found.relative_tokens,
            found.relative_bidirectional) == ("encoder.relative_attention_bias", "position_bias", 128, 92, True)


@pytest.mark.parametrize(("variant", "q_latent", "law", "pairing", "polar"), [
    ("deepseek-v3", True, "head_dim", "interleaved", False),
    ("deepseek-v3-direct-q", False, "yarn_mscale", "half", False),
    ("deepseek-v2", False, "head_dim", "interleaved", True),
])
def test_latent_attention_widths_are_tied_to_the_settings_that_count_them(variant, q_latent, law, pairing, polar):
    """The tiny MLA variants have n = e = v = 4 and both latent ranks 8: every width equals several
    settings, and only changing the one that counts it (on another twin) changes that width alone. The
    scale follows (n + e)^-1/2, times YaRN's mscale^2 where rope_parameters ask for it; the pairing and
    DeepSeek-V2's complex rotation factors are settled by the reproduction."""
    from tests.support.tiny import build

    found = _agrees(build(variant))
    widths = dict(found.mla.settings)
    assert widths == {k: k for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
                      if q_latent or k != "q_lora_rank"}
    assert (found.mla.q_b is not None, found.scale_law, found.positional, found.rope_polar) == (q_latent, law, pairing, polar)


def test_latent_attention_of_distinct_widths_on_a_model_wider_than_its_twin():
    """DeepSeek-V3 with r_q = 10, r = 12, n = 6, e = 4, v = 2, two heads of a width-32 model (the trace
    twin has four heads of width 16): every width is read from the setting found on the twin, and the
    model's blocks are read as the hand-written adapter reads them."""
    cfg = tf.DeepseekV3Config(hidden_size=32, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=2, q_lora_rank=10, kv_lora_rank=12,
                              qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=2, n_routed_experts=2,
                              num_experts_per_tok=1, n_shared_experts=1, n_group=1, topk_group=1,
                              first_k_dense_replace=1, vocab_size=64, max_position_embeddings=64)
    found = _agrees(_model(cfg, tf.DeepseekV3ForCausalLM))
    assert dict(found.mla.settings)["v_head_dim"] == "v_head_dim"
