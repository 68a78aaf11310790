"""Numbers in the HTML charts are read at a glance: a heatmap cell never shows exponent form."""

import re

import pytest
from idinspect.reports.svg_charts import cell_number, heatmap


@pytest.mark.parametrize("value, text", [(3.14159, "3.1"), (47.2, "47"), (123.4, "123"), (999.4, "999"),
                                         (12_345.0, "12k"), (0.5, "0.5"), (0.0, "0"), (0.001, "~0")])
def test_cell_numbers_are_short_and_never_exponents(value, text):
    assert cell_number(value) == text
    assert "e" not in cell_number(value) and len(cell_number(value)) <= 4


def test_a_gemma3_sized_heatmap_shows_whole_numbers():
    """Gemma 3's head width 256 gives values ~120 (effective ranks): once `1.2e+02` in every cell."""
    layers = [{"index": i, "d_k": 256, "d_v": 256,
               "spectra": {"qk": [[120.4 + h, 1.0] for h in range(4)], "qk_rank": [256] * 4,
                           "qk_condition": [8.0] * 4}} for i in range(3)]
    svg = heatmap(layers, "qk", "top_sigma", "h", scale=(100.0, 130.0))
    cells = re.findall(r'class="cell-txt[^"]*"[^>]*>([^<]*)<', svg)
    assert cells and all("e+" not in c for c in cells), cells
    assert "120" in cells and "123" in cells


def test_survey_rows_follow_the_input_order_and_a_failure_wraps(tiny_dir, tmp_path):
    """A source done in an earlier run (resumed) and a failed one: the HTML table lists the models in
    the order given, and the failed row's error wraps inside its cell instead of running off-screen."""
    from tests.support.cli import run_cli

    a, b, missing = str(tiny_dir("gpt2")), str(tiny_dir("llama-gqa")), str(tmp_path / "no-such-model")
    out, page = tmp_path / "rows.jsonl", tmp_path / "survey.html"
    assert run_cli("survey", b, "--jsonl", out, "-q").code == 0
    run_cli("survey", missing, a, b, "--jsonl", out, "--html", page, "-q")
    html = page.read_text()
    rows = re.findall(r'<th scope="row"><code>([^<]*)</code>', html)
    assert rows == [missing, a, b]
    assert re.search(r"td\.failed \{[^}]*white-space: normal[^}]*overflow-wrap: anywhere", html)


def test_beta_chart_uses_a_log_axis_when_values_span_decades():
    """VO beta ~100 beside QK beta ~0.01: on a linear axis the QK bars vanish; the log axis keeps them."""
    from idinspect.reports.diff_svg import grouped_bars

    svg = grouped_bars(["0", "1"], [("QK beta A", [0.01, 0.02]), ("VO beta A", [100.0, 200.0])],
                       title="t", ylabel="beta", chart_id="c")
    heights = [float(h) for h in re.findall(r'height="([^"]+)" fill="[^"]+"><title>', svg)]
    assert min(heights) > 0.1 * max(heights), heights       # linear: 0.01 / 200 of the height, invisible
    assert "beta (log scale)" in svg
    linear = grouped_bars(["0"], [("a", [1.0]), ("b", [2.0])], title="t", ylabel="y", chart_id="d")
    assert "log scale" not in linear


def test_diff_report_shares_the_stylesheet_and_keeps_numbers_whole():
    from idinspect.reports.diff_html import render_diff_html
    from idinspect.reports.html_style import CSS

    group = {"rho": 0.5, "reference": 0.125, "beta_a": 1e-3, "beta_b": 2.0, "tau_a": 0.0, "tau_b": 1.0, "mu_min": 1e-4}
    doc = {"a": {"source": "a"}, "b": {"source": "b"}, "model": {"layers": 1}, "one_over_2H": 0.125,
           "totals": {"rho": 0.5, "invariant_change_max": 1e-3, "ill_posed": []},
           "layers": [{"index": 0, "rho": 0.5, "qk": group, "vo": group, "raw_change": {"relative": 0.1},
                       "invariant_change_max": 1e-3}]}
    page = render_diff_html(doc)
    assert CSS in page and '<div class="scroll"><table>' in page
    cells = re.findall(r"<td([^>]*)>", page)
    assert cells and all('class="num"' in c for c in cells)        # td.num: white-space nowrap


@pytest.mark.parametrize("fixture", ["llama", "bert"])
def test_every_report_table_can_scroll_instead_of_being_clipped(fixture):
    """A wide table (Gemma 3's counts with its nearly-null rows) scrolls inside its section."""
    from idinspect.reports.html import render_html

    from tests.support.report_fixtures import bert_result, llama_result

    page = render_html(llama_result() if fixture == "llama" else bert_result())
    tables = page.count("<table")
    assert tables >= 3 and page.count('<div class="scroll"><table') == tables
