"""verify asks "same function?": the configuration keys the computation reads decide, other keys are
notes (``--strict-config`` makes every key count); a GGUF file verifies against its HF conversion."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
import transformers as tf

from idinspect.equivalence.config_keys import read_keys, split_differences
from tests.support import tiny
from tests.support.cli import run_cli


def _copy_with(src, dst, **settings):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(settings)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _config_check(stdout: str) -> dict:
    return next(c for c in json.loads(stdout)["checks"] if c["name"] == "config")


def test_metadata_differences_are_notes_not_failures(tiny_dir, tmp_path):
    src = tiny_dir("llama-gqa")
    other = _copy_with(src, tmp_path / "b", pad_token_id=3, unk_token_id=5, _name_or_path="someone/else",
                       initializer_range=0.5)
    res = run_cli("verify", src, other, "--format", "json")
    assert res.code == 0, res.stdout + res.stderr
    check = _config_check(res.stdout)
    assert check["passed"] is True and check["extra"]["differ"] == []
    assert set(check["extra"]["notes"]) == {"pad_token_id", "unk_token_id", "initializer_range"}
    text = run_cli("verify", src, other, "--no-functional").stdout
    assert "notes: 3 keys the computation does not read differ" in text and text.rstrip().endswith("equivalent")
    strict = run_cli("verify", src, other, "--no-functional", "--strict-config", "--format", "json")
    assert strict.code == 1
    assert set(_config_check(strict.stdout)["extra"]["differ"]) == {"pad_token_id", "unk_token_id", "initializer_range"}


@pytest.mark.parametrize("setting", [{"rms_norm_eps": 1e-3}, {"rope_parameters": {"rope_type": "default",
                                                                                  "rope_theta": 500.0}}])
def test_a_key_the_computation_reads_still_fails(setting, tiny_dir, tmp_path):
    src = tiny_dir("llama-gqa")
    res = run_cli("verify", src, _copy_with(src, tmp_path / "b", **setting), "--format", "json", "--no-functional")
    assert res.code == 1
    assert _config_check(res.stdout)["extra"]["differ"] == list(setting)


def test_the_read_keys_come_from_the_modelling_code():
    llama = read_keys(tf.LlamaConfig)
    assert {"hidden_size", "num_key_value_heads", "rms_norm_eps", "rope_parameters", "tie_word_embeddings"} <= llama
    assert not {"pad_token_id", "bos_token_id", "initializer_range", "attention_dropout", "use_cache"} & llama
    assert {"n_head", "n_embd", "n_positions", "layer_norm_epsilon"} <= read_keys(tf.GPT2Config)   # via attribute_map
    assert "pad_token_id" in read_keys(tf.RobertaConfig)      # positions are counted from the padding token
    assert {"query_pre_attn_scalar", "layer_types", "sliding_window"} <= read_keys(tf.Gemma3TextConfig)


def test_sub_config_keys_are_split_by_their_own_class():
    a = tf.Llama4Config().to_dict()
    b = copy.deepcopy(a)
    b["text_config"]["pad_token_id"], b["text_config"]["rms_norm_eps"] = 7, 0.5
    computed, notes = split_differences(a, b, "llama4")
    assert computed == ["text_config.rms_norm_eps"] and notes == ["text_config.pad_token_id"]


def test_a_gguf_verifies_against_its_hf_conversion(tmp_path):
    """The HF side carries generation token ids and a name the GGUF's synthesised config lacks."""
    from tests.support.gguf_convert import convert

    model = tiny.build("llama-gqa", dtype=torch.float32)
    model.config.bos_token_id, model.config.eos_token_id = 5, 6
    tiny.save(model, tmp_path / "hf", dtype=torch.float32)
    gguf = convert(model, tmp_path / "m.gguf", "F32")
    res = run_cli("verify", tmp_path / "hf", gguf, "--format", "json")
    assert res.code == 0, res.stdout + res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["config"]["passed"] and {"bos_token_id", "eos_token_id"} <= set(checks["config"]["extra"]["notes"])
    assert checks["functional"]["passed"] is None and "GGUF" in checks["functional"]["detail"]
    assert checks["invariants"]["passed"] and checks["tensors"]["passed"]


def test_library_verify_prints_no_loading_bars(tiny_dir, capfd):
    import idinspect

    src = tiny_dir("llama-gqa")
    capfd.readouterr()        # what building the fixture printed
    assert idinspect.verify(src, src)
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "it/s" not in err, err


def test_export_and_verify_state_the_same_largest_invariant_error(tiny_dir, tmp_path):
    """One definition, one function, one wording (gauge.invariants.largest_over_layers / describe_largest)."""
    from idinspect.forms.per_head.invariants import describe_largest

    src = tiny_dir("llama-gqa")
    exported = run_cli("export", src, tmp_path / "out", "--format", "json")
    assert exported.code == 0, exported.stderr
    record = json.loads(exported.stdout)
    res = run_cli("verify", src, tmp_path / "out", "--no-functional", "--format", "json")
    inv = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "invariants")
    line = describe_largest(record["max_invariant_error"], record["worst_invariant"])
    assert line in inv["detail"]
    text = run_cli("export", src, tmp_path / "again").stdout
    assert line in text
