"""The single-file HTML report: structure, accessibility, no external reference, escaping, CLI."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from idinspect.reports.html import embed_json, render_html, write_html

from tests.support.cli import run_cli
from tests.support.report_fixtures import (
    EVIL,
    MARKUP,
    bert_result,
    llama_result,
    minimal_result,
)

CHARTS = ("chart-params", "chart-ratio", "heat-qk-effective_rank", "heat-qk-top_sigma", "heat-ov-effective_rank",
          "heat-ov-top_sigma")


class Doc(HTMLParser):
    """Just enough of a DOM: every start tag with attributes, text per tag, script bodies."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.text: dict[str, list[str]] = {}
        self.scripts: list[tuple[dict, str]] = []
        self._script: dict | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "script":
            self._script = a
            self.scripts.append((a, ""))
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        if self._script is not None:
            attrs, body = self.scripts[-1]
            self.scripts[-1] = (attrs, body + data)
        for tag in set(self.stack):
            self.text.setdefault(tag, []).append(data)

    def find(self, tag: str, **attrs) -> list[dict]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


@pytest.fixture(scope="module")
def page() -> str:
    return render_html(llama_result(evil=False))


def test_document_structure_and_accessibility(page):
    doc = Doc(page)
    assert page.startswith("<!DOCTYPE html>")
    assert doc.find("html")[0].get("lang") == "en"
    assert doc.text["title"][0].strip() == "idinspect report: org/tiny-llama-gqa"
    assert len(doc.find("h1")) == 1
    assert len(doc.find("main")) == 1
    tables = doc.find("table")
    assert len(tables) >= 5  # summary, layers (collapsed + every layer), per-head, findings, provenance
    ths = doc.find("th")
    assert ths and all(th.get("scope") in ("row", "col") for th in ths)
    assert len(doc.find("caption")) == len(tables)
    for kind in ("summary", "layers", "ratio", "spectra", "findings", "provenance"):
        assert doc.find("section", id=kind), kind
    for chart in CHARTS:
        svg = doc.find("svg", id=chart)
        assert svg and svg[0].get("role") == "img", chart
        assert svg[0].get("aria-labelledby") == f"{chart}-t {chart}-d"
    assert len(doc.find("rect")) > 16 * 4 * 2  # at least a cell per layer x head per heatmap


def test_text_beside_colour(page):
    # severities are spelled out, the rank-deficient head carries a "!" and every bar its numbers
    assert "1 warning" in page and "0 error" in page
    assert re.search(r'<text class="cell-txt[^"]*"[^>]*>![0-9.]*</text>', page)
    assert "40 of 768 (5.208%)" in page
    assert "layers 0-8 (9 identical)" in page


def test_themes_print_and_script_are_inline(page):
    assert "@media (prefers-color-scheme: dark)" in page
    assert "@media print" in page
    assert "prefers-reduced-motion" in page


def external_references(text: str) -> list[str]:
    found = []
    found += re.findall(r"""\b(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""",
                        text, re.I)
    found += re.findall(r"url\(\s*['\"]?\s*(?:https?:)?//[^)]*\)", text, re.I)
    found += re.findall(r"<link\b[^>]*>", text, re.I)
    found += re.findall(r"<script\b[^>]*\bsrc\s*=", text, re.I)
    found += re.findall(r"@import", text, re.I)
    found += re.findall(r"<(?:iframe|object|embed|img)\b", text, re.I)
    return found


@pytest.mark.parametrize("result", [llama_result(), bert_result(), minimal_result()], ids=["llama", "bert", "minimal"])
def test_no_external_reference_of_any_kind(result):
    text = render_html(result)
    assert external_references(text) == []
    assert "http://" not in text and "https://" not in text


def test_external_reference_check_can_fail():
    assert external_references('<link rel="stylesheet" href="https://cdn.example/x.css">')
    assert external_references('<script src="//cdn.example/x.js"></script>')
    assert external_references("<style>@import 'x.css'; a{background:url(https://x/y.png)}</style>")


def test_hostile_strings_are_escaped_everywhere():
    text = render_html(llama_result(evil=True))
    doc = Doc(text)
    assert "<img" not in text and "onerror=alert(1)>" not in text.replace("&gt;", "")
    assert not doc.find("img")
    scripts = doc.scripts
    assert len(scripts) == 2 and scripts[0][0].get("type") == "application/json" and "src" not in scripts[1][0]
    body = scripts[0][1]
    assert "</" not in body and "<" not in body
    data = json.loads(body)
    assert data["model"]["source"] == f"org/{MARKUP}{EVIL}"
    assert EVIL in [f["tensor"] for f in data["findings"]]
    visible = "".join(doc.text["main"])
    assert EVIL in visible and MARKUP in visible  # shown as text, literally
    assert doc.text["title"][0].strip().endswith(EVIL)


def test_embed_json_escapes_script_breakers():
    assert embed_json({"a": "</script><!--&"}) == '{"a": "\\u003c/script\\u003e\\u003c!--\\u0026"}'
    assert json.loads(embed_json({"a": "</script>\u2028"})) == {"a": "</script>\u2028"}


def test_write_html_is_atomic_and_complete(tmp_path):
    target = tmp_path / "r.html"
    write_html(bert_result(), target)
    assert target.read_text().rstrip().endswith("</html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_cli_html_of_a_tiny_gqa_llama(tiny_dir, tmp_path):
    out = tmp_path / "report.html"
    res = run_cli(tiny_dir("llama-gqa"), "--html", out, "--quiet", "--format", "json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["model"]["kv_heads"] == 2
    doc = Doc(out.read_text())
    assert "H=4, G=2, d_k=4" in "".join(doc.text["main"])
    rows = [a for a in doc.find("th", scope="row")]
    assert rows
    for chart in CHARTS:
        assert doc.find("svg", id=chart), chart
    assert external_references(out.read_text()) == []
    assert res.stderr == ""


def test_cli_unwritable_report_path_is_a_clean_error(tiny_dir, tmp_path):
    target = tmp_path / "missing-folder" / "r.html"
    res = run_cli(tiny_dir("llama-gqa"), "--html", target)
    assert res.code == 2
    assert "does not exist" in res.stderr and "missing-folder" in res.stderr
    assert "internal error" not in res.stderr and res.stdout == ""


def test_control_characters_from_the_checkpoint_are_shown_as_escapes():
    result = llama_result()
    result["model"]["architecture"] = "Llama\x1b]52;c;ZXZpbA==\x07"
    result["findings"][0]["tensor"] = "model.layers.2.q\x1b[2J\x00.weight"
    text = render_html(result)
    body = text[:text.index('<script type="application/json"')] + text[text.rindex("</script>"):]
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", body)
    assert "Llama\\x1b]52;c;ZXZpbA==\\x07" in text and "q\\x1b[2J\\x00.<wbr>weight" in text
