"""RoPE decoder families beyond Llama: what the generic tests cannot see.

Legacy config.json RoPE keys reach the adapters as each family's config class reads them (the
AutoConfig comparisons in tests/test_config.py prove equality; these prove the edits change the
rotary dims at all), and settings the mathematics does not model are refused by name.
"""

from __future__ import annotations

import json
import shutil

import pytest
import transformers as tf

import idinspect
from tests import tiny
from tests.cli import run_cli


def _edited(src, dst, **settings):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop("rope_parameters", None)
    cfg.update(settings)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _rotary(folder):
    return idinspect.load(folder).layer(0).positional.rotary


@pytest.mark.parametrize("variant, settings, rotary_dim, planes_base", [
    ("gpt-neox", {"rotary_pct": 0.5, "rotary_emb_base": 100}, 4, 100.0),            # Pythia's names
    ("gpt-neox", {}, 2, 10000.0),                                                     # GPTNeoXConfig: 0.25
    ("phi", {"partial_rotary_factor": 0.25, "rope_theta": 100.0}, 2, 100.0),
    ("phi-full-rotary", {}, 2, 10000.0),                                              # PhiConfig: 0.5 of 4
    ("stablelm", {"partial_rotary_factor": 0.5, "rope_theta": 100.0}, 4, 100.0),
    ("stablelm-qkv-bias-gqa", {}, 0, 10000.0),                                         # 0.25 of 4 dims: 1, no plane
])
def test_legacy_rope_keys_reach_the_rotary_dims(variant, settings, rotary_dim, planes_base, tiny_dir, tmp_path):
    folder = _edited(tiny_dir(variant), tmp_path / "ckpt", **settings)
    if rotary_dim == 0:
        with pytest.raises(idinspect.IdinspectError, match="gives 1 rotary dims"):   # int(4 * 0.25): no plane
            idinspect.load(folder)
        return
    rotary = _rotary(folder)
    assert rotary.rotary_dim == rotary_dim
    assert float(rotary.inv_freq[0]) == 1.0
    if rotary_dim > 2:
        assert float(rotary.inv_freq[1]) == pytest.approx(planes_base ** (-2 / rotary_dim), rel=1e-6)


def test_gptj_rotates_interleaved_planes_of_the_first_rotary_dim_dims(tiny_dir):
    rotary = _rotary(tiny_dir("gptj"))
    assert rotary.pairing == "interleaved" and rotary.rotary_dim == 4
    assert rotary.plane_columns() == [(0, 1), (2, 3)]


def test_phi3_longrope_frequencies_use_the_short_factors(tiny_dir):
    rotary = _rotary(tiny_dir("phi3-longrope"))
    assert rotary.rope_type == "longrope" and rotary.attention_factor != 1.0


@pytest.mark.parametrize("variant, config_class, model_class", [
    ("phi", tf.PhiConfig, tf.PhiForCausalLM),
    ("stablelm", tf.StableLmConfig, tf.StableLmForCausalLM),
])
def test_qk_layernorm_is_read_as_a_qk_norm(variant, config_class, model_class, tmp_path):
    """Phi's shared LayerNorm (gain and bias) and StableLM's per-head ones are counted (docs/mathematics.md,
    "Normalised queries and keys"); the counts are proven by the qk-layernorm variants' Jacobians."""
    config = tiny.VARIANTS[variant].config()
    config.qk_layernorm = True
    tiny.save(model_class(config), tmp_path)
    norm = idinspect.load(tmp_path).layer(0).qk_norm
    assert norm is not None and (norm.kind, norm.scope) == ("layer", "head")
    assert (norm.q_bias is not None) == (variant == "phi")
    res = run_cli(tmp_path)
    assert res.code == 0 and "nearly unidentified" in res.stdout.lower(), res.stderr


@pytest.mark.parametrize("rotary_dim", [None, 10, 16, 3, 0])
def test_gptj_rotary_dim_outside_the_head_is_refused(rotary_dim, tiny_dir, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_dir("gptj"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["rotary_dim"] = rotary_dim   # head_dim is 8; None means n_embd (16)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(idinspect.IdinspectError, match=r"config.json: rotary_dim is .*GPT-J rotates"):
        idinspect.load(folder).layer(0)


def test_llama4_text_is_refused_by_name(tmp_path):
    cfg = tf.Llama4TextConfig(hidden_size=16, intermediate_size=32, intermediate_size_mlp=32, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=4, vocab_size=64,
                              max_position_embeddings=64, num_local_experts=1)
    tiny.save(tf.Llama4ForCausalLM(cfg), tmp_path)
    res = run_cli(tmp_path)
    assert res.code == 2 and "llama4_text" in res.stderr and "refused" in res.stderr and "Traceback" not in res.stderr
