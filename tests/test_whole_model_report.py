"""``idinspect MODEL --whole-model``: the ``whole_model`` section in JSON (schema-valid) and on the
terminal, the tie diagnostics, families not derived named as such, and the closed forms at the real
Llama-3.2-1B / Llama-3.1-8B / GPT-2 small sizes (docs/mathematics.md "Whole-model symmetries")."""

from __future__ import annotations

import json
from importlib.resources import files

import jsonschema
import pytest

from idinspect.analysis.whole_model import PRE_LN, PRE_RMS_GATED, WholeModelShape, whole_model_counts
from tests.cli import run_cli


def _json(*args) -> dict:
    res = run_cli(*args, "--format", "json")
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(files("idinspect").joinpath("schemas/report.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("variant", ["llama3-rope", "llama-gqa", "gpt2", "phi3", "bert"])
def test_json_section_validates_and_adds_up(variant, tiny_dir, validator):
    result = _json(tiny_dir(variant), "--whole-model")
    validator.validate(result)
    section = result["whole_model"]
    assert section["parameters_total"] == result["totals"]["model_parameters"]
    assert section["parameters"]["attention"] == result["totals"]["attention_parameters"]
    if variant in ("phi3", "bert"):          # not derived: said by name, no count
        assert section["derived"] is False and repr(variant) in section["reason"] and "exact" not in section
        return
    assert section["exact"] == sum(c["count"] for c in section["components"])
    assert section["components"][0] == {"name": "attention", "count": result["totals"]["unidentified_parameters"],
                                        "formula": "sum over blocks of the attention count"}
    assert section["exact_log_prob"] == section["exact"] + section["log_prob_extra"]
    assert ("tie" in section) == (section["head"] == "tied")
    assert "whole_model" not in _json(tiny_dir(variant))          # only when asked


def test_terminal_panel_and_tie_diagnostics(tiny_dir):
    res = run_cli(tiny_dir("llama3-rope"), "--whole-model")
    assert res.code == 0, res.stderr
    text = " ".join(res.stdout.replace("│", " ").split())      # the panel wraps at the terminal's width
    assert "Whole model (--whole-model)" in text
    assert "the tie blocks the residual rotation (120 dimensions)" in text       # d = 16: 16*15/2
    assert "16 distinct values" in text and "8.0 KiB of head weights" in text   # 64 x 16 float64
    res = run_cli(tiny_dir("bert"), "--whole-model")
    assert res.code == 0 and "Not derived" in res.stdout


def _llama(layers, d, f, H, G, hd, vocab, head, multiplicities=()) -> dict:
    attention = layers * (G * hd + G * hd * hd)        # full RoPE, distinct frequencies, no biases
    return whole_model_counts(WholeModelShape(PRE_RMS_GATED, layers, d, f, vocab, head, 1e-5, attention,
                                              multiplicities or (1,) * d))


def test_real_sizes_match_the_figures_derived_by_hand():
    """The closed forms at real sizes against the figures computed by hand in docs/mathematics.md."""
    one_b = _llama(16, 2048, 8192, 32, 8, 64, 128256, "tied")
    assert one_b["exact"] == 729_088 and one_b["components"][0]["count"] == 532_480
    assert one_b["tie"]["residual_rotation_blocked"] == 2048 * 2047 // 2
    assert one_b["tie"]["untie_bytes"] == 128256 * 2048 * 2
    eight_b = _llama(32, 4096, 14336, 32, 8, 128, 128256, "untied")
    assert eight_b["exact"] == 13_338_624 and eight_b["log_prob_extra"] == 4096
    H, hd, d, L = 12, 64, 768, 12
    gpt2 = whole_model_counts(WholeModelShape(PRE_LN, L, d, 4 * d, 50257, "tied", 1e-5,
                                              L * (2 * H * hd * hd + 2 * H * hd), (1,) * d, positions=1024,
                                              attention_read=3 * d, attention_written=d, activation="gelu_new"))
    assert gpt2["exact"] == 1_346_584 and gpt2["log_prob_extra"] == 768
    # repeated final-gain values: m_k(m_k-1)/2 each (Llama), (m_k-1)(m_k-2)/2 (LayerNorm: rotations fixing 1)
    assert _llama(2, 8, 6, 4, 2, 2, 12, "tied", (3, 2, 1, 1, 1))["components"][-1]["count"] == 3 + 1
