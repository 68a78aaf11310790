"""The rich terminal report: content, collapsing, escaping, NO_COLOR, narrow and non-TTY output, CLI."""

from __future__ import annotations

import io
import re

import pytest
from idinspect.reports.finding_words import finding_tensors
from idinspect.reports.summary import fmt_ratio, layer_groups
from idinspect.reports.terminal import layer_table, render_report
from rich.console import Console

from tests.support.cli import run_cli
from tests.support.report_fixtures import (
    EVIL,
    MARKUP,
    bert_result,
    llama_result,
    minimal_result,
)

SGR = re.compile(r"\x1b\[([0-9;]*)m")
COLOUR = re.compile(r"(?:^|;)(?:3[0-9]|9[0-7]|4[0-9]|10[0-7])(?:;|$)")


def render(result: dict, width: int = 130, **kwargs) -> str:
    buf = io.StringIO()
    render_report(result, Console(file=buf, width=width, color_system=None, force_terminal=False), **kwargs)
    return buf.getvalue()


def test_summary_names_model_shape_counts_ratio_and_findings():
    result = llama_result()
    out = render(result)
    assert "org/tiny-llama-gqa" in out
    assert "0123456789abcdef0123456789abcdef01234567" in out
    assert "llama (LlamaForCausalLM)" in out
    assert "H=4, G=2, d_k=4, d=16, 16 layers" in out
    assert "RoPE (rotary_dim 4)" in out
    totals = result["totals"]
    assert f"{totals['attention_parameters']:,} in attention of {totals['model_parameters']:,}" in out
    assert f"{totals['unidentified_parameters']:,} parameters = {fmt_ratio(totals['identification_ratio'])}" in out
    assert "G(d_k + d_v^2) / (2 d d_k (H + G)) = 5.208%" in out
    assert "0 errors" in out and "1 warning " in out and "0 notes" in out


def test_identical_layers_collapse_and_all_shows_each():
    out = render(llama_result(n_layers=16, odd_layer=9))
    assert "layers 0-8 (9 identical)" in out
    assert re.search(r"^\s*layer 9\s", out, re.M)
    assert "layers 10-15 (6 identical)" in out
    every = render(llama_result(n_layers=16, odd_layer=9), layers="all")
    assert "identical" not in every
    for i in range(16):
        assert re.search(rf"^\s*layer {i}\s", every, re.M), i


def test_layer_groups_only_merge_consecutive_equal_rows():
    layers = llama_result(n_layers=5, odd_layer=2)["layers"]
    groups = layer_groups(layers)
    assert [(g.first, g.last) for g in groups] == [(0, 1), (2, 2), (3, 4)]
    assert groups[0].label == "layers 0-1 (2 identical)"
    assert [(g.first, g.last) for g in layer_groups(layers, collapse=False)] == [(i, i) for i in range(5)]


def test_findings_grouped_by_rule_worst_first_naming_tensors_and_magnitudes():
    out = render(bert_result(), width=200)
    warn, note = out.index("noop-bias: 6 findings"), out.index("absorbable-bias: 6 findings")
    assert warn < note
    for i in range(6):
        assert f"encoder.layer.{i}.attention.self.key.bias" in out
    assert "max |value| 0.5" in out and "max |value| 0.25" in out
    assert "2,304 parameters" in out
    assert "tensors=[" not in out and "max_abs=" not in out  # details in words, tensors once


def test_no_findings_says_so():
    result = llama_result(n_layers=2, odd_layer=None)
    result["findings"] = []
    assert "No findings." in render(result)


