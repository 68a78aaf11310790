"""Heavy-tail diagnostics of the gauge-invariant circuits (idinspect/analysis/heavy_tail.py, issue 37):
the power-law estimator against a known law and an independent implementation, the circuits'
singular values against a dense SVD, and invariance of every figure under gauge moves (with a
negative control on the raw projections)."""

from __future__ import annotations

import json
import math
from importlib.resources import files

import jsonschema
import pytest
import torch
from idinspect.reports.heavy_tail import MEANING
from idinspect.reports.html import render_html
from idinspect.reports.terminal_heavy_tail import heavy_tail_panel
from rich.console import Console

import idinspect
from idinspect.forms.per_head.heavy_tail import (
    MIN_TAIL,
    circuit_factors,
    circuit_figures,
    circuit_product,
    dense_singular_values,
    heavy_tail,
    layer_sum_figures,
    power_law_fits,
    product_singular_values,
    trap_count,
)
from idinspect.forms.per_head.spectra import head_spectra
from tests.forms.test_gauge import random_gauge, synthetic_layer
from tests.support.cli import run_cli
from tests.support.report_fixtures import bert_result


def _pareto(n: int, alpha: float, xmin: float, seed: int) -> torch.Tensor:
    """n draws of the density (alpha - 1) / xmin (x / xmin)^-alpha, x >= xmin (inverse CDF)."""
    u = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return xmin * (1 - u).pow(-1 / (alpha - 1))


def _reference_fit(x: list[float]) -> tuple[float, float, float]:
    """(alpha, x_min, D) by the formula, plain Python, one candidate at a time (independent of the
    batched tensor code): alpha = 1 + n / sum ln(x_i / x_min), D = sup |S - P| over the tail."""
    x = sorted(x)
    n = len(x)
    best = (math.inf, 0.0, 0.0)
    for k in range(n - MIN_TAIL + 1):
        tail = x[k:]
        m = len(tail)
        a = 1 + m / sum(math.log(t / x[k]) for t in tail)
        D = 0.0
        for j, t in enumerate(tail):
            P = 1 - (t / x[k]) ** (1 - a)
            D = max(D, P - j / m, (j + 1) / m - P)
        if D < best[0]:
            best = (D, a, x[k])
    return best[1], best[2], best[0]


@pytest.mark.parametrize("alpha", [2.5, 4.0])
def test_pareto_exponent_recovered(alpha):
    """A pure Pareto sample of 1500: the MLE's standard error is (alpha - 1) / sqrt(n_tail); the
    estimate lies within 4 standard errors of the true exponent (a 6e-5 chance of failing by
    sampling) for each of 3 seeds."""
    for seed in range(3):
        x = _pareto(1500, alpha, 0.5, seed)
        fit = power_law_fits(x[None], torch.ones(1, 1500, dtype=torch.bool))[0]
        se = (fit.alpha - 1) / math.sqrt(fit.n_tail)
        assert abs(fit.alpha - alpha) < 4 * se, (seed, fit)
        assert fit.n_tail >= 150


