"""``idinspect diff A B`` on saved checkpoints: gauge moves (rho = 1), orthogonal steps (rho = 0),
streaming per layer, the JSON schema, the HTML report, and refusals."""

from __future__ import annotations

import json

import pytest
import torch

from idinspect.training.diff import diff
from idinspect.training.live import snapshot, write_layer
from idinspect.training.metrics import group_factors, set_group_factors, side_algebra
from idinspect.training.orbit import project_step
from tests.support.cli import run_cli
from tests.support.gauge_moves import gauge_move
from tests.support.tiny import build, save


def _moved(variant, tmp_path, move):
    model = build(variant)
    a = save(model, tmp_path / "a")
    g = torch.Generator().manual_seed(3)
    for layer in snapshot(model):
        write_layer(model, move(layer, g))
    return a, save(model, tmp_path / "b")


def _orthogonal_step(layer, g):
    """A random step with its tangent component removed, per group and side (rho = 0 by construction)."""
    new = {r: t.clone() for r, t in layer.tensors().items()}
    for grp in range(layer.n_kv_heads):
        for side in ("qk", "vo"):
            L, R = group_factors(layer, grp, side)
            dL = 1e-3 * torch.randn(L.shape, generator=g, dtype=torch.float64)
            dR = 1e-3 * torch.randn(R.shape, generator=g, dtype=torch.float64)
            X = project_step(L, R, dL, dR, side_algebra(layer, side)).X
            set_group_factors(new, layer, grp, side, L + dL - L @ X, R + dR + R @ X.T)
    return layer.replace(**new)


def test_larger_gauge_move_rho_deficit_is_second_order(tmp_path):
    """A finite move exp(X) - I = X + X^2/2 + ...: 1 - rho shrinks like eps^2."""
    deficits = []
    for eps in (1e-2, 1e-3):
        a, b = _moved("llama-gqa", tmp_path / str(eps), lambda layer, g: gauge_move(layer, g, eps))
        deficits.append(1 - diff(str(a), str(b))["totals"]["rho"])
    assert deficits[1] / deficits[0] == pytest.approx(1e-2, rel=0.5)


def test_cli_text_json_html_and_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from importlib.resources import files

    a, b = _moved("llama-gqa", tmp_path, _orthogonal_step)
    res = run_cli("diff", a, b, "--format", "json", "--html", tmp_path / "d.html")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    schema = json.loads(files("idinspect").joinpath("schemas/diff.schema.json").read_text())
    jsonschema.validate(doc, schema)
    html = (tmp_path / "d.html").read_text()
    assert html.count("<svg") == 2 and "1/(2H)" in html and "http" not in html.replace("http://www.w3.org", "")
    text = run_cli("diff", a, b, "--heads")
    assert text.code == 0 and "group 1 (heads 2,3) qk" in text.stdout and "reference 1/(2H) = 0.1250" in text.stdout


def test_cli_refuses_different_models(tmp_path):
    a = save(build("llama-gqa"), tmp_path / "a")
    b = save(build("llama-mha"), tmp_path / "b")
    res = run_cli("diff", a, b)
    assert res.code == 2 and "same model" in res.stderr and "Traceback" not in res.stderr


def test_ill_posed_groups_are_reported(tmp_path):
    """Column 0 of head 0 zero in both W_Q~ and W_K~ (GPT-2 layer 1): a direction neither factor sees."""
    model = build("gpt2")
    attn = model.transformer.h[1].attn.c_attn
    with torch.no_grad():
        attn.weight[:, [0, 16]] = 0
        attn.bias[[0, 16]] = 0
    a = save(model, tmp_path / "a")
    g = torch.Generator().manual_seed(0)
    for layer in snapshot(model):
        write_layer(model, _orthogonal_step(layer, g))
    b = save(model, tmp_path / "b")
    doc = diff(str(a), str(b))
    assert doc["totals"]["ill_posed"] == [[1, "qk", 0]]
    assert doc["layers"][1]["groups"][0]["qk"]["mu"] < 1e-12
    assert doc["totals"]["rho"] < 1e-12
    res = run_cli("diff", a, b)
    assert res.code == 0 and "ill-posed projection" in res.stdout and "layer 1 qk group 0" in res.stdout


def test_a_large_gauge_move_reads_as_same_function_with_rho_below_one(tmp_path):
    """rho is the first-order (tangent) share: a large gauge move gives rho well below 1 with no
    invariant change, and the text and HTML say that the invariant change is what decides."""
    from idinspect.reports.diff_html import render_diff_html
    from idinspect.reports.diff_text import render_diff

    a, b = _moved("llama-gqa", tmp_path, lambda layer, g: gauge_move(layer, g, 0.5))
    doc = diff(str(a), str(b))
    assert doc["totals"]["rho"] < 0.99
    assert doc["totals"]["invariant_change_max"] < 1e-10
    text = render_diff(doc)
    assert "first-order share" in text and "The invariant change decides whether the function changed" in text
    assert "invariant change decides whether the function changed" in render_diff_html(doc)