def test_heads_adds_per_head_rank_condition_and_singular_values():
    result = llama_result(n_layers=3)
    plain = render(result)
    assert "Layer 2 heads" not in plain
    out = render(result, heads=True)
    assert "Layer 2 heads: W_QK and W_OV spectra (d_k=4, d_v=4)" in out
    header = next(line for line in out.splitlines() if re.match(r"^\s*head\s+kv\s", line))
    for name in ("eff. rank", "cond", "σ1", "σ2", "σ3", "OV rank"):
        assert name in header, name
    rows = [line for line in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d", line)]
    assert len(rows) == 3 * 4  # one row per head, W_QK and W_OV side by side
    top = result["layers"][0]["spectra"]["qk"][0][0]
    assert f"{top:.3g}" in out
    assert "3 ▲" in out  # the rank-deficient head of layer 2


def test_heads_table_columns_are_aligned():
    """Every number of a column ends at the same character (right-aligned), header included."""
    out = render(llama_result(n_layers=2, odd_layer=None), heads=True, width=130)
    block = out[out.index("Layer 0 heads"):out.index("Layer 1 heads")].splitlines()
    header = next(line for line in block if re.match(r"^\s*head\s+kv\s", line))
    rows = [line for line in block if re.match(r"^\s+\d+\s+\d+\s", line)]
    assert len(rows) == 4
    ends = [m.end() for m in re.finditer(r"\S+(?: rank|\. rank)?", header)]
    for row in rows:
        assert [m.end() for m in re.finditer(r"\S+(?: ▲)?", row)] == ends, (header, row)


def test_spectra_summary_names_lowest_rank_worst_conditioning_and_points_to_heads():
    result = llama_result(n_layers=4, odd_layer=None)
    for head in range(4):  # layer 1's W_QK spectra collapse onto one direction: it stands out
        result["layers"][1]["spectra"]["qk"][head] = [5.0, 1e-3, 1e-3, 1e-3]
    out = render(result, width=140)
    assert "Head spectra" in out and "--heads" in out
    lowest = out[out.index("Lowest effective rank"):out.index("Worst conditioned")]
    assert "layer 1 head 0" in lowest and "W_QK (of 4)" in lowest
    assert "∞ (rank 3 of 4)" in out  # the rank-deficient head of layer 2 is the worst conditioned
    assert re.search(r"Layers that stand out\s+│?\s*layer 1: W_QK mean effective rank 1\.0", out)
    assert "Dead heads             none" in out


def test_plurals_everywhere():
    result = llama_result(n_layers=2, odd_layer=None)
    out = render(result)
    assert "1 finding," in out and "1 findings" not in out and "128 parameters" in out
    assert "▲ 1 warning " in out and "0 errors" in out and "0 notes" in out
    one = llama_result(n_layers=2, odd_layer=None)
    one["findings"][0]["parameters"] = 1
    assert re.search(r"1 finding, 1 parameter\s*$", render(one), re.M)


@pytest.mark.parametrize("width", [80, 100, 130])
def test_tensor_names_are_never_broken_inside(width):
    result = bert_result()
    out = render(result, width=width)
    for f in result["findings"]:
        for name in finding_tensors(f):
            assert re.search(rf"(^|\s){re.escape(name)}(\s|$)", out, re.M), (width, name)


def test_untrusted_strings_print_literally():
    out = render(llama_result(evil=True), width=250)
    assert MARKUP in out.replace("\n", "")
    flat = re.sub(r"\s+", "", out)
    assert re.sub(r"\s+", "", EVIL) in flat
    assert "non-finite" in out


@pytest.mark.parametrize("result", [llama_result(evil=True), bert_result()], ids=["llama", "bert"])
def test_narrow_terminal_stays_within_width(result):
    out = render(result, width=60, heads=True)
    widths = [len(line) for line in out.splitlines()]
    assert max(widths) <= 60, [line for line in out.splitlines() if len(line) > 60][:3]
    assert "identical" in out and "unidentified" in out


@pytest.mark.parametrize("width", [60, 76, 80, 100, 124, 160])
def test_layer_table_never_crops_numbers(width):
    for result in (bert_result(), llama_result()):
        buf = io.StringIO()
        Console(file=buf, width=width, color_system=None).print(layer_table(result, width=width))
        out = buf.getvalue()
        assert max(len(line) for line in out.splitlines()) <= width
        for layer in result["layers"]:
            assert fmt_ratio(layer["identification_ratio"]) in out, (width, layer["index"])
            assert f"{layer['attention_parameters']:,}" in out
        assert "…" not in out


def test_no_color_keeps_text_but_drops_colour(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    render_report(llama_result(), Console(file=buf, force_terminal=True, width=100))
    codes = SGR.findall(buf.getvalue())
    assert codes, "a terminal still gets bold/dim"
    assert not [c for c in codes if COLOUR.search(c)]
    assert "▲ 1 warning" in SGR.sub("", buf.getvalue())  # singular: one warning
    monkeypatch.delenv("NO_COLOR")
    buf = io.StringIO()
    render_report(llama_result(), Console(file=buf, force_terminal=True, width=100))
    assert [c for c in SGR.findall(buf.getvalue()) if COLOUR.search(c)], "control: colour without NO_COLOR"


def test_non_tty_output_has_no_escape_codes():
    buf = io.StringIO()
    render_report(bert_result(), Console(file=buf))
    assert "\x1b" not in buf.getvalue()
    assert "layers 0-5 (6 identical)" in buf.getvalue()


def test_minimal_result_renders_summary_only():
    out = render(minimal_result())
    assert "org/tiny-llama-gqa" in out and "Attention layers" not in out


def test_cli_text_report_of_a_tiny_gqa_llama(tiny_dir):
    path = tiny_dir("llama-gqa")
    res = run_cli(path)
    assert res.code == 0, res.stderr
    assert "H=4, G=2, d_k=4" in res.stdout
    assert "layers 0-1 (2 identical)" in res.stdout
    assert "\x1b" not in res.stdout
    assert res.stderr == ""  # not a terminal: no progress, no bars from transformers or the hub
    every = run_cli(path, "--layers", "all", "--heads")
    assert every.code == 0, every.stderr
    assert re.search(r"^\s*layer 1\s", every.stdout, re.M) and "Layer 1 heads" in every.stdout


def test_cli_real_minilm_summary(minilm_dir):
    res = run_cli(minilm_dir, "--layers", "all")
    assert res.code == 0, res.stderr
    assert "H=12, G=12, d_k=32, d=384, 6 layers" in res.stdout
    assert "4.286% of attention" in res.stdout
    assert "1/(2H) = 4.167%" in res.stdout
    assert "noop-bias: 6 findings" in res.stdout


def test_terminal_svg_has_no_external_font_or_url():
    from idinspect.reports.terminal_svg import terminal_svg

    svg = terminal_svg(bert_result(), width=100, title="t")
    assert svg.startswith("<svg") and "layers 0-5 (6 identical)".replace(" ", "&#160;") in svg
    assert "@font-face" not in svg and "cdnjs" not in svg
    assert re.findall(r"https?://[^\"\s]+", svg) == ["http://www.w3.org/2000/svg"]  # the namespace only
    assert all(u.startswith("url(#") for u in re.findall(r"url\([^)]*\)", svg))


def _dead_head_checkpoint(tmp_path):
    """A tiny Llama (H = G = 4, d_k = 4, 2 layers) whose layer 0 head 2 has W_O = 0: dead."""
    import torch

    from tests.support import tiny

    hf = tiny.build("llama-mha")
    dk = hf.config.hidden_size // hf.config.num_attention_heads
    with torch.no_grad():
        hf.model.layers[0].self_attn.o_proj.weight[:, 2 * dk:3 * dk] = 0
    return tiny.save(hf, tmp_path / "dead")


def test_cli_planted_dead_head_is_never_hidden_by_a_summary(tmp_path):
    import json

    path = _dead_head_checkpoint(tmp_path)
    data = json.loads(run_cli(path, "--format", "json").stdout)
    totals, layers = data["totals"], data["layers"]
    assert totals["extra_unidentified"] > 0 and layers[0]["dead_heads"] == [2]
    res = run_cli(path)
    assert res.code == 0, res.stderr
    out = res.stdout
    assert f"{totals['unidentified_with_weights']:,} parameters" in out  # the JSON's count is quoted
    assert f"dead or rank-deficient heads add {totals['extra_unidentified']:,}" in out
    assert "identical" not in out  # layer 0 (dead head) and layer 1 are two rows
    row0 = next(line for line in out.splitlines() if re.match(r"^\s*layer 0\s", line))
    assert f"+{layers[0]['extra_unidentified']:,}" in row0 and f"{layers[0]['unidentified_with_weights']:,}" in row0
    assert re.search(r"Dead heads\s+layer 0 head 2 ", out)
    assert "layer 0: its weights add" in out


def test_cli_closed_form_reads_plainly_without_biases(tiny_dir, minilm_dir):
    out = run_cli(tiny_dir("llama-gqa")).stdout.replace("│", " ")
    assert "exactly this model's structural share (it has no attention biases)" in " ".join(out.split())
    assert "bias-free configuration" not in out
    bert = " ".join(run_cli(minilm_dir).stdout.replace("│", " ").split())
    assert "1/(2H) = 4.167% without biases; this model's biases bring it to 4.286%" in bert