def test_bulk_plus_tail_finds_the_tail():
    """Uniform bulk below 1 plus a Pareto(3) tail above 1: x_min lands at the junction."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(500, generator=g, dtype=torch.float64) * 0.9 + 0.05, _pareto(1000, 3.0, 1.0, 1)])
    fit = power_law_fits(x[None], torch.ones(1, x.numel(), dtype=torch.bool))[0]
    assert 0.9 <= fit.xmin <= 1.1
    assert abs(fit.alpha - 3.0) < 4 * 2.0 / math.sqrt(fit.n_tail)


def test_against_independent_implementation():
    """Batched rows of different lengths (masked eigenvalues) give the plain-Python fit row by row."""
    rows = [_pareto(60, 3.0, 1.0, 5).tolist(),
            (torch.rand(40, generator=torch.Generator().manual_seed(2), dtype=torch.float64) + 0.1).tolist(),
            _pareto(25, 2.2, 0.3, 7).tolist()]
    n = 60
    evals = torch.zeros(3, n, dtype=torch.float64)
    valid = torch.zeros(3, n, dtype=torch.bool)
    for i, r in enumerate(rows):
        evals[i, :len(r)] = torch.tensor(r, dtype=torch.float64)
        valid[i, :len(r)] = True
    fits = power_law_fits(evals, valid)
    for r, fit in zip(rows, fits):
        a, xmin, D = _reference_fit(r)
        assert fit.xmin == xmin
        assert fit.alpha == pytest.approx(a, rel=1e-12)
        assert fit.ks == pytest.approx(D, rel=1e-12)


def test_against_powerlaw_package():
    """The `powerlaw` package (Alstott et al.) at our x_min: the same alpha (its closed form, used for
    alpha in (1.5, 3]), and its KS distance (one side of each step of the empirical CDF) within
    1 / n_tail below ours (the sup over both sides)."""
    import powerlaw  # in the test extra and the lock: this check never skips
    for seed in (11, 12, 13):
        x = _pareto(300, 2.5, 1.0, seed)
        fit = power_law_fits(x[None], torch.ones(1, 300, dtype=torch.bool))[0]
        ref = powerlaw.Fit(sorted(x.tolist()), xmin=fit.xmin, verbose=False).power_law
        assert ref.alpha == pytest.approx(fit.alpha, rel=1e-12)
        assert ref.D - 1e-12 <= fit.ks <= ref.D + 1 / fit.n_tail


def test_too_few_eigenvalues_give_none():
    x = _pareto(9, 3.0, 1.0, 0)
    assert power_law_fits(x[None], torch.ones(1, 9, dtype=torch.bool)) == [None]


def test_layer_sum_singular_values_match_dense():
    """The cores give the singular values of the dense d x d per-layer sums sum_h W_Q^h W_K^gT and
    sum_h W_V^g W_O^h (formed here only as the reference), and the trap count matches a dense count."""
    layer = synthetic_layer(d=40, H=4, G=2, dk=6)
    X, Y = circuit_factors(layer, "qk")
    dense = sum(layer.W_Q[h] @ layer.W_K[h // 2].T for h in range(4))
    sv, product = product_singular_values(X, Y)
    assert product is None                                   # m = G d_k = 12 < d: through the small cores
    ref = torch.linalg.svdvals(dense)
    assert torch.allclose(sv, ref[:sv.numel()], rtol=1e-12, atol=1e-12 * float(ref[0]))
    X, Y = circuit_factors(layer, "ov")
    dense_ov = sum(layer.W_V[h // 2] @ layer.W_O[h] for h in range(4))
    assert torch.allclose(product_singular_values(X, Y)[0], torch.linalg.svdvals(dense_ov)[:12], rtol=1e-12,
                          atol=1e-12 * float(torch.linalg.svdvals(dense_ov)[0]))
    spiked = dense_ov.clone()
    spiked[3, 5] += 50.0 * float(dense_ov.abs().max())      # one large entry: a trap
    U = torch.eye(40, dtype=torch.float64)
    fro2 = float(spiked.square().sum())
    thr = math.sqrt(fro2 / 1600) * 1600 ** 0.25
    count, ratio = trap_count(spiked, U, fro2)
    assert count == int((spiked.abs() > thr).sum()) >= 1
    assert ratio == pytest.approx(float(spiked.abs().max()) / thr, rel=1e-12)


def test_layer_sum_with_as_many_columns_as_width_is_the_product():
    """m = G d_k >= d (GPT-2, BERT: m = d): the product X Y^T is formed directly (it is no larger than the
    cores), its singular values are the dense ones, and the trap count read from it is the blockwise one."""
    layer = synthetic_layer(d=12, H=4, G=2, dk=6)
    for form in ("qk", "ov"):
        X, Y = circuit_factors(layer, form)
        sv, product = product_singular_values(X, Y)
        assert product is not None and torch.equal(product, X @ Y.T)
        ref = torch.linalg.svdvals(X @ Y.T)
        assert torch.allclose(sv, ref, rtol=1e-12, atol=1e-12 * float(ref[0]))
        fro2 = float(sv.square().sum())
        assert trap_count(X, Y, fro2, product) == trap_count(X, Y, fro2)
        W, scale = circuit_product(layer, form)               # what the analysis forms: group by group, scaled
        assert math.log2(scale) == int(math.log2(scale))
        assert torch.allclose(W * scale, X @ Y.T, rtol=1e-13, atol=1e-13 * float((X @ Y.T).abs().max()))
        row = layer_sum_figures(layer, form)
        assert row["spectral_norm"] == pytest.approx(float(ref[0]), rel=1e-12)
        assert row["stable_rank"] == pytest.approx(fro2 / float(ref[0]) ** 2, rel=1e-12)


def _figures(layer) -> list[float]:
    """Every number of the layer's heavy_tail object, flattened (None heads give nothing)."""
    out = heavy_tail(layer, head_spectra(layer))
    flat: list[float] = []
    for form in ("qk", "ov"):
        for row in out[form]["heads"] + [out[form]["layer"]]:
            if row is not None:
                flat += [float(v) for k, v in sorted(row.items()) if v is not None]
    return flat


