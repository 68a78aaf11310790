"""``idinspect MODEL --whole-model``: the ``whole_model`` section in JSON (schema-valid) and on the
terminal, the tie diagnostics, families not derived named as such, and the closed forms at the real
Llama-3.2-1B / Llama-3.1-8B / GPT-2 small sizes (docs/mathematics.md "Whole-model symmetries")."""

from __future__ import annotations

import json
from importlib.resources import files

import jsonschema
import pytest

from idinspect.analysis.whole_model import (
    PRE_LN,
    PRE_RMS_GATED,
    WholeModelShape,
    whole_model_counts,
)
from tests.support.cli import run_cli


def _json(*args) -> dict:
    res = run_cli(*args, "--format", "json")
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(files("idinspect").joinpath("schemas/report.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


NOT_DERIVED = {"bert": "model_type 'bert' is not derived",
               "mpnet": "model_type 'mpnet' is not derived",
               "llama-base-model": "no language-model head (the outputs are hidden states)",
               "gpt2-cross": "derived for a tied head without cross-attention only"}


def test_terminal_panel_html_section_and_tie_diagnostics(tiny_dir, tmp_path):
    res = run_cli(tiny_dir("llama3-rope"), "--whole-model", "--html", tmp_path / "r.html")
    assert res.code == 0, res.stderr
    html = (tmp_path / "r.html").read_text()
    assert 'id="whole-model"' in html and "the tie blocks the residual rotation (120 dimensions)" in html
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


def test_real_configurations_from_shape_only_checkpoints():
    """End to end at real sizes: sparse shape-only checkpoints, the attention count from the headers,
    the rest from the config and the stored final gain (distinct values: tie term 0)."""
    from bench.whole_model_figures import figures

    got = figures()
    d, f, L, E = 4096, 14336, 32, 8       # Mixtral-8x7B: its attention is Llama-3.1-8B's (4,227,072)
    mixtral = 4_227_072 + L * (2 * d + E * f + d) + d * (d - 1) // 2 + d
    assert {k: (v["exact"], v["exact_log_prob"]) for k, v in got.items()} == {
        "Llama-3.2-1B": (729_088, 729_088), "Llama-3.1-8B": (13_338_624, 13_342_720),
        "GPT-2 small": (1_346_584, 1_347_352), "Mixtral-8x7B": (mixtral, mixtral + d)}
    assert got["Llama-3.2-1B"]["parameters_total"] == 1_235_814_400


def test_only_the_final_gain_is_read_beyond_attention(tiny_dir):
    """--whole-model reads headers and the final norm's gain: no MLP or embedding bytes."""
    import idinspect
    from idinspect.analysis.inspection import inspect

    for variant, gain in (("llama3-rope", "model.norm.weight"), ("gpt2", "transformer.ln_f.weight")):
        with idinspect.load(tiny_dir(variant)) as model:
            read: list[str] = []
            get = model.reader.get
            model.reader.get = lambda name, get=get: read.append(name) or get(name)
            plain = set(read) if inspect(model) else None
            read.clear()
            inspect(model, whole_model=True)
            assert set(read) - plain == {gain}, variant


def test_survey_row_columns(tiny_dir, tmp_path):
    """survey --whole-model fills whole_model_form and whole_model_symmetries (the logits count), says
    'not derived' by name where the form is not; without the option both stay null."""
    from idinspect.survey import SurveyOptions, survey_row

    llama = survey_row(str(tiny_dir("llama-gqa")), SurveyOptions(whole_model=True))
    report = idinspect_whole(tiny_dir("llama-gqa"))
    assert (llama["whole_model_form"], llama["whole_model_symmetries"]) == ("pre_rms_gated", report["exact"])
    bert = survey_row(str(tiny_dir("bert")), SurveyOptions(whole_model=True))
    assert (bert["whole_model_form"], bert["whole_model_symmetries"]) == ("not derived", None)
    plain = survey_row(str(tiny_dir("llama-gqa")))
    assert plain["whole_model_form"] is None and plain["whole_model_symmetries"] is None
    res = run_cli("survey", tiny_dir("gpt2"), "--whole-model", "--jsonl", tmp_path / "rows.jsonl", "-q")
    assert res.code == 0, res.stderr
    assert json.loads((tmp_path / "rows.jsonl").read_text().splitlines()[0])["whole_model_form"] == "pre_ln"


def idinspect_whole(path) -> dict:
    from idinspect.analysis.inspection import inspect

    return inspect(path, whole_model=True)["whole_model"]


def test_every_variant_has_a_whole_model_answer(tiny_dir):
    """Every supported variant gets a count that adds up, or 'not derived' with the reason: never a crash,
    never a silent number."""
    from idinspect.analysis.inspection import inspect
    from tests.support import tiny

    derived = set()
    for variant in tiny.variants():
        section = inspect(tiny_dir(variant), spectra=False, whole_model=True)["whole_model"]
        assert sum(section["parameters"].values()) == section["parameters_total"], variant
        if section["derived"]:
            assert section["exact"] == sum(c["count"] for c in section["components"]), variant
            derived.add(variant)
        else:
            assert section["reason"] and "exact" not in section, variant
    assert {"llama-gqa", "mistral", "qwen2", "phi3", "gpt2"} <= derived
