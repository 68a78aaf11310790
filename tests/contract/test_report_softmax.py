"""The per-variant contract of tests/reports/test_report_softmax.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/reports/."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize("variant,words", [
    ("gemma2-softcap", ["soft-capped at 5", "key biases are live"]),
    ("gpt-oss", ["attention sinks (4 learned logits per layer)", "value biases are live"]),
    ("llama-gqa", []),
])
def test_summary_names_softcap_and_sinks(variant, words, tiny_dir, tmp_path):
    src = tiny_dir(variant)
    text = run_cli(str(src))
    html_path = tmp_path / "report.html"
    assert run_cli(str(src), "--html", str(html_path)).code == 0
    html = html_path.read_text()
    flat = " ".join(text.stdout.split())
    if not words:
        assert "Softmax" not in text.stdout and ">Softmax<" not in html
    if words:   # the terminal panel wraps the line inside its border: its start is on one line
        assert "Softmax" in text.stdout and words[0] in flat, text.stdout
    for w in words:
        assert w in " ".join(html.split()), w
