"""Declared vs measured lineage (issue 36): ``export`` writes a model card (README.md) declaring its
source as ``base_model`` with the tags idinspect and gauge-fixed and the export's figures, which
huggingface_hub's ModelCard reads back; ``audit --check-base-model`` compares a model with the base its
card declares and reports ``base-model-unrelated`` (with the p-value) only when they are unrelated."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from huggingface_hub import ModelCard, ModelCardData, metadata_load

from idinspect.exporting.pipeline import export
from tests.support.cli import run_cli

CONFIG = {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 64, "max_position_embeddings": 32}


def _llama(seed: int, folder):
    torch.manual_seed(seed)
    tf.LlamaForCausalLM(tf.LlamaConfig(**CONFIG)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("card")
    A = _llama(0, root / "A")
    (A / "README.md").write_text("---\nlicense: mit\ntags:\n- text-generation\n---\n\n# A tiny model\n\nSome words.\n")
    export(A, root / "A-fixed")
    C = _llama(1, root / "C")
    (C / "README.md").write_text(f"---\nbase_model: {A}\n---\n\n# Claims to come from A\n")
    return {"A": A, "fixed": root / "A-fixed", "C": C}


def test_export_writes_a_model_card(folders, tmp_path):
    card = ModelCard.load(folders["fixed"] / "README.md")
    assert card.data.base_model == str(folders["A"])
    assert card.data.tags == ["text-generation", "idinspect", "gauge-fixed"]
    assert card.data.license == "mit"                            # the source card's metadata kept
    assert "Some words." in card.text and "## idinspect export" in card.text
    assert "largest relative change of an invariant" in card.text
    # what ModelCard.validate() would send to the Hub (unreachable here): a YAML header that parses on its own
    # (metadata_load, independent of ModelCard) and round-trips through ModelCardData unchanged
    meta = metadata_load(folders["fixed"] / "README.md")
    assert meta["base_model"] == str(folders["A"]) and meta["tags"] == ["text-generation", "idinspect", "gauge-fixed"]
    assert ModelCardData(**meta).to_dict() == meta == card.data.to_dict()
    # exporting the export again: one figures section, tags not repeated, the new source declared
    export(folders["fixed"], tmp_path / "twice")
    again = ModelCard.load(tmp_path / "twice" / "README.md")
    assert again.text.count("## idinspect export") == 1 and "Some words." in again.text
    assert again.data.tags == ["text-generation", "idinspect", "gauge-fixed"]
    assert again.data.base_model == str(folders["fixed"])


def test_check_base_model_accepts_a_true_claim(folders):
    r = run_cli("audit", "--check-base-model", "--format", "json", folders["fixed"])
    assert r.code == 0, r.stdout + r.stderr
    findings = json.loads(r.stdout)["models"][0]["audit"]["findings"]
    assert not [f for f in findings if f["rule"] == "base-model-unrelated"]


def test_check_base_model_reports_a_false_claim(folders):
    r = run_cli("audit", "--check-base-model", "--format", "json", folders["C"])
    assert r.code == 1, r.stdout + r.stderr
    findings = [f for f in json.loads(r.stdout)["models"][0]["audit"]["findings"] if f["rule"] == "base-model-unrelated"]
    assert len(findings) == 1 and findings[0]["file"] == "README.md"
    assert str(folders["A"]) in findings[0]["message"] and "lineage p = " in findings[0]["message"]
    # without the flag the claim is not checked
    plain = run_cli("audit", "--format", "json", folders["C"])
    assert not [f for f in json.loads(plain.stdout)["models"][0]["audit"]["findings"] if f["rule"] == "base-model-unrelated"]


def test_unreadable_card_is_an_error_naming_it(folders, tmp_path):
    bad = _llama(2, tmp_path / "bad")
    (bad / "README.md").write_text("---\nbase_model: [unclosed\n---\n")
    r = run_cli("audit", "--check-base-model", bad)
    assert r.code == 2
    assert "README.md" in r.stderr and "model card" in r.stderr
