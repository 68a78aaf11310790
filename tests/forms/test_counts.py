"""Counts, closed forms, totals and refusals (the Jacobian proofs are in test_jacobian.py)."""

import json
import logging
from fractions import Fraction

import pytest
import torch
import transformers as tf
from safetensors import safe_open

import idinspect
from idinspect.analysis import analyze_layer, bias_free_closed_form, resolve_device
from idinspect.errors import IdinspectError, UnsupportedLayerError
from idinspect.forms.per_head import structure
from idinspect.forms.per_head.counts import FORM_GENERAL, FORM_GQA, FORM_MHA, FORM_ROPE
from idinspect.layer.attention_layer import AttentionLayer, Positional, RotarySpec
from tests.support import tiny
from tests.support.cli import run_cli


def _layer(H, G, d, dk, biases="", rotary_dim=0, inv_freq=None, flags=frozenset(), window=None) -> AttentionLayer:
    z = torch.zeros
    pos = Positional("absolute")
    if rotary_dim:
        f = inv_freq if inv_freq is not None else 1.0 / 10000.0 ** (torch.arange(0, rotary_dim, 2) / rotary_dim)
        pos = Positional("rope", rotary=RotarySpec("half", rotary_dim, f.float()))
    return AttentionLayer(index=3, W_Q=z(H, d, dk), W_K=z(G, d, dk), W_V=z(G, d, dk), W_O=z(H, dk, d),
                          b_Q=z(H, dk) if "q" in biases else None, b_K=z(G, dk) if "k" in biases else None,
                          b_V=z(G, dk) if "v" in biases else None, b_O=z(d) if "o" in biases else None,
                          positional=pos, flags=flags, sliding_window=window)


# --- MiniLM: the real all-MiniLM-L6-v2 against its closed form -------------------------------------

def test_minilm_counts_match_the_closed_form(minilm_dir):
    result = idinspect.inspect(minilm_dir)
    H, d, dk, n_layers = 12, 384, 32, 6
    assert result["model"]["heads"] == H and result["model"]["hidden_size"] == d
    P = 4 * d * d + 4 * d                          # q, k, v, o weights and biases
    qk = vo = H * dk * dk
    U = qk + vo + H * dk + H * dk                  # + no-op key bias + absorbable value bias
    for layer in result["layers"]:
        assert layer["attention_parameters"] == P == 591_360
        assert (layer["qk_gauge"], layer["vo_gauge"], layer["noop_bias"], layer["absorbable_bias"]) == (qk, vo, 384, 384)
        assert layer["unidentified_parameters"] == U == 25_344
        assert layer["identification_ratio"] == pytest.approx(3 / 70, rel=1e-15)
        assert layer["closed_form"] == FORM_MHA and layer["closed_form_ratio"] == 1 / (2 * H)
        # the bias-free part is exactly the paper's 1/(2H)
        assert Fraction(layer["bias_free_unidentified"], layer["bias_free_parameters"]) == Fraction(1, 2 * H)
        assert layer["extra_unidentified"] == 0
    t = result["totals"]
    with safe_open(str(minilm_dir / "model.safetensors"), framework="pt") as f:
        stored = sum(f.get_slice(k).get_shape()[0] * (f.get_slice(k).get_shape()[1] if len(f.get_slice(k).get_shape()) > 1 else 1)
                     for k in f.keys() if f.get_slice(k).get_dtype().startswith(("F", "BF")))  # noqa: SIM118
    assert t["model_parameters"] == stored == 22_713_216
    assert t["attention_parameters"] == n_layers * P and t["unidentified_parameters"] == n_layers * U
    assert t["identification_ratio"] == pytest.approx(3 / 70, rel=1e-15)
    assert t["unidentified_share_of_model"] == pytest.approx(n_layers * U / stored, rel=1e-15)
    assert t["closed_form"] == FORM_MHA and t["closed_form_ratio"] == pytest.approx(1 / 24, rel=1e-15)
    rules = sorted((f["layer"], f["rule"]) for f in result["findings"])
    assert rules == sorted([(i, "noop-bias") for i in range(n_layers)] + [(i, "absorbable-bias") for i in range(n_layers)])


