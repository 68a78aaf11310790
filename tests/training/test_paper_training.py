"""examples/paper_training.py end to end in its --smoke mode: the same code path as the full run
(every optimizer, rebalancing, the metrics, the checks, the HTML report), on tiny runs."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_example():
    spec = importlib.util.spec_from_file_location("paper_training", ROOT / "examples" / "paper_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smoke_run_writes_the_report_with_every_check(tmp_path):
    example = load_example()
    out, saved = tmp_path / "report.html", tmp_path / "runs.json"
    summary = example.main(["--smoke", "--out", str(out), "--save-runs", str(saved)])
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 10 and "<script src" not in page
    checks = json.loads(re.search(r'<script type="application/json" id="checks">(.*?)</script>', page, re.S).group(1))
    assert set(checks) == {"sgd", "weight_decay", "adamw", "rebalancing", "key_bias"}
    assert all(isinstance(c["held"], bool) and c["text"] for c in checks.values())
    assert {k: v["held"] for k, v in summary.items() if k != "seconds"} == {k: v["held"] for k, v in checks.items()}
    # what holds at any length: the discrete SGD law (float32) and weight decay's rate; key-bias gradients
    # are rounding: within the float32 bound relative to the scale of the terms that cancel in them
    assert checks["sgd"]["max_unexplained"] < 1e-2 and checks["sgd"]["adamw_unexplained_median"] > 0.5
    assert checks["weight_decay"]["relative_error"] < 0.05 and checks["weight_decay"]["held"]
    key_bias = checks["key_bias"]
    assert 0 < key_bias["max_cancel"] <= key_bias["cancel_bound"] and key_bias["held"]
    runs = {r["name"]: r for r in json.loads(saved.read_text())["runs"]}
    assert len(runs) == 8 and all(len(r["loss"]) == 40 for r in runs.values())
    assert runs["AdamW + rebalancing"]["rebalance_seconds"] > 0 and runs["AdamW"]["rebalance_seconds"] == 0
    assert runs["AdamW + rebalancing"]["loss"][:20] == runs["AdamW"]["loss"][:20]     # same weights and batches
    assert runs["AdamW + rebalancing"]["loss"][20:] != runs["AdamW"]["loss"][20:]     # then the rebalancing acts
