"""--auto on multi-tower configs (idinspect.automatic.towers, adapters/inferred_towers.py) and on the
query-side laws Llama 4's text model needs (idinspect.automatic.query_variants): each tower a stack
traced and settled on its own sub-config; a tower the example inputs do not run listed as not
analysed, never counted silently; the twin's towers tied where one tower's setting is another's width.
The agreement with the hand-written adapters, block by block, is in test_automatic.py (AGREEING)."""

from __future__ import annotations

import pytest
import torch

import idinspect
from idinspect.errors import IdinspectError
from tests.support.automatic import hidden
from tests.support.tiny import build


def test_each_tower_is_a_stack_read_from_its_own_sub_config():
    """CLIP's text tower (16 wide, 4 heads, causal) and vision tower (8 wide, 2 heads, bidirectional) are
    read with their own sizes and causality, text first as in the model's module order."""
    hf = build("clip")
    with hidden(hf.config.model_type):
        model = idinspect.load(hf, auto=True)
    adapter = model.adapter
    assert [s.stack for s in adapter.sites] == ["text", "text", "vision"]
    assert {s.stack: adapter.sizes(s) for s in adapter.sites} == {"text": (4, 4, 4, 16), "vision": (2, 2, 4, 8)}
    assert [model.layer(n).causal for n in range(3)] == [True, True, False]
    assert [p.found.config_key for p in adapter.parts] == ["text_config", "vision_config"]
    assert adapter.unanalysed() == []


def test_a_tower_the_token_ids_do_not_run_is_listed_as_not_analysed():
    """Qwen2-VL's images enter the text as image tokens: on token ids its vision tower never runs, so
    --auto traces nothing in it; it is listed (module, tensors, parameters, why), its tensors are not
    analysed, and only the text model is counted."""
    hf = build("qwen2-vl")
    with hidden(hf.config.model_type):
        model = idinspect.load(hf, auto=True)
        report = idinspect.inspect(model)
    adapter = model.adapter
    assert {s.stack for s in adapter.sites} == {"text"}
    (tower,) = adapter.unanalysed()
    vision = [k for k in hf.state_dict() if k.startswith("model.visual.")]
    assert tower["module"] == "model.visual" and tower["tensors"] == sorted(vision)
    assert tower["parameters"] == sum(hf.state_dict()[k].numel() for k in vision)
    assert "do not run its layers" in tower["reason"]
    assert all(adapter.not_analysed_reason(k) for k in vision)
    assert not any(adapter.not_analysed_reason(k) for k in hf.state_dict() if "language_model" in k)
    assert report["model"]["not_analysed"]


def test_the_twin_ties_a_tower_setting_to_another_towers_width():
    """SigLIP's text projection_size is the vision tower's width (both towers' embeddings meet there):
    it follows the vision tower's twin width, or the twin's towers would not fit together."""
    from idinspect.adapters.inferred_towers import (
        tower_twin_settings,
        towers_twin_settings,
    )

    cfg = build("siglip").config
    assert cfg.text_config.projection_size == cfg.vision_config.hidden_size != cfg.text_config.hidden_size
    shape = {"heads": 2, "kv_heads": 2, "head_dim": 4, "hidden_size": 12}
    twin = towers_twin_settings(cfg, ("text_config", "vision_config"), lambda sub: tower_twin_settings(sub, shape))
    assert twin["text_config"]["projection_size"] == twin["vision_config"]["hidden_size"] == 12
    assert twin["text_config"]["hidden_size"] == 12 and twin["text_config"]["num_hidden_layers"] == 1


def test_a_tower_whose_config_refuses_the_twin_keeps_its_own_sizes():
    """Qwen2-VL's vision tower names its width embed_dim (8, two heads): four twin heads do not divide
    it, so that tower keeps its sizes (its layer count still shrunk), and the twin builds."""
    from idinspect.adapters.inferred_towers import (
        tower_twin_settings,
        towers_twin_settings,
    )

    cfg = build("qwen2-vl").config
    shape = {"heads": 4, "kv_heads": 2, "head_dim": 4, "hidden_size": 16}
    twin = towers_twin_settings(cfg, ("text_config", "vision_config"), lambda sub: tower_twin_settings(sub, shape))
    assert twin["vision_config"]["embed_dim"] == 8 and twin["vision_config"]["num_heads"] == 2
    assert twin["vision_config"]["num_hidden_layers"] == 1
    assert twin["text_config"]["num_attention_heads"] == 4
    type(cfg)(**twin)      # builds


