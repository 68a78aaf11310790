"""``export --whole-model``: a checkpoint and a copy disguised by every whole-model symmetry (random
norm-gain rescaling with signs, gated-unit scalings with signs, a random residual rotation where the
head is untied, and a random attention gauge move) export to the same weights, and stock transformers
loads both exports with the original's logits (float64: 1e-12 relative; float32: a bound stated
below). The disguise is written here from the model's own parameters, independently of idinspect.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from idinspect.exporting.pipeline import export
from tests.support.cli import run_cli
from tests.support.jacobian import exact_softmax
from tests.support.whole_disguise import disguise
from tests.support.whole_jacobian import (
    exact_rms_norms,
    exact_routers,
    model_class,
    randomised,
)

RMS = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           head_dim=4, vocab_size=40, max_position_embeddings=64)
#: name -> (config class, model class, config keywords)
VARIANTS = {
    "llama-untied": ("LlamaConfig", "LlamaForCausalLM", {**RMS, "tie_word_embeddings": False}),
    "llama-tied": ("LlamaConfig", "LlamaForCausalLM", {**RMS, "tie_word_embeddings": True}),
    "llama-bias": ("LlamaConfig", "LlamaForCausalLM", {**RMS, "tie_word_embeddings": False, "attention_bias": True,
                                                       "mlp_bias": True}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {**RMS, "tie_word_embeddings": False, "sliding_window": 4}),
    "qwen2-tied": ("Qwen2Config", "Qwen2ForCausalLM", {**RMS, "tie_word_embeddings": True}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**RMS, "tie_word_embeddings": False, "pad_token_id": 0,
                                                "bos_token_id": 1, "eos_token_id": 2}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {**RMS, "tie_word_embeddings": False, "num_local_experts": 3,
                                                        "num_experts_per_tok": 2}),
    "mixtral-top1-tied": ("MixtralConfig", "MixtralForCausalLM", {**RMS, "tie_word_embeddings": True,
                                                                  "num_local_experts": 2, "num_experts_per_tok": 1}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {**RMS, "tie_word_embeddings": False,
                                                        "embedding_multiplier": 2.0, "residual_multiplier": 0.5,
                                                        "logits_scaling": 3.0, "attention_multiplier": 0.7}),
}
#: The two exports agree to this, relative to each tensor's largest entry. float64: measured at most
#: 2e-14 over the variants. float32: measured 2.3e-7 (4 float32 ulps): the fix works in float64 from
#: float32 inputs that differ by the disguise's rounding (1 ulp each), carried through the rotation's
#: eigenvectors and the attention gauge; the bound is 32 ulps (2^-19).
FLOAT64_RTOL = 1e-12
FLOAT32_RTOL = 2.0 ** -19


def _model(name: str, seed: int = 0):
    config_cls, cls, kw = VARIANTS[name]
    return randomised(model_class(cls), model_class(config_cls)(**kw), seed=seed)


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    """float64 logits, the RMSNorms and the attention softmax computing in float64 too (transformers' cast
    them to float32 inside, where the dropped key bias would show as a 3e-7 change)."""
    with torch.no_grad(), exact_rms_norms(model), exact_softmax(), exact_routers(model):
        return model(input_ids=ids).logits


def _load(path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64, attn_implementation="eager").eval()
    model.config._experts_implementation = "eager"      # MoE grouped_mm kernels take no float64
    return model


def _tensors(path) -> dict[str, torch.Tensor]:
    with safe_open(path / "model.safetensors", "pt") as f:
        return {k: f.get_tensor(k).to(torch.float64) for k in f.keys()}


def _largest_difference(a: dict, b: dict) -> tuple[float, str]:
    assert a.keys() == b.keys()
    return max((float((a[k] - b[k]).abs().max() / a[k].abs().max().clamp_min(1e-300)), k) for k in a)


def _round_trip(model, move, tokens: int, tmp_path, name: str) -> tuple[dict, dict]:
    """Save ``model``, disguise it in place with ``move`` (checked to keep the logits), save again, export
    both with --whole-model; assert the two exports hold the same weights and both give the original
    logits through stock transformers. Returns (the plain export's tensors, its whole_model record)."""
    ids = torch.randint(0, model.config.vocab_size, (3, tokens), generator=torch.Generator().manual_seed(5))
    before = _logits(model, ids)
    model.save_pretrained(tmp_path / "plain")
    move(model)
    assert torch.allclose(_logits(model, ids), before, rtol=0, atol=1e-10 * before.abs().max())  # a symmetry
    model.save_pretrained(tmp_path / "disguised")
    results = {side: export(tmp_path / side, tmp_path / f"{side}-out", whole_model=True)
               for side in ("plain", "disguised")}
    worst, where = _largest_difference(_tensors(tmp_path / "plain-out"), _tensors(tmp_path / "disguised-out"))
    assert worst < FLOAT64_RTOL, f"{name}: the two exports differ by {worst:.3g} (relative) at {where}"
    for side in ("plain", "disguised"):
        got = _logits(_load(tmp_path / f"{side}-out"), ids)
        assert torch.allclose(got, before, rtol=0, atol=1e-11 * before.abs().max()), (side, (got - before).abs().max())
    return _tensors(tmp_path / "plain-out"), results["plain"].whole_model


LN = dict(n_embd=16, n_head=4, n_layer=2, n_positions=16, vocab_size=40, n_inner=24)
PRE_LN_VARIANTS = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", LN),
    "gpt2-relu": ("GPT2Config", "GPT2LMHeadModel", {**LN, "activation_function": "relu"}),
    "gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM", {**LN, "multi_query": True}),
}