# --- closed forms -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, form, value", [
    ((4, 4, 16, 4, ""), FORM_MHA, Fraction(1, 8)),
    ((1, 1, 8, 8, ""), FORM_MHA, Fraction(1, 2)),                # a single head: 1/2
    ((4, 2, 16, 4, ""), FORM_GQA, Fraction(2, 4 * 6)),
    ((8, 1, 32, 4, ""), FORM_GQA, Fraction(1, 8 * 9)),           # multi-query
    ((4, 2, 16, 4, "rope4"), FORM_ROPE, Fraction(2 * (4 + 16), 2 * 16 * 4 * 6)),
    ((4, 2, 16, 8, "rope8"), FORM_ROPE, Fraction(2 * (8 + 64), 2 * 16 * 8 * 6)),   # head_dim != d/H
    ((2, 2, 12, 6, "rope2"), FORM_GENERAL, Fraction(2 * (2 + 16 + 36), 12 * 4 * 12)),  # partial rotary
    ((4, 2, 16, 8, ""), FORM_GENERAL, Fraction(2 * 128, 16 * 6 * 16)),   # no RoPE, head_dim != d/H
])
def test_closed_form_is_the_bias_free_count(shape, form, value):
    H, G, d, dk, rope = shape
    rd = int(rope[4:]) if rope else 0
    bare = _layer(H, G, d, dk, rotary_dim=rd)
    assert bias_free_closed_form(bare) == (form, value)
    # independent path: structure's count over the parameter count of the bias-free layer
    assert Fraction(structure.unidentified_dims(bare), bare.parameter_count()) == value
    counts, _ = analyze_layer(_layer(H, G, d, dk, "qkvo", rotary_dim=rd), spectra=False)
    assert counts["closed_form"] == form and counts["closed_form_ratio"] == float(value)
    with_biases = counts["unidentified_parameters"] / counts["attention_parameters"]
    assert counts["identification_ratio"] == with_biases


def test_bias_counts_follow_positional_scheme():
    no_rope = analyze_layer(_layer(4, 2, 16, 4, "qkvo"), spectra=False)[0]
    assert (no_rope["noop_bias"], no_rope["absorbable_bias"]) == (8, 8)
    full_rope = analyze_layer(_layer(4, 2, 16, 4, "qkvo", rotary_dim=4), spectra=False)[0]
    assert (full_rope["noop_bias"], full_rope["absorbable_bias"]) == (0, 8)      # rotated key bias is live
    partial = analyze_layer(_layer(2, 2, 12, 6, "qkvo", rotary_dim=2), spectra=False)[0]
    assert partial["noop_bias"] == 2 * 4 and partial["unidentified_parameters"] == 128
    no_out_bias = analyze_layer(_layer(4, 2, 16, 4, "qkv", rotary_dim=4), spectra=False)[0]
    assert (no_out_bias["absorbable_bias"], no_out_bias["redundant_value_bias"]) == (0, 0)
    wide = analyze_layer(_layer(4, 4, 8, 4, "qkv", rotary_dim=4), spectra=False)[0]   # G d_v = 16 > d = 8
    assert wide["redundant_value_bias"] == 8 and wide["unidentified_parameters"] == 4 * (4 + 16) + 8


def test_totals_sum_layers_and_name_mixed_forms(tiny_dir):
    result = idinspect.inspect(tiny_dir("gpt2-inverse-layer-scale"), spectra=False)
    t, layers = result["totals"], result["layers"]
    for key in ("attention_parameters", "unidentified_parameters", "qk_gauge", "vo_gauge", "noop_bias", "absorbable_bias"):
        assert t[key] == sum(layer[key] for layer in layers)
    assert t["identification_ratio"] == t["unidentified_parameters"] / t["attention_parameters"]
    from idinspect.analysis import model_totals

    mixed = model_totals([analyze_layer(_layer(4, 4, 16, 4), spectra=False)[0],
                          analyze_layer(_layer(4, 2, 16, 4), spectra=False)[0]], 10_000)
    assert mixed["closed_form"] == "mixed"
    assert mixed["closed_form_ratio"] == pytest.approx((128 + 64) / (1024 + 768))