def test_llama4_text_laws_are_found_and_each_is_needed():
    """Llama 4's text model: chunks of attention_chunk_size on the chunked_attention layers, query
    temperature (floor_scale, attn_scale) on the layers without RoPE, a weightless L2 q/k norm (eps
    rms_norm_eps) after RoPE on the RoPE layers, RoPE's cos and sin from torch.polar. Each found; the
    layout without any one of them does not reproduce the module."""
    from dataclasses import replace

    from idinspect.adapters.example_inputs import example_inputs

    from idinspect.automatic import TRACE_TOKENS, trace_twin
    from idinspect.automatic.infer import candidates
    from idinspect.automatic.settle import settle

    hf = build("llama4-text")
    twin = trace_twin(hf.config, type(hf))
    g = torch.Generator().manual_seed(0)
    inputs = example_inputs(twin, torch.randint(2, 32, (2, TRACE_TOKENS), generator=g), g)
    layouts, found = candidates(twin, inputs, "llama4_text")
    right = settle(twin, layouts, found)[0].found
    assert (right.positional, right.rope_layers_key, right.rope_polar) == ("interleaved", "no_rope_layers", True)
    assert (right.chunk_key, right.chunk_layers) == ("attention_chunk_size", "layer_types")
    assert (right.temperature_keys, right.temperature_layers) == (("floor_scale", "attn_scale"), "norope")
    assert (right.l2_norm_eps_key, right.l2_norm_layers) == ("rms_norm_eps", "rope")
    for wrong in (replace(right, chunk_key=None), replace(right, temperature_keys=None),
                  replace(right, l2_norm_eps_key=None), replace(right, temperature_layers="all"),
                  replace(right, l2_norm_layers="all")):
        with pytest.raises(IdinspectError, match="closest"):
            settle(twin, [wrong], found)


def _mllama_agrees(source) -> object:
    """``source`` (a live multimodal Mllama or its saved folder) read by --auto with the hand-written
    adapter hidden: the same counts and the same attention function block by block; the inferred model."""
    from tests.support.automatic import counted, layer_facts

    read = idinspect.load(source)
    by_hand, facts = counted(read), layer_facts(read)
    with hidden(read.config.model_type):
        model = idinspect.load(source, auto=True)
        assert model.adapter.family == "automatic"
        assert counted(model) == by_hand
        assert layer_facts(model) == facts
        evidence = model.adapter_provider()["automatic"]
        assert evidence["proven_on_twin"] is True
        assert evidence["jacobian_nullity"] == evidence["structural_unidentified"] > 0
        assert evidence["reference_error"] <= 1e-10
    return model


def test_a_tower_whose_cross_layers_the_whole_model_does_not_run_is_traced_on_its_own():
    """The multimodal Mllama: on token ids its text model's cross layers never run (they read image
    states the whole model makes from pixel values). The text tower is traced and settled as a model of
    its own (model.language_model called with its own cross_attention_states), its layout put below
    language_model, and the proofs give it those states at its root; it then reads as the hand-written
    adapter reads it, its cross block's keys and values of the text width (16), the vision tower not analysed."""
    hf = build("mllama")
    model = _mllama_agrees(hf)
    adapter = model.adapter
    assert adapter.tower_inputs == (("language_model", "cross_attention_states"),)
    assert [(s.layer, s.block.kind) for s in adapter.sites] == [(0, "self"), (1, "cross"), (2, "self")]
    assert model.layer(1).tensor_names["W_K"] == "model.language_model.layers.1.cross_attn.k_proj.weight"
    assert model.layer(1).W_K.shape[1] == 16      # W_K [G, d, d_k]: the keys read states of the text width
    (tower,) = adapter.unanalysed()
    assert tower["module"] == "model.vision_model"


def test_a_saved_multimodal_mllama_reads_as_its_hand_written_adapter_reads_it(tiny_dir):
    """transformers saves the text model as language_model.model.layers (outside the live prefix model.):
    the saved names are learned on the twin and the folder reads as the hand-written adapter reads it."""
    _mllama_agrees(tiny_dir("mllama"))


def test_the_tower_reads_its_states_only_where_the_proofs_give_them_at_its_root():
    """Without the states given at the tower's root, the whole model's token ids do not run the cross
    block (nothing is captured for it); with them, its canonical form reproduces the module to 1e-10."""
    from idinspect.forms import reference_attention
    from idinspect.testing import captured_blocks

    hf = build("mllama")
    with hidden(hf.config.model_type):
        model = idinspect.load(hf, auto=True)
        adapter = model.adapter
        x, y, x_kv = captured_blocks(hf, adapter, 8, 0)[1]
        assert x_kv.shape == (2, 11, 16)
        err = (reference_attention(model.layer(1), x, x_kv=x_kv) - y).abs().max() / y.abs().max()
        assert float(err) <= 1e-10
        type(adapter).tower_inputs = ()
        with pytest.raises(KeyError):
            captured_blocks(hf, adapter, 8, 0)