def test_float32_disguised_copy_exports_within_the_stated_bound(tmp_path):
    model = _model("llama-untied")
    ids = torch.randint(0, model.config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(5))
    before = _logits(model, ids)
    model.to(torch.float32).save_pretrained(tmp_path / "plain")
    disguise(model.to(torch.float64))
    model.to(torch.float32).save_pretrained(tmp_path / "disguised")
    for side in ("plain", "disguised"):
        export(tmp_path / side, tmp_path / f"{side}-out", whole_model=True)
    worst, where = _largest_difference(_tensors(tmp_path / "plain-out"), _tensors(tmp_path / "disguised-out"))
    assert worst < FLOAT32_RTOL, f"the float32 exports differ by {worst:.3g} (relative) at {where}"
    got = _logits(_load(tmp_path / "plain-out"), ids)
    assert float((got - before).abs().max() / before.abs().max()) < 1e-5


def test_without_whole_model_only_attention_changes(tmp_path):
    """The flag is what rewrites norms, MLP and embeddings: without it they are copied bit for bit."""
    model = _model("llama-untied")
    model.save_pretrained(tmp_path / "in")
    export(tmp_path / "in", tmp_path / "out")
    a, b = _tensors(tmp_path / "in"), _tensors(tmp_path / "out")
    assert all(torch.equal(a[k], b[k]) for k in a if "self_attn" not in k)


@pytest.mark.parametrize("name,why", [("qwen3", "model_type 'qwen3' is not among them"),
                                      ("bert", "model_type 'bert' is not among them"),
                                      ("gpt2-cross", "derived for a tied head without cross-attention only")])
def test_families_outside_the_form_are_refused_by_name(name, why, tmp_path, tiny_dir):
    r = run_cli("export", tiny_dir(name), tmp_path / "out", "--whole-model")
    code, err = r.code, r.stderr
    assert code == 2 and why in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_summary_and_json_record(tmp_path):
    model = _model("llama-tied")
    model.save_pretrained(tmp_path / "in")
    r = run_cli("export", tmp_path / "in", tmp_path / "out", "--whole-model", "--format", "json", "--progress", "never")
    assert r.code == 0, r.stderr
    record = json.loads(r.stdout)["whole_model"]
    assert record["gauge"] == {"name": "whole-balanced", "version": 1}
    assert {u["symmetry"] for u in record["unfixed"]} == {"global_scale", "log_prob_head_shift", "tie_commutant"}
    r = run_cli("export", tmp_path / "in", tmp_path / "out2", "--whole-model", "--progress", "never")
    assert r.code == 0 and "whole model: whole-balanced v1" in r.stdout and "left global_scale" in r.stdout
