"""The shipped JSON Schema is valid draft 2020-12 and real output (tiny models, MiniLM, --prove,
NaN findings) validates against it; broken output does not."""

import copy
import json
from importlib.resources import files

import jsonschema
import pytest
from safetensors.torch import load_file, save_file

from tests.support.cli import run_cli


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(files("idinspect").joinpath("schemas/report.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    return jsonschema.Draft202012Validator(schema)


def _json(*args) -> dict:
    res = run_cli(*args, "--format", "json")
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def test_minilm_output_with_proof_validates(minilm_dir, validator):
    result = _json(minilm_dir, "--prove")
    validator.validate(result)
    assert result["proof"]["agree"] is True


def test_output_with_non_finite_tensors_validates(tiny_dir, tmp_path, validator):
    import shutil

    path = tmp_path / "nan"
    shutil.copytree(tiny_dir("gpt2"), path)
    tensors = load_file(path / "model.safetensors")
    tensors["transformer.h.0.attn.c_attn.weight"][0, 0] = float("nan")
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    result = _json(path)
    validator.validate(result)
    assert [f["rule"] for f in result["findings"]].count("non-finite") == 1


def test_invalid_output_is_rejected(tiny_dir, validator):
    good = _json(tiny_dir("llama-bias"))
    for breaking in (
        lambda r: r["totals"].pop("identification_ratio"),
        lambda r: r["layers"][0].__setitem__("unidentified_parameters", -1),
        lambda r: r["layers"][0]["spectra"]["qk"].__setitem__(0, "big"),
        lambda r: r["findings"].append({"rule": "noop-bias", "severity": "error", "layer": 0, "tensor": "x",
                                        "parameters": 1, "message": "m", "max_abs": 1.0}),
        lambda r: r.__setitem__("schema_version", 2),
    ):
        bad = copy.deepcopy(good)
        breaking(bad)
        assert not validator.is_valid(bad)
    extended = copy.deepcopy(good)
    extended["layers"][0]["a_key_added_later"] = {"anything": [1, 2]}
    assert validator.is_valid(extended)                 # keys are only ever added
