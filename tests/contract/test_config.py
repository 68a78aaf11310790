"""config.json read without the config classes (idinspect.sources.config) agrees with AutoConfig.

Every fact an adapter derives (sizes, biases, RoPE frequencies bit for bit,
sliding windows, scales, causality) and the whole analysis are the same whether the adapter reads
the CheckpointConfig or AutoConfig's object, for every tiny variant and for hand-written sparse
and legacy config.json files (the form most hub checkpoints still have).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import transformers as tf
from idinspect.adapters import adapter_for

import idinspect
from idinspect.analysis import analyze
from idinspect.model import Model
from idinspect.sources.config import CheckpointConfig
from tests.support import tiny


def _with_auto_config(model: Model) -> Model:
    cfg = model.hf_config
    assert not isinstance(cfg, CheckpointConfig)
    return Model(cfg, model.reader, adapter_for(cfg, model.reader), model.provenance)


def _facts(model: Model) -> dict:
    a = model.adapter
    pos = a.positional()
    facts = {"summary": model.summary(), "kind": pos.kind, "layers": []}
    if pos.rotary is not None:
        r = pos.rotary
        facts["rope"] = (r.rope_type, r.rotary_dim, r.attention_factor, r.pairing, r.inv_freq.dtype,
                         r.inv_freq.numpy().tobytes())
    for i in range(model.num_layers):
        layer = model.layer(i)
        facts["layers"].append((layer.scale, layer.causal, layer.sliding_window, dict(layer.tensor_names)))
    return facts


def _same(folder):
    light = idinspect.load(folder)
    assert isinstance(light.config, CheckpointConfig)
    auto = _with_auto_config(light)
    assert _facts(light) == _facts(auto)
    return light, auto


@pytest.mark.parametrize("variant", sorted(tiny.VARIANTS))
def test_saved_configs_give_autoconfig_facts(variant, tiny_dir):
    light, auto = _same(tiny_dir(variant))
    assert analyze(light) == analyze(auto)


def _rewrite(src, tmp_path, edit) -> object:
    """A copy of checkpoint ``src`` whose config.json is ``edit(settings)`` (weights untouched)."""
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    settings = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(edit(settings)))
    return dst


def _drop(*keys):
    def edit(s):
        for k in keys:
            s.pop(k, None)
        return s
    return edit


def _legacy_rope(rope_scaling, **top):
    def edit(s):
        s.pop("rope_parameters", None)
        s["rope_scaling"] = rope_scaling
        s.update(top)
        return s
    return edit


LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
          "rope_type": "llama3"}

EDITS = {
    # name: (variant, edit of config.json)
    "llama3 legacy (rope_scaling + top-level theta)": ("llama3-rope", _legacy_rope(LLAMA3, rope_theta=500000.0)),
    "llama3 legacy, no original_max (falls back to max_position)": (
        "llama3-rope", _legacy_rope({k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"},
                                    rope_theta=500000.0)),
    "llama3 legacy, no max_position either (class default)": (
        "llama3-rope", lambda s: _drop("max_position_embeddings")(_legacy_rope(
            {k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}, rope_theta=5e5)(s))),
    "llama2 legacy (theta, null scaling)": ("llama-gqa", _legacy_rope(None, rope_theta=12345.0)),
    "no RoPE settings at all": ("llama-gqa", _drop("rope_parameters", "rope_theta", "rope_scaling")),
    "old 'type' key, linear": ("llama-gqa", _legacy_rope({"type": "linear", "factor": 2.0})),
    "yarn legacy": ("llama-yarn", _legacy_rope({"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 16}, rope_theta=10000.0)),
    "dynamic": ("llama-gqa", _legacy_rope({"rope_type": "dynamic", "factor": 2.0})),
    "default type with partial_rotary_factor": (
        "llama-gqa", lambda s: {**s, "rope_parameters": {"rope_type": "default", "rope_theta": 9.0e3,
                                                         "partial_rotary_factor": 0.5}}),
    "llama sparse (no head_dim, no attention_bias)": ("llama-gqa", _drop("head_dim", "attention_bias")),
    "llama MHA without num_key_value_heads": ("llama-mha", _drop("num_key_value_heads", "head_dim")),
    "mistral without sliding_window (class default 4096)": ("mistral", _drop("sliding_window", "head_dim")),
    "mistral sliding_window null": ("mistral", lambda s: {**s, "sliding_window": None}),
    "qwen2 sparse": ("qwen2", _drop("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")),
    "qwen2 sliding from layer 1": ("qwen2", lambda s: {**_drop("layer_types")(s), "use_sliding_window": True,
                                                       "sliding_window": 3, "max_window_layers": 1}),
    "qwen2 window without use_sliding_window": ("qwen2", lambda s: {**_drop("layer_types")(s), "sliding_window": 3,
                                                                    "max_window_layers": 0}),
    "gpt2 minimal": ("gpt2-inverse-layer-scale", lambda s: {k: s[k] for k in
                                                            ("model_type", "n_embd", "n_head", "n_layer", "vocab_size",
                                                             "architectures")}),
    "gpt2 unscaled attention": ("gpt2", lambda s: {**s, "scale_attn_weights": False}),
    "bert minimal": ("bert-decoder", lambda s: {k: s[k] for k in ("model_type", "hidden_size", "num_attention_heads",
                                                                  "num_hidden_layers", "vocab_size",
                                                                  "max_position_embeddings")}),
    "roberta without architectures": ("roberta", _drop("architectures")),
    # partial-rotary families: legacy and sparse RoPE keys, standardised by each family's config class
    "gpt_neox legacy (rotary_pct, rotary_emb_base)": (
        "gpt-neox", lambda s: {**_drop("rope_parameters")(s), "rotary_pct": 0.5, "rotary_emb_base": 20000}),
    "gpt_neox without RoPE settings (rotary_pct 0.25)": ("gpt-neox-no-bias-full-rotary", _drop("rope_parameters")),
    "phi legacy (top-level partial_rotary_factor, rope_theta)": (
        "phi", lambda s: {**_drop("rope_parameters")(s), "partial_rotary_factor": 0.25, "rope_theta": 5000.0}),
    "phi without RoPE settings (factor 0.5)": ("phi-full-rotary", _drop("rope_parameters")),
    "stablelm legacy (top-level partial_rotary_factor, rope_theta)": (
        "stablelm", lambda s: {**_drop("rope_parameters")(s), "partial_rotary_factor": 0.5, "rope_theta": 500.0}),
    "stablelm without RoPE settings (factor 0.25)": ("stablelm", _drop("rope_parameters")),
    "phi3 legacy rope_scaling 'su' (longrope)": (
        "phi3-longrope", _legacy_rope({"type": "su", "short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0]},
                                      rope_theta=10000.0)),
    "phi3 sparse (no sliding_window, no RoPE settings)": ("phi3-mha-sliding", _drop("sliding_window", "rope_parameters")),
    "qwen2_moe without layer_types (sliding from use_sliding_window)": ("qwen2-moe-sliding-no-bias", _drop("layer_types")),
    "starcoder2 sparse (use_bias, sliding_window)": ("starcoder2", _drop("use_bias", "sliding_window")),
    "granite without attention_multiplier (class default)": ("granite", _drop("attention_multiplier")),
    "gptj minimal": ("gptj", lambda s: {k: s[k] for k in (
        "model_type", "n_embd", "n_head", "n_layer", "vocab_size", "rotary_dim", "n_positions", "architectures")}),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_sparse_and_legacy_configs_give_autoconfig_facts(name, tiny_dir, tmp_path):
    variant, edit = EDITS[name]
    _same(_rewrite(tiny_dir(variant), tmp_path, edit))


def test_the_edits_reach_what_they_are_about(tiny_dir, tmp_path):
    """Guards the table above against edits that change nothing the adapters see."""
    legacy = idinspect.load(_rewrite(tiny_dir("llama-gqa"), tmp_path / "a", _legacy_rope(None, rope_theta=12345.0)))
    assert legacy.adapter.positional().rotary.inv_freq[1] == pytest.approx(12345.0 ** (-2 / 4), rel=1e-6)
    qwen = idinspect.load(_rewrite(tiny_dir("qwen2"), tmp_path / "b", EDITS["qwen2 sliding from layer 1"][1]))
    assert [qwen.layer(i).sliding_window for i in range(2)] == [None, 3]
    gpt2 = idinspect.load(_rewrite(tiny_dir("gpt2-inverse-layer-scale"), tmp_path / "c", EDITS["gpt2 minimal"][1]))
    assert gpt2.layer(2).scale == 4 ** -0.5      # scale_attn_by_inverse_layer_idx dropped: class default False
    mistral = idinspect.load(_rewrite(tiny_dir("mistral"), tmp_path / "d", EDITS["mistral without sliding_window (class default 4096)"][1]))
    assert mistral.layer(0).sliding_window == 4096
    partial = idinspect.load(_rewrite(tiny_dir("llama-gqa"), tmp_path / "e", EDITS["default type with partial_rotary_factor"][1]))
    assert partial.adapter.positional().rotary.rotary_dim == 4   # Llama's default RoPE ignores the factor


def test_inspecting_imports_no_config_class(tiny_dir):
    """The point of idinspect.sources.config (and of rope's native default and llama3 paths): inspecting these
    checkpoints imports no part of transformers, nor torch.distributed.tensor."""
    # one process inspects them in turn and lists what each one added (one torch import, not nine)
    probe = ("import sys, idinspect\n"
             "for path in sys.argv[1:]:\n"
             "    idinspect.inspect(path)\n"
             "    print(sorted(m for m in sys.modules if m.startswith('transformers') or m == 'torch.distributed.tensor'))")
    variants = ("llama-gqa", "llama3-rope", "gpt2", "bert", "mistral", "qwen2", "phi", "gpt-neox", "gptj")
    out = subprocess.run([sys.executable, "-c", probe, *(str(tiny_dir(v)) for v in variants)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert len(out) == len(variants), out
    for variant, imported in zip(variants, out):
        assert imported == "[]", (variant, imported)   # the first variant whose inspection imported them


def test_hf_config_is_the_full_class(tiny_dir):
    model = idinspect.load(tiny_dir("qwen2"))
    assert isinstance(model.hf_config, tf.Qwen2Config)
    assert model.config.to_dict() == json.loads((tiny_dir("qwen2") / "config.json").read_text())
    live = idinspect.load(tiny.build("qwen2"))
    assert live.hf_config is live.config


def test_unusable_rope_settings_are_one_line_errors(tiny_dir, tmp_path):
    folder = _rewrite(tiny_dir("llama-gqa"), tmp_path, _legacy_rope({"rope_type": "llama3", "factor": 8.0}))
    with pytest.raises(idinspect.IdinspectError, match=r"config.json: RoPE settings that transformers cannot use"):
        idinspect.load(folder)


def test_checkpoint_config_attribute_semantics():
    cfg = CheckpointConfig({"model_type": "gpt2", "n_embd": 32})
    assert cfg.n_embd == 32 and cfg.optional("n_head") is None                 # stored; optional never asks
    assert cfg.n_head == tf.GPT2Config().n_head                                # absent: the class's value
    assert cfg.hidden_size == 32                                               # the class's alias of n_embd
    assert getattr(cfg, "not_a_setting", "fallback") == "fallback"
    assert "n_embd" in cfg and "n_head" not in cfg
