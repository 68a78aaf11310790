"""The per-variant contract of tests/cli/test_cli_errors.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/cli/."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

from tests.cli.test_cli_errors import MODEL_KEYS  # noqa: F401
from tests.support.cli import run_cli


@pytest.mark.parametrize("variant", ["bert", "gpt2", "llama3-rope", "qwen2"])
def test_json_is_the_only_thing_on_stdout(variant, tiny_dir):
    r = run_cli(str(tiny_dir(variant)), "--format", "json")
    assert r.code == 0, r.stderr
    result = json.loads(r.stdout)           # the whole of stdout is one JSON document
    assert list(result)[:3] == ["schema_version", "tool", "model"]
    assert result["schema_version"] == 1
    assert result["tool"] == {"name": "idinspect", "version": version("idinspect")}
    assert sorted(result["model"]) == sorted([*MODEL_KEYS, "files"])
    assert [f["name"] for f in result["model"]["files"]][0] == "config.json"
    assert all(len(f.get("sha256") or f.get("header_sha256")) == 64 and f["bytes"] > 0 for f in result["model"]["files"])
    model = result["model"]
    assert model["source"] == str(tiny_dir(variant)) and model["revision"] is None
    assert model["layers"] >= 2 and model["heads"] % model["kv_heads"] == 0
    assert model["positional"] == ("rope" if model["model_type"] in ("llama", "qwen2") else "absolute")
    assert (model["rotary_dim"] == model["head_dim"]) == (model["positional"] == "rope")
