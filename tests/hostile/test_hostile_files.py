"""Hostile matrix, group 2: malformed config.json, index, safetensors headers, policies and baselines.

Each is a one-line error naming the file and the key (exit 2, never "internal error"); sizes that
config.json implies are checked against the safetensors headers before anything is allocated.
"""

from __future__ import annotations

import json

import pytest

from tests.support.hostile import (
    case_dir,
    deep_json,
    edit_config,
    edit_header,
    raw_safetensors,
    run_case,
    write_text,
)

CONFIG_CASES = {
    # name: (variant, config changes, key that must be named)
    "model_type-list": ("llama-gqa", {"model_type": ["llama"]}, "model_type"),
    "model_type-dict": ("llama-gqa", {"model_type": {"a": 1}}, "model_type"),
    "model_type-number": ("bert", {"model_type": 7}, "model_type"),
    "rope_scaling-string": ("llama-gqa", {"rope_scaling": "linear"}, "rope_scaling"),
    "rope_parameters-list": ("llama-gqa", {"rope_parameters": [1, 2]}, "rope_parameters"),
    "rope_theta-string": ("llama-gqa", {"rope_theta": "big", "rope_parameters": None}, "rope_theta"),
    "rope_theta-negative": ("llama-gqa", {"rope_theta": -5.0, "rope_parameters": None}, "rope_theta"),
    "architectures-dict": ("llama-gqa", {"architectures": {"a": "LlamaForCausalLM"}}, "architectures"),
    "architectures-numbers": ("bert", {"architectures": [1, 2]}, "architectures"),
    "sliding_window-string": ("mistral", {"sliding_window": "4096"}, "sliding_window"),
    "layers-string": ("llama-gqa", {"num_hidden_layers": "2"}, "num_hidden_layers"),
    "layers-negative": ("llama-gqa", {"num_hidden_layers": -1}, "num_hidden_layers"),
    "layers-zero": ("bert", {"num_hidden_layers": 0}, "num_hidden_layers"),
    "layers-huge": ("llama-gqa", {"num_hidden_layers": 10**12}, "num_hidden_layers"),
    "heads-float": ("llama-gqa", {"num_attention_heads": 2.5}, "num_attention_heads"),
    "hidden-bool": ("bert", {"hidden_size": True}, "hidden_size"),
    "kv-heads-zero": ("llama-gqa", {"num_key_value_heads": 0}, "num_key_value_heads"),
    "kv-heads-not-divisor": ("llama-gqa", {"num_key_value_heads": 3}, "num_key_value_heads"),
    "head_dim-huge": ("llama-gqa", {"head_dim": 2**31}, "head_dim"),
    "head_dim-enormous": ("llama-head-dim", {"head_dim": 2**62}, "head_dim"),
    "hidden-huge": ("gpt2", {"n_embd": 2**40}, "n_embd"),
    "max_position-negative": ("llama-gqa", {"max_position_embeddings": -3}, "max_position_embeddings"),
    "max_position-string": ("gpt2", {"n_positions": "1024"}, "n_positions"),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_bad_config_value_is_one_line_naming_file_and_key(tiny_dir, tmp_path, case):
    variant, changes, key = CONFIG_CASES[case]
    model = case_dir(tiny_dir(variant), tmp_path)
    edit_config(model, **changes)
    run_case(tmp_path, "model", code=2, names=("config.json", key))


@pytest.mark.parametrize("text", [deep_json(), b"\xff\xfe{\x00}", "", "[1, 2]", '{"model_type": "llama",}'])
def test_unreadable_config_json(tiny_dir, tmp_path, text):
    model = case_dir(tiny_dir("llama-gqa"), tmp_path)
    write_text(model / "config.json", text)
    run_case(tmp_path, "model", code=2, names=("config.json",))


@pytest.mark.parametrize("command", ["export", "audit"])
def test_deep_config_in_other_commands(tiny_dir, tmp_path, command):
    model = case_dir(tiny_dir("llama-gqa"), tmp_path)
    write_text(model / "config.json", '{"model_type": "llama", "x": ' + deep_json() + "}")
    run_case(tmp_path, command, "model", *(["out"] if command == "export" else []), code=2, names=("config.json",))


@pytest.fixture
def sharded(tiny_dir, tmp_path):
    return lambda: case_dir(tiny_dir("llama-gqa", max_shard_size="20KB"), tmp_path)


INDEX = "model.safetensors.index.json"


def _edit_index(model, edit):
    data = json.loads((model / INDEX).read_text())
    edit(data)
    (model / INDEX).write_text(json.dumps(data))


@pytest.mark.parametrize("case, edit, key", [
    ("metadata-list", lambda d: d.update(metadata=[1, 2]), "metadata"),
    ("metadata-string", lambda d: d.update(metadata="x"), "metadata"),
    ("weight_map-list", lambda d: d.update(weight_map=["a"]), "weight_map"),
    ("shard-outside", lambda d: d["weight_map"].update({next(iter(d["weight_map"])): "../x.safetensors"}), "../x"),
    ("shard-absolute", lambda d: d["weight_map"].update({next(iter(d["weight_map"])): "/etc/passwd"}), "/etc/passwd"),
])
def test_bad_index(sharded, tmp_path, case, edit, key):
    model = sharded()
    _edit_index(model, edit)
    run_case(tmp_path, "model", code=2, names=(INDEX, key))


@pytest.mark.parametrize("command", ["inspect", "export"])
def test_deep_index(sharded, tmp_path, command):
    model = sharded()
    write_text(model / INDEX, '{"weight_map": ' + deep_json() + "}")
    run_case(tmp_path, command, "model", *(["out"] if command == "export" else []), code=2, names=(INDEX,))


def test_index_not_utf8(sharded, tmp_path):
    model = sharded()
    write_text(model / INDEX, b'{"weight_map": {"\xff": "a"}}')
    run_case(tmp_path, "model", code=2, names=(INDEX,))


HEADERS = {
    "huge-length": lambda p: p.write_bytes((2**62).to_bytes(8, "little") + b"{}"),
    "not-json": lambda p: raw_safetensors(p, b"{not json"),
    "offsets-past-end": lambda p: raw_safetensors(p, {"a": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}),
    "empty-file": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "shape-overflow": lambda p: raw_safetensors(p, {"a": {"dtype": "F32", "shape": [2**40, 2**40],
                                                          "data_offsets": [0, 0]}}),
    "unknown-dtype": lambda p: edit_header(p, lambda h: h["model.layers.0.self_attn.q_proj.weight"].update(dtype="F4")),
    "negative-offsets": lambda p: edit_header(p, lambda h: h["model.layers.0.self_attn.q_proj.weight"].update(
        data_offsets=[-8, 0])),
    "lfs-pointer": lambda p: p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n"),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_bad_safetensors(tiny_dir, tmp_path, case):
    model = case_dir(tiny_dir("llama-gqa"), tmp_path)
    HEADERS[case](model / "model.safetensors")
    run_case(tmp_path, "model", code=2, names=("model.safetensors",))


POLICIES = {
    "deep-array": "[tool.idinspect.audit]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "not-utf8": b"[tool.idinspect.audit]\nfail-on = \"\xff\xfe\"\n",
    "fail-on-number": "[tool.idinspect.audit]\nfail-on = 5\n",
    "audit-not-table": "[tool.idinspect]\naudit = 3\n",
}


@pytest.mark.parametrize("case", list(POLICIES))
def test_bad_policy(tiny_dir, tmp_path, case):
    case_dir(tiny_dir("llama-gqa"), tmp_path)
    write_text(tmp_path / "policy.toml", POLICIES[case])
    run_case(tmp_path, "audit", "model", "--config", "policy.toml", code=2, names=("policy.toml",))


@pytest.mark.parametrize("case, text", [("deep", deep_json()), ("list", "[]"), ("not-utf8", b"\xff{}"),
                                        ("findings-deep", '{"idinspect_baseline": 1, "findings": ' + deep_json() + "}")])
def test_bad_baseline(tiny_dir, tmp_path, case, text):
    case_dir(tiny_dir("llama-gqa"), tmp_path)
    write_text(tmp_path / "base.json", text)
    run_case(tmp_path, "audit", "model", "--baseline", "base.json", code=2, names=("base.json",))