def _assert_invariant(layer, moved) -> int:
    a, b = _figures(layer), _figures(moved)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert abs(x - y) <= 1e-6 * max(abs(x), abs(y)), (x, y)
    return len(a)


def _raw_alphas(layer) -> list[float]:
    """The negative control: alpha, stable rank and spectral norm of the raw stacked W_Q [d, H d_k]
    and W_K [d, G d_k], as a weight-by-weight tool computes them."""
    out = []
    for W in (layer.W_Q, layer.W_K):
        flat = W.to(torch.float64).permute(1, 0, 2).reshape(W.shape[1], -1)
        row = circuit_figures(dense_singular_values(flat)[None] if flat.shape[0] == flat.shape[1]
                              else torch.linalg.svdvals(flat)[None], 1e-12, tuple(flat.shape))[0]
        out += [row["alpha"], row["stable_rank"], row["spectral_norm"]]
    return out


SYNTH = {
    "no-rope-gqa": dict(d=48, H=4, G=2, dk=12),
    "full-rope-half": dict(d=48, H=4, G=2, dk=12, rotary_dim=12),
    "full-rope-interleaved-mqa": dict(d=40, H=4, G=1, dk=12, rotary_dim=12, pairing="interleaved"),
    "partial-rope-mha": dict(d=40, H=3, G=3, dk=12, rotary_dim=4),
}


@pytest.mark.parametrize("name", SYNTH)
def test_invariant_under_gauge_moves(name):
    layer = synthetic_layer(**SYNTH[name])
    for seed in (1, 2):
        moved = random_gauge(layer, seed)
        n = _assert_invariant(layer, moved)
        assert n >= 2 * (layer.n_heads + 1) * 7                      # every head has an exponent
        raw, raw_moved = _raw_alphas(layer), _raw_alphas(moved)
        changed = [abs(x - y) > 1e-3 * abs(x) for x, y in zip(raw, raw_moved) if x is not None and y is not None]
        assert sum(changed) >= 4, (raw, raw_moved)                   # the raw figures do move


def test_invariant_minilm(minilm_dir):
    """The real all-MiniLM-L6-v2: every figure of every layer agrees after a random gauge move to
    1e-6 relative, while WeightWatcher-style figures of the raw projections move."""
    model = idinspect.load(minilm_dir)
    moved_raw = 0
    for layer in model.layers():
        L = layer.to(torch.float64)
        moved = random_gauge(L, 7 + layer.index)
        _assert_invariant(L, moved)
        if layer.index < 2:                                     # the control on two layers is enough
            moved_raw += sum(abs(x - y) > 1e-3 * abs(x) for x, y in zip(_raw_alphas(L), _raw_alphas(moved))
                             if x is not None and y is not None)
    assert moved_raw >= 2 * 4


