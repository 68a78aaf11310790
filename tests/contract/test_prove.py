"""--prove: the shrunken twin mirrors the model, and its Jacobian nullity equals its structural count."""

import json

import pytest
import torch
import transformers as tf

import idinspect
from idinspect.forms.per_head import prove as prove_mod
from idinspect.numerics import twin as twin_mod
from tests.support import tiny
from tests.support.cli import run_cli

VARIANTS = tiny.per_head(tiny.variants(), "its twin is an MLA block, not a per-head one (tests/forms/test_latent.py "
                                          "proves it with exact and nearly-null bands)")


@pytest.mark.parametrize("variant", VARIANTS)
def test_twin_proof_agrees_and_mirrors_the_model(variant, tiny_dir):
    model = idinspect.load(tiny_dir(variant))
    proof = prove_mod.prove(model)
    twin, original = proof["twin"], model.layer(0)
    assert proof["agree"] is True
    assert proof["jacobian_nullity"] == proof["structural_unidentified"] > 0
    assert proof["smallest_kept_singular_value"] > 1e-6 and proof["largest_dropped_singular_value"] < 1e-12
    assert proof["jacobian_shape"][1] == proof["attention_parameters"]
    assert twin["model_type"] == model.config.model_type
    assert twin["biases"] == [r for r in ("b_Q", "b_K", "b_V", "b_O") if getattr(original, r) is not None]
    assert twin["positional"] == original.positional.kind and twin["causal"] == original.causal
    assert twin["heads"] // twin["kv_heads"] == original.n_heads // original.n_kv_heads
    assert twin["heads"] <= 8
    if original.positional.kind == "rope":
        assert twin["rope_type"] == original.positional.rotary.rope_type
        # partial rotary stays partial in the twin (one rotated plane of its 4 dims), full stays full
        partial = original.positional.rotary_dim < original.d_k
        assert twin["rotary_dim"] == (2 if partial else twin["head_dim"])
    # the twin's count is idinspect's own pipeline on the twin, block by block
    rows = idinspect.inspect(twin_mod.build_twin(model)[0], spectra=False)["layers"]
    assert [b["structural_unidentified"] for b in proof["blocks"]] == [r["unidentified_parameters"] for r in rows]
    assert proof["structural_unidentified"] == sum(r["unidentified_parameters"] for r in rows)
    assert all(b["agree"] and b["jacobian_nullity"] == b["structural_unidentified"] for b in proof["blocks"])
    # every kind of block of every stack is proven (a one-layer twin's block is shared by no other layer)
    def kinds(pairs):
        return {("self" if kind == "shared" else kind, stack) for kind, stack in pairs}
    assert kinds((b["kind"], b["stack"]) for b in proof["blocks"]) == kinds((s.block.kind, s.stack)
                                                                            for s in model.adapter.sites)


def test_minilm_proof(minilm_dir):
    res = run_cli(minilm_dir, "--prove", "--format", "json")
    assert res.code == 0, res.stderr
    proof = json.loads(res.stdout)["proof"]
    assert (proof["twin"]["heads"], proof["twin"]["kv_heads"], proof["twin"]["head_dim"], proof["twin"]["hidden_size"]) == (4, 4, 2, 8)
    assert proof["twin"]["biases"] == ["b_Q", "b_K", "b_V", "b_O"] and proof["twin"]["causal"] is False
    # 4 heads x (QK 4 + VO 4) + no-op key bias 8 + absorbable value bias 8
    assert proof["jacobian_nullity"] == proof["structural_unidentified"] == 48 and proof["agree"]


def test_without_prove_there_is_no_proof(tiny_dir):
    res = run_cli(tiny_dir("gpt2"), "--format", "json")
    assert res.code == 0 and "proof" not in json.loads(res.stdout)


def test_twin_keeps_the_group_ratio_small():
    cfg = tf.LlamaConfig(hidden_size=64, intermediate_size=16, num_hidden_layers=1, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=2, vocab_size=32)
    model = idinspect.load(tf.LlamaForCausalLM(cfg))
    assert twin_mod.twin_shape(model) == {"heads": 8, "kv_heads": 2, "head_dim": 4, "hidden_size": 32}
    mha = idinspect.load(tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=64, intermediate_size=16, num_hidden_layers=1,
                                                            num_attention_heads=16, vocab_size=32)))
    assert twin_mod.twin_shape(mha) == {"heads": 4, "kv_heads": 4, "head_dim": 4, "hidden_size": 16}


def test_a_wrong_count_is_caught_and_fails_the_command(tiny_dir, monkeypatch):
    """The proof is not decorative: a miscounting structure makes --prove disagree and exit 1."""
    real = prove_mod.structure.unidentified_dims
    monkeypatch.setattr(prove_mod.structure, "unidentified_dims", lambda layer: real(layer) + 1)
    res = run_cli(tiny_dir("llama-gqa"), "--prove", "--format", "json")
    assert res.code == 1
    proof = json.loads(res.stdout)["proof"]
    assert proof["agree"] is False and proof["jacobian_nullity"] + 1 == proof["structural_unidentified"]
    assert "--prove failed" in res.stderr


def test_proof_restores_the_thread_count(tiny_dir, machine_threads):
    before = torch.get_num_threads()
    assert before == machine_threads
    prove_mod.prove(idinspect.load(tiny_dir("gpt2")))
    assert torch.get_num_threads() == before


def test_nearly_null_directions_are_per_block_in_the_proof_and_summed_in_the_model(tiny_dir):
    """OLMoE's q/k norm over each whole projection: 2 nearly-null scales per layer (derived, not fitted).
    A 2-layer model reports 4; its one-block twin's Jacobian band shows 2. Both are right, and the
    proof says which is which (issue 38's "4 reported, 2 in the oracle's band")."""
    import json

    from tests.support.cli import run_cli

    result = run_cli(tiny_dir("olmoe-bias"), "--prove", "--format", "json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    per_layer = [layer["near_unidentified"] for layer in doc["layers"]]
    assert per_layer == [2, 2] and doc["totals"]["near_unidentified"] == 4
    proof = doc["proof"]
    assert len(proof["blocks"]) == 1
    assert proof["jacobian_near_nullity"] == proof["structural_near_unidentified"] == per_layer[0]
    text = run_cli(tiny_dir("olmoe-bias"), "--prove")
    assert "in the twin's 1 block; the model's figure sums the same per-block count over its layers" in " ".join(
        text.stdout.split()).replace("│ ", "").replace(" │", "")
