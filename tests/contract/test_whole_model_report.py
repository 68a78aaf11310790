"""The per-variant contract of tests/reports/test_whole_model_report.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/reports/."""

from __future__ import annotations

import pytest

from tests.reports.test_whole_model_report import NOT_DERIVED, _json, validator  # noqa: F401


@pytest.mark.parametrize("variant", ["llama3-rope", "llama-gqa", "gpt2", "phi3", *NOT_DERIVED])
def test_json_section_validates_and_adds_up(variant, tiny_dir, validator):
    result = _json(tiny_dir(variant), "--whole-model")
    validator.validate(result)
    section = result["whole_model"]
    assert section["parameters_total"] == result["totals"]["model_parameters"]
    assert section["parameters"]["attention"] == result["totals"]["attention_parameters"]
    if variant in NOT_DERIVED:          # not derived: said by name, no count
        assert section["derived"] is False and NOT_DERIVED[variant] in section["reason"] and "exact" not in section
        return
    assert section["exact"] == sum(c["count"] for c in section["components"])
    assert section["components"][0] == {"name": "attention", "count": result["totals"]["unidentified_parameters"],
                                        "formula": "sum over blocks of the attention count"}
    assert section["exact_log_prob"] == section["exact"] + section["log_prob_extra"]
    assert ("tie" in section) == (section["head"] == "tied")
    assert "whole_model" not in _json(tiny_dir(variant))          # only when asked


@pytest.mark.parametrize("variant", ["llama3-rope", "llama-bias", "gpt2", "phi3"])
def test_prove_whole_model_agrees_on_a_twin(variant, tiny_dir):
    """--prove --whole-model: a small twin of the user's model (same class, tying, biases) whose whole-model
    Jacobian nullity equals its reported count, for logits and for log-probabilities."""
    result = _json(tiny_dir(variant), "--whole-model", "--prove")
    proof = result["whole_model"]["proof"]
    assert proof["agree"] is True, proof
    assert proof["twin"]["architecture"] == result["model"]["architecture"]
    assert proof["jacobian_nullity"] == proof["whole_model_count"]
    assert proof["jacobian_nullity_log_prob"] == proof["whole_model_count_log_prob"]
    tied = result["whole_model"]["head"] == "tied"
    assert proof["twin"]["head"] == result["whole_model"]["head"]
    assert (proof["whole_model_count_log_prob"] > proof["whole_model_count"]) == (not tied or variant == "gpt2")
    assert proof["largest_dropped_singular_value"] < 1e-14 < 1e-12 < proof["smallest_kept_singular_value"]