def test_progress_callback_sees_every_layer(tiny_dir):
    calls = []
    idinspect.inspect(tiny_dir("gpt2-inverse-layer-scale"), on_layer=lambda i, n: calls.append((i, n)))
    assert calls == [(0, 3), (1, 3), (2, 3)]


# --- refusals -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", sorted(structure.UNMODELLED_FLAGS))
def test_unmodelled_flags_are_refused_by_name(flag):
    with pytest.raises(UnsupportedLayerError, match=flag):
        analyze_layer(_layer(2, 2, 8, 4, flags=frozenset({flag})))


@pytest.mark.parametrize("inv_freq, why", [
    (torch.tensor([1.0, 1.0]), "repeats a frequency"),
    (torch.tensor([1.0, 0.0]), "zero frequencies"),
    (torch.tensor([1.0, 4.0]), "outside"),                       # 4 = 4 - 2 pi (mod 2 pi): aliases
])
def test_degenerate_rope_frequencies_are_refused(inv_freq, why):
    with pytest.raises(UnsupportedLayerError, match=why):
        analyze_layer(_layer(2, 2, 8, 4, rotary_dim=4, inv_freq=inv_freq))


def test_other_unmodelled_shapes_are_refused():
    with pytest.raises(UnsupportedLayerError, match="sliding window 1"):
        analyze_layer(_layer(2, 2, 8, 4, window=1))
    with pytest.raises(UnsupportedLayerError, match="exceeds the model width"):
        analyze_layer(_layer(2, 2, 4, 8))


def test_proportional_rope_checkpoint_is_refused_on_the_cli(tmp_path):
    cfg = tf.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=64,
                         rope_parameters={"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
    tiny.save(tf.LlamaForCausalLM(cfg), tmp_path)
    res = run_cli(tmp_path, "--format", "json")
    assert res.code == 2 and res.stdout == ""
    assert "zero frequencies" in res.stderr and "proportional" in res.stderr


def test_flagged_layer_is_refused_on_the_cli(tiny_dir, monkeypatch):
    from idinspect.adapters.llama import LlamaAdapter

    original = LlamaAdapter.read_layer
    monkeypatch.setattr(LlamaAdapter, "read_layer", lambda self, i: original(self, i).replace(flags=frozenset({"qk_norm"})))
    res = run_cli(tiny_dir("llama-gqa"), "--format", "json")
    assert res.code == 2 and "qk_norm" in res.stderr and "refuses" in res.stderr


# --- device ---------------------------------------------------------------------------------------------

def test_cuda_without_a_gpu_falls_back_with_one_warning(tiny_dir, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="idinspect"):
        assert resolve_device("cuda") == torch.device("cpu")
    assert len(caplog.records) == 1 and "cuda" in caplog.records[0].getMessage()
    assert "\n" not in caplog.records[0].getMessage()
    cpu = idinspect.inspect(tiny_dir("llama-gqa"))
    fallback = idinspect.inspect(tiny_dir("llama-gqa"), device="cuda")
    assert json.dumps(cpu["layers"]) == json.dumps(fallback["layers"])
    res = run_cli(tiny_dir("llama-gqa"), "--format", "json", "--device", "cuda")
    assert res.code == 0 and json.loads(res.stdout)["totals"] == cpu["totals"]


def test_bad_device_is_a_clear_error():
    with pytest.raises(IdinspectError, match="device"):
        resolve_device("tpu")
    with pytest.raises(IdinspectError, match="device"):
        resolve_device("not a device")
