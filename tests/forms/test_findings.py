"""Weight-level findings on real tensors: no-op and absorbable biases, rank-deficient heads (made
by editing a saved checkpoint), NaN/Inf, and the exact extra freedom they cause."""

import json
import shutil

import torch
from safetensors.torch import load_file, save_file

import idinspect
from tests.support import tiny
from tests.support.cli import run_cli
from tests.support.jacobian import attention_nullity


def _by_rule(result, rule):
    return [f for f in result["findings"] if f["rule"] == rule]


def _edit_checkpoint(src, dst, edit):
    """Copy a saved checkpoint and rewrite model.safetensors after ``edit(tensors)``."""
    shutil.copytree(src, dst)
    tensors = load_file(dst / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_bert_key_bias_is_a_noop_and_value_bias_absorbable(tiny_dir):
    path = tiny_dir("bert")
    result = idinspect.inspect(path)
    stored = load_file(path / "model.safetensors")
    noop, absorb = _by_rule(result, "noop-bias"), _by_rule(result, "absorbable-bias")
    assert [f["layer"] for f in noop] == [0, 1] and [f["layer"] for f in absorb] == [0, 1]
    for f in noop:
        name = f"bert.encoder.layer.{f['layer']}.attention.self.key.bias"
        assert f["tensor"] == name and f["severity"] == "warning"
        assert f["parameters"] == 16 == result["layers"][f["layer"]]["noop_bias"]
        assert f["max_abs"] == stored[name].abs().max().item()
        assert "no-op" in f["message"] and name in f["message"]
    for f in absorb:
        name = f"bert.encoder.layer.{f['layer']}.attention.self.value.bias"
        assert f["tensor"] == name and f["severity"] == "note" and f["parameters"] == 16
        assert f["into"] == f"bert.encoder.layer.{f['layer']}.attention.output.dense.bias"
        assert f["max_abs"] == stored[name].abs().max().item()


def test_gpt2_findings_name_the_slice_of_the_fused_tensor(tiny_dir):
    result = idinspect.inspect(tiny_dir("gpt2"))
    noop = _by_rule(result, "noop-bias")
    assert [f["tensor"] for f in noop] == [f"transformer.h.{i}.attn.c_attn.bias[16:32]" for i in range(2)]


# --- rank deficiency made in a checkpoint ------------------------------------------------------------

def _low_rank(rows: int, cols: int, rank: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, rank, generator=g, dtype=torch.float64) @ torch.randn(rank, cols, generator=g, dtype=torch.float64)


def test_full_rank_checkpoint_has_no_rank_finding(tiny_dir):
    result = idinspect.inspect(tiny_dir("llama-mha"))
    assert not _by_rule(result, "rank-deficient-head")
    for layer in result["layers"]:
        assert layer["spectra"]["qk_rank"] == [4] * 4 and layer["spectra"]["ov_rank"] == [4] * 4
        assert all(c is not None and c >= 1 for c in layer["spectra"]["qk_condition"])
        assert layer["extra_unidentified"] == 0


def test_rank_deficient_query_head_is_found(tiny_dir, tmp_path):
    """W_Q^1 of layer 0 with rank 3 < d_k = 4: W_QK^1 is rank 3; under RoPE it gains no freedom."""
    name = "model.layers.0.self_attn.q_proj.weight"

    def edit(t):
        t[name][4:8, :] = _low_rank(4, 16, 3, seed=1)

    path = _edit_checkpoint(tiny_dir("llama-mha"), tmp_path / "ckpt", edit)
    result = idinspect.inspect(path)
    found = _by_rule(result, "rank-deficient-head")
    assert [(f["layer"], f["head"], f["kind"], f["rank"]) for f in found] == [(0, 1, "qk", 3)]
    f = found[0]
    assert f["severity"] == "warning" and name in f["tensor"]
    assert f["tolerance"] == result["layers"][0]["spectra"]["rank_rtol"] > 0
    assert "tolerance" in f["message"] and "rank 3 < 4" in f["message"]
    assert f["singular_values"][-1] < f["tolerance"] * f["singular_values"][0]
    assert result["layers"][0]["spectra"]["qk_rank"] == [4, 3, 4, 4]
    assert result["layers"][0]["spectra"]["qk_condition"][1] is None or result["layers"][0]["spectra"]["qk_condition"][1] > 1e13
    assert f["group_extra_unidentified"] == 0 and "adds no freedom" in f["message"]
    # the claim "no extra freedom" is checked on the edited checkpoint itself
    hf = _reload(path)
    assert attention_nullity(hf, *tiny.attention_modules(hf, 0)).nullity == result["layers"][0]["unidentified_with_weights"] == 80


def test_rank_deficient_output_head_adds_freedom(tiny_dir, tmp_path):
    """W_O^2 of layer 1 with rank 3: the VO factors gain d - d_k = 12 directions, seen by the Jacobian."""
    name = "model.layers.1.self_attn.o_proj.weight"

    def edit(t):
        t[name][:, 8:12] = _low_rank(16, 4, 3, seed=2)

    path = _edit_checkpoint(tiny_dir("llama-mha"), tmp_path / "ckpt", edit)
    result = idinspect.inspect(path)
    found = _by_rule(result, "rank-deficient-head")
    assert [(f["layer"], f["head"], f["kind"], f["rank"]) for f in found] == [(1, 2, "ov", 3)]
    assert found[0]["group_extra_unidentified"] == 12
    layer = result["layers"][1]
    assert layer["unidentified_parameters"] == 80 and layer["unidentified_with_weights"] == 92
    assert result["totals"]["extra_unidentified"] == 12
    hf = _reload(path)
    assert attention_nullity(hf, *tiny.attention_modules(hf, 1)).nullity == 92


def test_dead_head_frees_its_query_factor(tiny_dir, tmp_path):
    """W_O^0 = 0 in a BERT: the head's W_OV is 0, so its whole QK side is unidentified too."""
    def edit(t):
        t["bert.encoder.layer.0.attention.output.dense.weight"][:, 0:4] = 0

    path = _edit_checkpoint(tiny_dir("bert"), tmp_path / "ckpt", edit)
    result = idinspect.inspect(path)
    (f,) = _by_rule(result, "rank-deficient-head")
    assert (f["head"], f["kind"], f["rank"], f["dead"]) == (0, "ov", 0, True)
    assert f["group_extra_unidentified_qk"] == (17 * 4 + 16 * 4) - 16      # [W_Q; b_Q], W_K free, minus the gauge
    hf = _reload(path)
    nullity = attention_nullity(hf, *tiny.attention_modules(hf, 0)).nullity
    assert nullity == result["layers"][0]["unidentified_with_weights"] == 160 + 116 + 48


def _reload(path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    cfg = AutoConfig.from_pretrained(path)
    cls = AutoModelForMaskedLM if cfg.model_type == "bert" else AutoModelForCausalLM
    return cls.from_pretrained(path, attn_implementation="sdpa", dtype=torch.float64).eval()


# --- NaN / Inf -----------------------------------------------------------------------------------------

def test_nan_and_inf_are_findings_not_crashes(tiny_dir, tmp_path):
    k_name = "model.layers.1.self_attn.k_proj.weight"
    b_name = "model.layers.0.self_attn.v_proj.bias"

    def edit(t):
        t[k_name][5, 3] = float("nan")           # kv head 1 (rows 4..7)
        t[k_name][6, 0] = float("inf")
        t[b_name][0] = float("-inf")

    path = _edit_checkpoint(tiny_dir("llama-bias"), tmp_path / "ckpt", edit)
    res = run_cli(path, "--format", "json")
    assert res.code == 0, res.stderr
    result = json.loads(res.stdout)                              # strict JSON: no NaN tokens
    json.dumps(result, allow_nan=False)
    bad = _by_rule(result, "non-finite")
    assert [(f["layer"], f["tensor"], f["parameters"], f["nan"], f["inf"]) for f in bad] == [
        (0, b_name, 1, 0, 1), (1, k_name, 2, 1, 1)]
    assert all(f["severity"] == "error" for f in bad)
    assert bad[1]["heads"] == [1] and bad[1]["head_kind"] == "kv"
    spectra = result["layers"][1]["spectra"]
    assert spectra["qk"][:2] != [None, None] and spectra["qk"][2:] == [None, None]   # heads 2, 3 read kv head 1
    assert spectra["qk_rank"][2:] == [None, None] and spectra["ov"][2] is not None
    assert result["layers"][1]["extra_unidentified"] is None
    assert result["totals"]["extra_unidentified"] is None
    absorb = [f for f in _by_rule(result, "absorbable-bias") if f["layer"] == 0]
    assert absorb and absorb[0]["max_abs"] is None                # not a number to report


# --- spectra against the explicit d x d products (formed here, in the test, only) ------------------


def test_gram_route_only_for_certainly_well_conditioned_factors(monkeypatch):
    """The Frobenius bound used to pick Gram/Cholesky is >= the true condition number, and factors
    above the cut (or rank-deficient) go to the QR, whose R gives exact singular values."""
    from idinspect.forms.per_head import spectra

    g = torch.Generator().manual_seed(3)
    W = torch.randn(12, 200, 8, generator=g, dtype=torch.float64)
    W[1] *= torch.logspace(0, 5, 8, dtype=torch.float64)          # cond ~ 1e5
    W[2, :, 3] = W[2, :, 4]                                         # rank 7
    W[3] *= torch.logspace(0, 2.5, 8, dtype=torch.float64)        # cond ~ 3e2, possibly over the bound
    calls = []
    real_qr = torch.linalg.qr
    monkeypatch.setattr(torch.linalg, "qr", lambda A, mode="reduced": calls.append(A.shape[0]) or real_qr(A, mode=mode))
    R, finite, _ = spectra._r_factor(W)
    assert finite.all()
    assert calls == [calls[0]] and 2 <= calls[0] <= 3               # one batched fallback for heads 1, 2 (and 3)
    for h in range(12):
        assert torch.allclose(torch.linalg.svdvals(R[h]), torch.linalg.svdvals(W[h]), rtol=1e-9, atol=1e-12)
    G = W.transpose(-1, -2) @ W
    R_ok = torch.linalg.cholesky(G[[0, 4, 5]], upper=True)
    bound = R_ok.flatten(1).norm(dim=1) * torch.linalg.inv(R_ok).flatten(1).norm(dim=1)
    assert (bound >= torch.linalg.cond(W[[0, 4, 5]])).all()


def test_finiteness_comes_out_of_the_gram_matrices():
    """NaN/Inf heads are found from W^T W alone; an overflowing Gram of finite entries is not
    mistaken for one (it takes the QR route and gives exact singular values)."""
    from idinspect.forms.per_head import spectra

    g = torch.Generator().manual_seed(5)
    W = torch.randn(5, 50, 4, generator=g, dtype=torch.float64)
    W[1, 7, 2] = float("nan")
    W[2, 0, 0] = float("inf")
    W[3] *= 1e160                                                   # finite, but W^T W overflows
    R, finite, _ = spectra._r_factor(W)
    assert finite.tolist() == [True, False, False, True, True]
    assert torch.equal(R[1], torch.eye(4, dtype=torch.float64))
    assert torch.allclose(torch.linalg.svdvals(R[3]), torch.linalg.svdvals(W[3]), rtol=1e-12)


def test_spectra_dict_reports_an_overflowed_core_as_null_and_leaves_its_input_alone():
    from idinspect.forms.per_head.spectra import HeadSpectra, spectra_dict

    qk = torch.tensor([[2.0, 1.0], [float("inf"), 1.0]], dtype=torch.float64)
    ov = torch.tensor([[3.0, 1.0], [2.0, 0.5]], dtype=torch.float64)
    ok = torch.tensor([True, True])
    s = HeadSpectra(qk=qk, ov=ov, qk_planes=None, qk_ok=ok.clone(), ov_ok=ok.clone(), rtol=1e-12)
    out = spectra_dict(s)
    assert out["qk"] == [[2.0, 1.0], None] and out["qk_rank"] == [2, None]
    assert out["ov"] == [[3.0, 1.0], [2.0, 0.5]]
    assert s.qk_ok.tolist() == [True, True] and s.ov_ok.tolist() == [True, True]


def test_one_severity_table():
    """A finding's default severity comes from idinspect.rules.RULES only: no module that makes
    findings writes a severity of its own (``"severity": "error"`` in a dict literal)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    literal = []
    for path in [*(root / "idinspect").rglob("*.py"), *(root / "adapters").rglob("*.py")]:
        if path.name == "rules.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value == "severity" and isinstance(v, ast.Constant):
                        literal.append(f"{path.relative_to(root)}:{node.lineno}")
    assert literal == []
    from idinspect.rules import RULES, default_severity

    assert all(default_severity(r.id) == r.severity for r in RULES)
