"""``compare --whole-model``: the MLP unit invariants are evidence beyond attention.

A copy disguised by norm-gain rescaling, gated-unit scalings (with signs), a permutation of the
units, an attention gauge move and (untied) a residual rotation is still the same function, in
float64 and stored in bf16; a copy whose attention is untouched but one MLP unit changed passes
the attention invariants (their blind spot) and is caught by the MLP units, which the record names
as the deciding evidence.
"""

from __future__ import annotations

import json

import pytest
import torch

from idinspect.compare import compare
from tests.support.cli import run_cli
from tests.support.whole_disguise import disguise
from tests.support.whole_jacobian import model_class, randomised

RMS = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           head_dim=4, vocab_size=40, max_position_embeddings=64)


def _llama(tied: bool):
    return randomised(model_class("LlamaForCausalLM"), model_class("LlamaConfig")(**RMS, tie_word_embeddings=tied))


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["float64", "bf16"])
def test_disguised_copy_is_the_same_function_on_all_evidence(tied, dtype, tmp_path):
    model = _llama(tied)
    model.to(dtype).save_pretrained(tmp_path / "a")
    model.to(torch.float64)
    disguise(model, permute_units=True)
    model.to(dtype).save_pretrained(tmp_path / "b")
    r = compare(tmp_path / "a", tmp_path / "b", whole_model=True)
    sf = r.same_function
    assert r.verdict == "same-function", sf
    assert sf["evidence"] == ["attention", "mlp"] and sf["mlp"]["holds"] and sf["decided_by"] == "attention and mlp"
    assert sf["mlp"]["worst"]["ratio"] <= 1.0


def test_an_mlp_change_is_invisible_to_attention_and_caught_by_the_units(tmp_path):
    model = _llama(False)
    model.save_pretrained(tmp_path / "a")
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[:, 3].mul_(1.001)     # one unit's output, 0.1 %
    model.save_pretrained(tmp_path / "b")
    blind = compare(tmp_path / "a", tmp_path / "b")
    assert blind.verdict == "same-function" and blind.same_function["decided_by"] == "attention"
    assert blind.same_function["mlp"]["compared"] is False
    r = compare(tmp_path / "a", tmp_path / "b", whole_model=True)
    sf = r.same_function
    assert r.verdict != "same-function" and sf["attention_holds"] and not sf["mlp"]["holds"]
    assert sf["decided_by"] == "mlp" and sf["mlp"]["worst"]["layer"] == 1
    assert sf["reason"] == "attention agrees, the MLP units do not"


def test_cli_names_the_deciding_evidence(tmp_path):
    model = _llama(True)
    model.save_pretrained(tmp_path / "a")
    with torch.no_grad():
        model.model.layers[0].mlp.gate_proj.weight[5].mul_(1.01)
    model.save_pretrained(tmp_path / "b")
    r = run_cli("compare", tmp_path / "a", tmp_path / "b", "--whole-model", "--progress", "never")
    assert r.code == 1, r.stderr
    assert "MLP units: differ" in r.stdout and "decided by mlp" in r.stdout and "attention: same" in r.stdout
    r = run_cli("compare", tmp_path / "a", tmp_path / "b", "--whole-model", "--format", "json", "--progress", "never")
    record = json.loads(r.stdout)
    assert record["same_function"]["mlp"]["worst"]["quantity"] in ("gate", "cosine")


def test_a_family_outside_the_units_says_why(tiny_dir):
    path = tiny_dir("gpt2")
    r = compare(path, path, whole_model=True)
    assert r.verdict == "same-function"
    assert r.same_function["mlp"] == {"compared": False, "reason": r.same_function["mlp"]["reason"]}
    assert "model_type 'gpt2'" in r.same_function["mlp"]["reason"]


def test_fingerprint_carries_the_units_and_compare_uses_them(tmp_path):
    model = _llama(False)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "a")
    model.to(torch.float64)
    disguise(model, permute_units=True)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "b")
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[2].mul_(1.05)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "c")
    r = run_cli("fingerprint", tmp_path / "a", "--whole-model", "-o", tmp_path / "a.json")
    assert r.code == 0, r.stderr
    fp = json.loads((tmp_path / "a.json").read_text())
    assert fp["mlp"]["dtypes"] == ["bfloat16"] and len(fp["mlp"]["layers"]) == 2
    same = compare(tmp_path / "a.json", tmp_path / "b", whole_model=True)
    assert same.verdict == "same-function" and same.same_function["decided_by"] == "attention and mlp"
    other = compare(tmp_path / "a.json", tmp_path / "c", whole_model=True)
    assert other.verdict != "same-function" and other.same_function["decided_by"] == "mlp"
    # attention-only fingerprints keep their digest: the section is digested only where present
    plain = run_cli("fingerprint", tmp_path / "a", "--digest").stdout.strip()
    whole = run_cli("fingerprint", tmp_path / "a", "--whole-model", "--digest").stdout.strip()
    assert plain != whole and plain.startswith("sha256:")
    assert "mlp" not in json.loads(run_cli("fingerprint", tmp_path / "a").stdout)


def test_a_forged_unit_radius_is_refused(tmp_path):
    import base64

    import numpy as np

    from idinspect.compare.fingerprint_check import canonical_digest

    _llama(True).save_pretrained(tmp_path / "a")
    fp = json.loads(run_cli("fingerprint", tmp_path / "a", "--whole-model").stdout)
    entry = fp["mlp"]["layers"][1]
    wide = np.frombuffer(base64.b64decode(entry["radius_scale"]), "<f4") * 1e6
    entry["radius_scale"] = base64.b64encode(wide.astype("<f4").tobytes()).decode()
    fp["integrity"] = canonical_digest(fp)              # a forger recomputes the digest too
    (tmp_path / "forged.json").write_text(json.dumps(fp))
    r = run_cli("compare", tmp_path / "forged.json", tmp_path / "a", "--whole-model")
    assert r.code == 2 and "mlp layer 1 unit" in r.stderr and "radius_scale" in r.stderr and "above the largest" in r.stderr
