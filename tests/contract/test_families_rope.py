"""RoPE decoder families beyond Llama: what the generic tests cannot see.

Legacy config.json RoPE keys reach the adapters as each family's config class reads them (the
AutoConfig comparisons in tests/contract/test_config.py prove equality; these prove the edits change the
rotary dims at all), and settings the mathematics does not model are refused by name.
"""

from __future__ import annotations

import json
import shutil

import pytest
import transformers as tf

import idinspect
from tests.support import tiny
from tests.support.cli import run_cli


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


def test_llama4_multimodal_counts_its_text_model_and_names_the_vision_tower(tiny_dir):
    """Llama4ForConditionalGeneration: the text model's counts are the text-only model's; the vision
    tower's attention (2-D RoPE, not modelled) is listed as not analysed with its parameters, and a
    checkpoint without text-model layers is a one-line error naming model_type 'llama4'."""
    both = [json.loads(run_cli(str(tiny_dir(v)), "--format", "json").stdout) for v in ("llama4", "llama4-text")]
    keys = ("attention_parameters", "unidentified_parameters", "near_unidentified", "qk_gauge", "vo_gauge")
    assert [[x[k] for k in keys] for x in both[0]["layers"]] == [[x[k] for k in keys] for x in both[1]["layers"]]
    assert both[0]["model"]["architecture"] == "Llama4ForConditionalGeneration"
    (vision,) = both[0]["model"]["not_analysed"]
    assert vision["module"] == "vision_model.model.layers.0.self_attn" and len(vision["tensors"]) == 8
    assert vision["parameters"] == 4 * (16 * 16 + 16) and "2-D RoPE" in vision["reason"]


def test_llama4_multimodal_without_text_layers_is_a_one_line_error(tmp_path):
    import torch
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama4", "text_config": {"num_hidden_layers": 1}}))
    save_file({"vision_model.model.layers.0.self_attn.q_proj.weight": torch.zeros(2, 2)}, tmp_path / "model.safetensors")
    res = run_cli(tmp_path)
    assert res.code == 2 and "Traceback" not in res.stderr, res.stderr
    assert "model_type 'llama4'" in res.stderr and "outside vision_model" in res.stderr, res.stderr


def _llama4(tmp_path, **settings):
    """A saved random float64 Llama 4 text model: the tiny variant's config with ``settings``."""
    import torch

    config = tiny.VARIANTS["llama4-text"].config()
    for k, v in settings.items():
        setattr(config, k, v)
    config._attn_implementation, config._experts_implementation = "sdpa", "eager"
    torch.manual_seed(0)
    hf = tf.Llama4ForCausalLM(config).to(torch.float64).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.5)
    tiny.save(hf, tmp_path)
    return hf


def test_llama4_text_layers_carry_their_kinds(tiny_dir):
    """Layer 0 (RoPE): interleaved complex RoPE, the weightless norm after it, chunks of 4; layer 1 (NoPE):
    no position, no norm, temperature-tuned queries, no chunks."""
    model = idinspect.load(tiny_dir("llama4-text"))
    rope, nope = model.layer(0), model.layer(1)
    assert rope.positional.kind == "rope" and rope.positional.rotary.pairing == "interleaved"
    assert rope.positional.rotary.polar
    assert (rope.qk_norm.kind, rope.qk_norm.scope, rope.qk_norm.after_rope, rope.qk_norm.q_gain) == ("l2", "head", True, None)
    assert rope.attention_chunk == 4 and rope.query_temperature is None
    assert nope.positional.kind == "none" and nope.qk_norm is None and nope.attention_chunk is None
    assert (nope.query_temperature.floor_scale, nope.query_temperature.attn_scale) == (2.0, 0.5)


def test_llama4_text_with_biases_matches_its_module_and_jacobian(tmp_path):
    """attention_bias on both layer kinds (the generic variant has none, as Llama 4's checkpoints): the
    reference equals the module (1e-10) and the Jacobian bands equal the counts. RoPE layer: 36 + 8
    (b_V folds into b_O) exact, H + G = 6 nearly null, b_K live under the norm; NoPE layer: 64 + 8
    no-op b_K (the temperature multiplies a row's shift, still a shift) + 8."""
    import torch

    from idinspect.forms import reference_attention
    from tests.contract.test_jacobian import _check_counts
    from tests.support.jacobian import attention_nullity

    hf = _llama4(tmp_path, attention_bias=True)
    layers = idinspect.inspect(tmp_path, spectra=False)["layers"]
    assert [(x["unidentified_parameters"], x["near_unidentified"], x["noop_bias"]) for x in layers] == [(44, 6, 0), (80, 0, 8)]
    model = idinspect.load(tmp_path)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    for i, (x, y, _) in enumerate(tiny.capture_attention(hf, ids)):
        out = reference_attention(model.layer(i), x)
        assert ((out - y).norm() / y.norm()).item() <= 1e-10, i
        n = attention_nullity(hf, *tiny.attention_modules(hf, i), seed=i, exact=model.adapter.exact_float64)
        _check_counts(n, layers[i], ("llama4 bias", i))


