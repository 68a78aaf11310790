"""``idinspect compare`` / ``idinspect fingerprint`` end to end: formats, exit codes, errors."""

from __future__ import annotations

import json
import re

from tests.support.cli import run_cli


def test_fingerprint_is_compact_versioned_and_deterministic(minilm_dir, tmp_path):
    out = tmp_path / "fp.json"
    res = run_cli("fingerprint", minilm_dir, "-o", out)
    assert res.code == 0 and out.is_file() and res.stdout == ""
    fp = json.loads(out.read_text())
    assert fp["format"] == "idinspect-fingerprint" and fp["version"] == 1
    assert fp["dtype"] == "float32" and fp["gains_folded"] is True and len(fp["layers"]) == 6
    assert out.stat().st_size < 40_000                       # 72 heads x (32 + 32) values + radii, float32
    again = run_cli("fingerprint", minilm_dir)
    assert again.code == 0 and again.stdout == out.read_text()


def test_compare_from_fingerprint_without_weights(minilm_dir, tmp_path):
    fp = tmp_path / "fp.json"
    assert run_cli("fingerprint", minilm_dir, "-o", fp).code == 0
    res = run_cli("compare", fp, minilm_dir, "--format", "json")
    assert res.code == 0
    r = json.loads(res.stdout)
    assert r["verdict"] == "same-function" and r["a"]["origin"].startswith("fingerprint")
    assert r["same_function"]["worst"]["ratio"] < 1.0
    both = json.loads(run_cli("compare", fp, fp, "--format", "json").stdout)
    assert both["verdict"] == "same-function" and both["same_function"]["worst"]["error"] == 0.0


def test_text_json_and_html_outputs(tiny_dir, tmp_path):
    a = tiny_dir("llama-gqa")
    html, js = tmp_path / "c.html", tmp_path / "c.json"
    res = run_cli("compare", a, a, "--html", html, "--json", js)
    assert res.code == 0
    assert "verdict: same-function" in res.stdout and re.search(r"^\s+0\s+4/4\s+1\.000000", res.stdout, re.M)
    page = html.read_text()
    assert page.count("<svg") == 1 and "Dissimilarity" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)       # self-contained
    embedded = re.search(r'<script type="application/json" id="idinspect-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(embedded)["verdict"] == "same-function"
    assert json.loads(js.read_text())["layers"][0]["similarity"] == 1.0


def test_structurally_different_models_are_unrelated(tiny_dir):
    res = run_cli("compare", tiny_dir("bert"), tiny_dir("bert-base-model"), "--format", "json")   # d_k 4 vs 8
    assert res.code == 1
    r = json.loads(res.stdout)
    assert r["verdict"] == "unrelated" and r["structurally_different"] is True and r["lineage"] is None
    assert run_cli("compare", tiny_dir("bert"), tiny_dir("bert-base-model"), "--expect", "unrelated").code == 0


def test_different_families_compare_head_against_head(tiny_dir):
    """BERT and Llama with the same head width: heads matched on W_QK and W_OV (planes only exist on
    one side), per-layer similarity reported, never the same function."""
    res = run_cli("compare", tiny_dir("bert"), tiny_dir("llama-mha"), "--format", "json")
    r = json.loads(res.stdout)
    assert res.code == 1 and r["verdict"] != "same-function" and r["structure_notes"]
    assert r["structurally_different"] is False and len(r["layers"]) == 2 and r["layers"][0]["heads"] == [4, 4]


def test_bad_fingerprints_are_one_line_errors(tmp_path, tiny_dir):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "idinspect-fingerprint", "version": 99, "layers": []}')
    res = run_cli("compare", bad, tiny_dir("bert"))
    assert res.code == 2 and "version 99" in res.stderr and "Traceback" not in res.stderr
    bad.write_text("{not json")
    res = run_cli("compare", bad, tiny_dir("bert"))
    assert res.code == 2 and "bad.json" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert run_cli("compare", tmp_path / "missing", tiny_dir("bert")).code == 2
