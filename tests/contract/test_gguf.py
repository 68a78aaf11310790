"""The per-variant contract of tests/sources/test_gguf.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/sources/."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

import idinspect
from idinspect.analysis.inspection import inspect
from tests.sources.test_gguf import (  # noqa: F401
    _gemma3,
    _needs_adapter,
    _randomised,
    layers_equal,
    pair,
)


@pytest.mark.parametrize("variant", ["llama-gqa", "llama-bias", "mistral", "qwen2", "gpt2", "granite-bias-mha"])
@pytest.mark.parametrize("dtype, qtype", [(torch.float32, "F32"), (torch.float16, "F16"), (torch.bfloat16, "BF16")])
def test_float_gguf_matches_the_hf_original_exactly(variant, dtype, qtype, tmp_path):
    folder, path = pair(variant, tmp_path, dtype, qtype)
    with idinspect.load(folder) as hf, idinspect.load(path) as g:
        layers_equal(hf, g)
        a, b = inspect(hf), inspect(g)
    assert a["totals"] == b["totals"]
    assert a["layers"] == b["layers"]          # counts, spectra, ranks: bit for bit
    assert a["findings"] == b["findings"]
    types = b["model"]["gguf"]["tensor_types"]
    assert {t for n, t in types.items() if n.endswith(".weight")} == {qtype}
    assert all(t == "F32" for n, t in types.items() if n.endswith(".bias"))   # 1-D tensors stay F32
    for key in ("model_type", "layers", "hidden_size", "heads", "kv_heads", "head_dim", "positional", "rotary_dim"):
        assert a["model"][key] == b["model"][key], key


@pytest.mark.parametrize("variant, dtype, qtype", [
    ("phi3", torch.float32, "F32"), ("phi3", torch.float16, "F16"), ("phi3-partial-mqa", torch.float32, "F32"),
    ("phi3-partial-mqa", torch.float16, "F16"), ("phi3-longrope", torch.float32, "F32"),
    ("phi3-mha-sliding", torch.float16, "F16")])
def test_phi3_gguf_fused_qkv_matches_the_hf_original_exactly(variant, dtype, qtype, tmp_path):
    """llama.cpp's Phi-3 layout: fused attn_qkv, neox pairing (rows as stored), the rotary width as
    rope.dimension_count (partial RoPE), longrope factors as rope_factors_{long,short} tensors."""
    folder, path = pair(variant, tmp_path, dtype, qtype)
    with idinspect.load(folder) as hf, idinspect.load(path) as g:
        layers_equal(hf, g)
        a, b = inspect(hf), inspect(g)
        assert hf.layer(0).positional.rotary.inv_freq.tolist() == g.layer(0).positional.rotary.inv_freq.tolist()
    assert a["totals"] == b["totals"] and a["layers"] == b["layers"] and a["findings"] == b["findings"]
    for key in ("model_type", "layers", "hidden_size", "heads", "kv_heads", "head_dim", "positional", "rotary_dim"):
        assert a["model"][key] == b["model"][key], key
    assert b["model"]["gguf"]["tensor_types"] == {f"blk.{i}.{t}.weight": qtype
                                                  for i in range(2) for t in ("attn_qkv", "attn_output")}


@pytest.mark.parametrize("variant, dtype, qtype", [
    pytest.param(*p, marks=_needs_adapter("qwen3" if p[0].startswith("qwen3") else "gemma3_text")) for p in [
        ("qwen3", torch.float32, "F32"), ("qwen3", torch.float16, "F16"), ("qwen3-bias", torch.float32, "F32"),
        ("gemma3-6", torch.float32, "F32"), ("gemma3-6", torch.float16, "F16"), ("gemma3-2", torch.float32, "F32")]])
def test_qk_norm_gguf_matches_the_hf_original_exactly(variant, dtype, qtype, tmp_path):
    """qwen3 and gemma3: attn_q_norm / attn_k_norm -> self_attn.q_norm / k_norm, neox pairing; Gemma's
    norms stored as 1 + w and shifted back; its layer types (every sixth full, or the file's pattern)
    and RoPE per layer type."""
    model = {"qwen3-bias": lambda: _randomised(tf.Qwen3ForCausalLM(tf.Qwen3Config(
                 hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=8, attention_bias=True, vocab_size=64, max_position_embeddings=64))),
             "gemma3-6": lambda: _gemma3(6, ["sliding_attention"] * 5 + ["full_attention"]),
             "gemma3-2": lambda: _gemma3(2, ["sliding_attention", "full_attention"])}.get(variant, lambda: None)()
    folder, path = pair(variant, tmp_path, dtype, qtype, model=model)
    with idinspect.load(folder) as hf, idinspect.load(path) as g:
        layers_equal(hf, g)
        for i in range(hf.num_layers):
            a_norm, b_norm = hf.layer(i).qk_norm, g.layer(i).qk_norm
            assert a_norm.gain_offset == b_norm.gain_offset and (a_norm.kind, a_norm.scope) == (b_norm.kind, b_norm.scope)
            for gain in ("q_gain", "k_gain"):       # 1-D: F32 in GGUF, the HF dtype's values
                assert torch.equal(getattr(a_norm, gain).float(), getattr(b_norm, gain).float()), (i, gain)
            assert hf.layer(i).positional.rotary.inv_freq.tolist() == g.layer(i).positional.rotary.inv_freq.tolist()
        a, b = inspect(hf), inspect(g)
    assert a["totals"] == b["totals"] and a["layers"] == b["layers"] and a["findings"] == b["findings"]
    for key in ("model_type", "layers", "hidden_size", "heads", "kv_heads", "head_dim", "positional", "rotary_dim"):
        assert a["model"][key] == b["model"][key], key