def test_llama4_chunk_and_temperature_reach_the_reference(tiny_dir):
    """Negative controls: the tiny variant's reference without its chunk mask or without its query
    temperature no longer equals the module."""
    import torch

    from idinspect.forms import reference_attention

    hf = tiny.build("llama4-text")
    model = idinspect.load(tiny_dir("llama4-text"))
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    (x0, y0, _), (x1, y1, _) = tiny.capture_attention(hf, ids)
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()
    assert rel(reference_attention(model.layer(0), x0), y0) <= 1e-10
    assert rel(reference_attention(model.layer(0).replace(attention_chunk=None), x0), y0) > 1e-3
    assert rel(reference_attention(model.layer(1), x1), y1) <= 1e-10
    assert rel(reference_attention(model.layer(1).replace(query_temperature=None), x1), y1) > 1e-3


@pytest.mark.parametrize("layer, code", [(1, 0), (0, 1)])
def test_llama4_generic_qk_move_is_a_gauge_only_on_the_nope_layer(layer, code, tiny_dir, tmp_path):
    """A generic GL(d_k) on W_Q, W_K (W_K A^-T) of one layer: the NoPE layer's full GL gauge, so verify
    says equivalent; on the RoPE layer (the norm after RoPE keeps only SO(2) per plane) it is a
    different function (exit 1)."""
    from idinspect.exporting.shard_writer import write_safetensors
    from tests.forms.test_gauge import random_gauge

    src = tiny_dir("llama4-text")
    model = idinspect.load(src)
    moved = model.layer(layer).to(__import__("torch").float64)
    moved = random_gauge(moved, seed=5, generic_qk=True).replace(W_V=moved.W_V, W_O=moved.W_O)
    replaced = model.adapter.write_layer(moved, dtype=model.reader.dtype(model.adapter.attention_keys(layer)[0]))
    dst = tmp_path / "moved"
    shutil.copytree(src, dst)
    for fname in model.reader.shard_files:
        tensors = {k: replaced.get(k, model.reader.get(k)) for k in model.reader.keys_in(fname)}
        write_safetensors(dst / fname, tensors, model.reader.metadata(fname))
    res = run_cli("verify", src, dst, "--format", "json")
    assert res.code == code, res.stdout + res.stderr


def test_llama4_reports_name_the_layer_kinds(tiny_dir, tmp_path):
    """Terminal, HTML and JSON say which layers have RoPE, the norm after it, chunks and the temperature."""
    src = tiny_dir("llama4-text")
    text = " ".join(run_cli(str(src)).stdout.replace("│", " ").split())   # the panel wraps lines inside its border
    html_path = tmp_path / "report.html"
    assert run_cli(str(src), "--html", str(html_path)).code == 0
    html = " ".join(html_path.read_text().split())
    for words in ("RoPE (rotary_dim 4) in 1 of 2 layers; no positions in 1", "q/k norm after RoPE in 1 layer",
                  "attention in chunks of 4 in 1 layer", "1 + 0.5 log(1 + floor((t + 1) / 2))"):
        assert words in text and words in html, words
    layers = json.loads(run_cli(str(src), "--format", "json").stdout)["layers"]
    assert [x["attention_chunk"] for x in layers] == [4, None] and layers[0]["qk_norm"]["after_rope"] is True
    assert layers[1]["query_temperature"] == {"floor_scale": 2.0, "attn_scale": 0.5} and layers[0]["query_temperature"] is None


@pytest.mark.parametrize("settings, words", [
    ({"no_rope_layers": [1, 2]}, "no_rope_layers is [1, 2]"),
    ({"no_rope_layers": [1]}, "no_rope_layers has 1 entries for 2 layers"),
    ({"attention_chunk_size": None}, "attention_chunk_size is null"),
    ({"attention_chunk_size": 0}, "attention_chunk_size is 0, not a positive integer"),
    ({"attention_chunk_size": 1}, "attention chunks of 1"),
    ({"floor_scale": 0}, "floor_scale is 0, not a positive number"),
])
def test_llama4_bad_settings_are_one_line_errors(settings, words, tiny_dir, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_dir("llama4-text"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(settings)
    (folder / "config.json").write_text(json.dumps(cfg))
    res = run_cli(folder)
    assert res.code == 2 and words in res.stderr and "Traceback" not in res.stderr, res.stderr