def test_cli_json_carries_the_figures_and_validates(minilm_dir):
    """`inspect --format json` on MiniLM: every layer has heavy_tail per head and per layer sum, it
    validates against the schema, and it equals the library's figures for that layer."""
    assert "heavy_tail" not in json.loads(run_cli(minilm_dir, "--format", "json").stdout)["layers"][0]["spectra"]
    res = run_cli(minilm_dir, "--format", "json", "--heavy-tails")
    assert res.code == 0, res.stderr
    out = json.loads(res.stdout)
    schema = json.loads(files("idinspect").joinpath("schemas/report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(out)
    layers = out["layers"]
    assert len(layers) == 6
    for entry in layers:
        ht = entry["spectra"]["heavy_tail"]
        assert len(ht["qk"]["heads"]) == len(ht["ov"]["heads"]) == 12
        assert ht["qk"]["layer"]["alpha"] > 1 and ht["ov"]["layer"]["traps"] >= 0
    layer = idinspect.load(minilm_dir).layer(2)
    ref = heavy_tail(layer, head_spectra(layer))
    assert layers[2]["spectra"]["heavy_tail"]["ov"]["layer"]["alpha"] == pytest.approx(ref["ov"]["layer"]["alpha"],
                                                                                        rel=1e-12)


def _with_alphas(qk: list[float], ov: list[float]) -> dict:
    """The BERT report fixture with a heavy_tail object of the given per-layer-sum alphas."""
    result = bert_result()
    result["layers"] = result["layers"][:len(qk)]
    for layer, a, b in zip(result["layers"], qk, ov):
        fig = lambda alpha: {"alpha": alpha, "xmin": 1.0, "n_tail": 20, "ks": 0.05, "stable_rank": 4.0,  # noqa: E731
                             "spectral_norm": 2.0, "mp_spikes": 3, "n_evals": 64, "traps": 0, "trap_ratio": 0.5}
        layer["spectra"]["heavy_tail"] = {"xmin_rule": "x", "alpha_range": [2.0, 6.0],
                                          "qk": {"heads": [fig(3.0)], "layer": fig(a)},
                                          "ov": {"heads": [None], "layer": fig(b)}}
    return result


def test_reports_mark_layers_outside_the_usual_range():
    """Terminal and HTML: exactly the layers whose alpha lies outside [2, 6] are marked, with the sentence."""
    result = _with_alphas([1.5, 3.0], [4.0, 7.25])
    assert len(result["layers"]) == 2
    console = Console(width=160, record=True)
    console.print(heavy_tail_panel(result))
    text = console.export_text()
    assert "1.5 !" in text and "7.25 !" in text and "3 !" not in text and "4 !" not in text
    assert "not evidence of under- or over-training" in " ".join(text.split())
    page = render_html(result)
    section = page[page.index('<section id="heavy-tail"'):]
    section = section[:section.index("</section>")]
    assert section.count('stroke="#c00000"') == 2
    assert "layer 0 (QK); layer 1 (OV)" in section
    assert "describes the weights" in section and MEANING.split(";")[0][:40] in section


def test_reports_without_figures_show_nothing():
    result = bert_result()
    assert heavy_tail_panel(result) is None
    assert 'id="heavy-tail"' not in render_html(result)


def test_survey_row_summarises_the_exponents():
    """A survey row carries the median per-layer alpha of W_QK and W_OV and the count of layers with
    either outside [2, 6]; a result without heavy-tail figures adds none of these fields."""
    from idinspect.survey.rows import FIELD_NAMES, row_fields

    row = row_fields(_with_alphas([1.5, 3.0, 4.0], [4.0, 7.25, 5.0]))
    assert (row["heavy_tail_alpha_qk"], row["heavy_tail_alpha_ov"], row["heavy_tail_layers_outside"]) == (3.0, 5.0, 2)
    assert {"heavy_tail_alpha_qk", "heavy_tail_alpha_ov", "heavy_tail_layers_outside"} <= set(FIELD_NAMES)
    assert not any(k.startswith("heavy_tail") for k in row_fields(bert_result()))


def test_survey_row_of_a_gauged_copy_agrees(tmp_path, minilm_dir):
    """End to end through `inspect`: the survey fields of all-MiniLM-L6-v2 and of its float64 export
    (a gauge move) agree to 1e-6 relative."""
    from idinspect.survey.rows import survey_row

    out = tmp_path / "fixed"
    idinspect.export(minilm_dir, out, dtype="float64")
    opts = {"heavy_tails": True}
    a, b = survey_row(str(minilm_dir), opts), survey_row(str(out), opts)
    assert a["status"] == b["status"] == "ok", (a["error"], b["error"])
    for key in ("heavy_tail_alpha_qk", "heavy_tail_alpha_ov"):
        assert a[key] is not None and b[key] == pytest.approx(a[key], rel=1e-6)
    assert a["heavy_tail_layers_outside"] == b["heavy_tail_layers_outside"]


@pytest.mark.parametrize("scale", [1e200, 1e-200, 1e-305])
def test_figures_do_not_depend_on_the_scale_near_the_float64_limits(scale):
    """alpha, stable rank, spikes and KS of a circuit scaled by 1e200 or into subnormal products are
    those of the unscaled one (the hostile-weights tests saw OverflowError / ZeroDivisionError)."""
    values = _pareto(200, 3.0, 1.0, seed=5).sqrt().sort(descending=True).values[None]
    base = circuit_figures(values, 1e-12, (256, 256))[0]
    moved = circuit_figures(values * scale, 1e-12, (256, 256))[0]
    for key in ("alpha", "stable_rank", "ks", "mp_spikes", "n_tail"):
        assert moved[key] == pytest.approx(base[key], rel=1e-12), key
    assert moved["spectral_norm"] == pytest.approx(base["spectral_norm"] * scale, rel=1e-12)


@pytest.mark.parametrize("scale", [1e-310, 1e-200, 1e200, 1e300])
def test_layer_sums_of_scaled_factors_match(scale):
    """The per-layer sums of a layer whose V (or Q) is scaled near float64's ends have the figures of
    the unscaled layer (the factors are rescaled by exact powers of two before any product)."""
    layer = synthetic_layer(d=24, H=4, G=4, dk=6, seed=3)
    base = heavy_tail(layer, head_spectra(layer))
    moved = layer.replace(W_V=layer.W_V * scale)
    got = heavy_tail(moved, head_spectra(moved))
    for key in ("stable_rank", "mp_spikes", "traps"):
        assert got["ov"]["layer"][key] == pytest.approx(base["ov"]["layer"][key], rel=1e-9), key
    assert got["qk"]["layer"] == base["qk"]["layer"]


@pytest.mark.parametrize("scale", [1e-310, 1e200])
def test_cli_heavy_tails_of_weights_near_the_float64_limits(tiny_dir, tmp_path, scale):
    """`inspect --heavy-tails --format json` of a float64 Llama whose V is scaled to subnormals or to
    1e200: exit 0, strict JSON, the section present."""
    from tests.support.hostile import case_dir, set_tensor

    model = case_dir(tiny_dir("llama-gqa"), tmp_path)
    set_tensor(model, "model.layers.0.self_attn.v_proj.weight", lambda t: t * scale)
    res = run_cli(model, "--format", "json", "--heavy-tails")
    assert res.code == 0, res.stderr
    out = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert all("heavy_tail" in layer["spectra"] for layer in out["layers"])


@pytest.mark.parametrize("d", [40, 12], ids=["through the cores (m < d)", "the product formed (m >= d)"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_weight_gives_no_layer_figures_for_its_circuit_only(d, bad):
    """A NaN or infinity in W_K leaves the per-layer W_QK without figures (None, not numbers made of
    it); W_OV, which does not read W_K, keeps its figures, equal to those of the clean layer."""
    import dataclasses

    clean = synthetic_layer(d=d, H=4, G=2, dk=6)
    W_K = clean.W_K.clone()
    W_K[1, 3, 2] = bad
    broken = dataclasses.replace(clean, W_K=W_K)
    assert layer_sum_figures(broken, "qk") is None
    assert layer_sum_figures(broken, "ov") == layer_sum_figures(clean, "ov") is not None
    assert layer_sum_figures(clean, "qk") is not None
