"""Multi-head latent attention (DeepSeek-V2/V3): the counts proven on the real HF modules in float64.

The generic tests cover the MLA variants where they apply (equivalence with the HF module, round
trip, Jacobian exact/near-null bands = reported counts, config facts, coverage); here: the MATH.md
case (788 exact + 2 nearly null of 4000), the epsilon switch (eps = 0 makes the near-null scales
exact; a large eps identifies them), the gauge group itself (every move leaves the function
unchanged and the orbit has exactly the counted dimension), and what the per-head commands do.
"""

import json

import pytest
import torch
import transformers as tf

import idinspect
from idinspect.forms import form_of
from idinspect.forms.latent import structure as ls
from tests.support import tiny
from tests.support.cli import run_cli
from tests.support.jacobian import (
    attention_singular_values,
    jacobian_bands,
)

LATENT = tiny.variants("latent")


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


def _mla(d: int, H: int, rq: int | None, r: int, n: int, e: int, v: int):
    """A one-layer random DeepSeek-V3 model in float64 (sdpa), dense MLP."""
    cfg = tf.DeepseekV3Config(hidden_size=d, intermediate_size=16, num_hidden_layers=1, num_attention_heads=H,
                              num_key_value_heads=H, q_lora_rank=rq, kv_lora_rank=r, qk_nope_head_dim=n,
                              qk_rope_head_dim=e, v_head_dim=v, first_k_dense_replace=1, n_routed_experts=2,
                              num_experts_per_tok=1, n_group=1, topk_group=1, vocab_size=32,
                              max_position_embeddings=32)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    hf = tf.DeepseekV3Model(cfg).to(torch.float64).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.5)
    return hf


def test_math_md_case_788_exact_and_2_nearly_null():
    """d=32, H=4, r_q = r = 16, n=8, e=4, v=8: 4000 parameters, 788 exact and 2 nearly-null directions."""
    hf = _mla(32, 4, 16, 16, 8, 4, 8)
    model = idinspect.load(hf)
    layer = model.layer(0)
    assert layer.parameter_count() == 4000
    assert ls.unidentified_dims(layer) == 4 * 64 + 4 + 4 * 64 + 2 * 136 == 788
    assert ls.near_unidentified_dims(layer) == 2
    s, P, _ = attention_singular_values(hf, hf.layers[0].self_attn, batches=3, exact=model.adapter.exact_float64)
    assert P == 4000
    assert jacobian_bands(s) == (788, 2)


def _float64_layer(variant: str, i: int = 0):
    return idinspect.load(tiny.build(variant)).layer(i).to(torch.float64)


def test_refusals_of_what_the_counts_do_not_model():
    L = _float64_layer("deepseek-v3")
    ls.require_modelled_latent(L)
    wide = L.replace(W_KB=torch.zeros(L.n_heads, L.kv_rank, L.kv_rank + 1, dtype=torch.float64))
    with pytest.raises(idinspect.errors.UnsupportedLayerError, match="qk_nope_head_dim 9 exceeds 8"):
        ls.require_modelled_latent(wide)
    with pytest.raises(idinspect.errors.UnsupportedLayerError, match="qkv_clip"):
        ls.require_modelled_latent(L.replace(flags=frozenset({"qkv_clip"})))


def test_inspect_reports_exact_and_nearly_null_counts(tiny_dir):
    result = idinspect.inspect(tiny_dir("deepseek-v3"))
    layer = result["layers"][0]
    assert layer["attention"] == "latent" and layer["latent"]["kv_rank"] == 8 and layer["latent"]["q_rank"] == 8
    assert (layer["attention_parameters"], layer["unidentified_parameters"], layer["near_unidentified"]) == (720, 140, 2)
    assert (layer["qk_gauge"], layer["vo_gauge"], layer["latent_gauge"]) == (2 * 16 + 4, 2 * 16, 2 * 36)
    assert 0 < layer["near_unidentified_scale"] < 1e-5
    assert result["totals"]["near_unidentified"] == 4 and result["totals"]["unidentified_parameters"] == 280
    assert result["layers"][0]["spectra"] is None if "spectra" in layer else True
    text = run_cli(*["inspect", str(tiny_dir("deepseek-v3"))])
    assert text.code == 0, text.stderr
    assert "latent attention" in text.stdout and "Nearly null" in text.stdout and "r(r+1)/2" in text.stdout
    data = json.loads(run_cli(*["inspect", str(tiny_dir("deepseek-v3")), "--format", "json"]).stdout)
    assert data["layers"][1]["near_unidentified"] == 2


@pytest.mark.parametrize("argv", [["compare", "{m}", "{m}"], ["fingerprint", "{m}"], ["diff", "{m}", "{m}"],
                                  ["verify", "{m}", "{m}", "--no-functional"]])
def test_per_head_commands_refuse_latent_attention_by_name(argv, tiny_dir, tmp_path):
    m = str(tiny_dir("deepseek-v3"))
    r = run_cli(*[a.format(m=m, out=tmp_path / "out") for a in argv])
    assert r.code == 2, (r.code, r.stdout, r.stderr)
    assert "multi-head latent attention" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_verify_compares_latent_checkpoints_function_level(tiny_dir):
    m = str(tiny_dir("deepseek-v3-direct-q"))
    r = idinspect.verify(m, m)
    assert r.equivalent
    checks = {c.name: c for c in r.checks}
    assert checks["invariants"].passed is None and "latent" in checks["invariants"].detail
    assert checks["functional"].passed and checks["functional"].error == 0.0


def test_latent_layers_are_the_latent_form(tiny_dir):
    model = idinspect.load(tiny_dir("deepseek-v2"))
    assert all(form_of(layer).name == "latent" for layer in model.layers())
    assert model.adapter.positional().rotary.pairing == "interleaved"
    assert idinspect.load(tiny_dir("deepseek-v3-direct-q")).adapter.positional().rotary.pairing == "half"


# --- the gauge-fixed form, export and --prove ------------------------------------------------------


def test_export_is_gauge_fixed_and_verified(tiny_dir, tmp_path):
    from idinspect.forms import is_gauge_fixed

    src = tiny_dir("deepseek-v3")
    r = run_cli("export", src, tmp_path / "out", "--format", "json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["gauge"]["name"] == "balanced-latent"
    with idinspect.load(tmp_path / "out") as out, idinspect.load(src) as original:
        assert is_gauge_fixed(out)[0] and not is_gauge_fixed(original)[0]
    assert idinspect.verify(src, tmp_path / "out").equivalent
    audit = run_cli("audit", tmp_path / "out", "--require-gauge-fixed")
    assert audit.code == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize("variant", ["deepseek-v3", "deepseek-v2"])
def test_check_adapter_covers_the_latent_form(variant):
    """The plugin contract (idinspect.testing.check_adapter) on latent attention: bit-exact round trip,
    the reference against the HF module at 1e-10, and the twin's exact and nearly-null bands equal to
    the counts (--auto proves the latent adapters it infers with it)."""
    from idinspect.testing import check_adapter

    result = check_adapter(tiny.build(variant))
    assert result["max_reference_error"] <= 1e-10
    assert result["proof"]["agree"] is True
    assert result["proof"]["jacobian_near_null"] == result["proof"]["structural_near_unidentified"]
