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
from idinspect.forms import form_of, reference_attention
from idinspect.forms.latent import structure as ls
from tests.support import tiny
from tests.support.cli import run_cli
from tests.support.jacobian import (
    RTOL,
    attention_nullity,
    attention_singular_values,
    jacobian_bands,
)
from tests.support.latent_moves import coordinates, flat, move

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


@pytest.mark.parametrize("variant", ["deepseek-v3", "deepseek-v3-direct-q"])
@pytest.mark.parametrize("eps, near_is_exact", [(0.0, True), (0.05, False)])
def test_latent_norm_epsilon_decides_the_nearly_null_directions(variant, eps, near_is_exact):
    """eps = 0: the latent scales are exact null directions (nullity = exact + near, clean gap at RTOL);
    eps = 0.05: they are identified (nullity = exact)."""
    hf = tiny.build(variant)
    attn = hf.model.layers[0].self_attn
    for norm in (attn.q_a_layernorm, attn.kv_a_layernorm):
        if norm is not None:
            norm.variance_epsilon = eps
    model = idinspect.load(hf)
    layer = model.layer(0).replace(eps_Q=eps, eps_KV=eps)
    n = attention_nullity(hf, attn, exact=model.adapter.exact_float64)
    assert n.smallest_kept > 1e3 * RTOL and n.largest_dropped < 1e-3 * RTOL, n
    near = 2 if layer.q_rank else 1
    assert ls.near_unidentified_dims(layer) == (0 if eps == 0 else near)
    assert n.nullity == ls.unidentified_dims(layer) == (140 if layer.q_rank else 104) + (near if near_is_exact else 0)


def _float64_layer(variant: str, i: int = 0):
    return idinspect.load(tiny.build(variant)).layer(i).to(torch.float64)


@pytest.mark.parametrize("variant", LATENT)
def test_every_gauge_move_keeps_the_function_and_the_orbit_has_the_counted_dimension(variant):
    L = _float64_layer(variant)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 7, L.d_model, generator=g, dtype=torch.float64)
    y = reference_attention(L, x)
    k = coordinates(L)
    assert k == ls.unidentified_dims(L)
    moved = move(L, 0.3 * torch.randn(k, generator=g, dtype=torch.float64))
    assert _rel(flat(moved), flat(L)) > 0.1                       # the weights really moved
    assert _rel(reference_attention(moved, x), y) < 1e-12
    # the orbit's tangent space at L has dimension k: the group acts freely, no generator is redundant
    T = torch.autograd.functional.jacobian(lambda t: flat(move(L, t)), torch.zeros(k, dtype=torch.float64))
    assert int(torch.linalg.matrix_rank(T, rtol=1e-10)) == k
    # the latent scale: a tangent direction outside the exact orbit, changing the output only at eps's size
    ks = coordinates(L, scale=True)
    theta = torch.zeros(ks, dtype=torch.float64)
    theta[-1] = 0.5                                                 # the key/value latent's scale
    scaled = move(L, theta, scale=True)
    change = _rel(reference_attention(scaled, x), y)
    assert 0 < change < 1e-5
    Ts = torch.autograd.functional.jacobian(lambda t: flat(move(L, t, scale=True)), torch.zeros(ks, dtype=torch.float64))
    assert int(torch.linalg.matrix_rank(Ts, rtol=1e-10)) == k + ls.near_unidentified_dims(L)
    # and a move outside the group is seen
    broken = L.replace(W_KB=L.W_KB * 1.01)
    assert _rel(reference_attention(broken, x), y) > 1e-4


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

@pytest.mark.parametrize("variant", LATENT)
def test_gauge_fixed_form_keeps_the_function_is_idempotent_and_orbit_invariant(variant):
    from idinspect.forms.latent.gauge import (
        canonicalize_latent,
        latent_gauge_residuals,
        latent_output_error,
    )

    L = _float64_layer(variant, 1)
    fixed, notes = canonicalize_latent(L)
    assert notes == []
    assert latent_output_error(L, fixed).error < 1e-13
    assert _rel(flat(fixed), flat(L)) > 0.1
    assert bool((fixed.g_KV == 1).all())

    def gap(a, b):
        return max(_rel(getattr(b, r), getattr(a, r)) for r in a.tensors())

    assert gap(fixed, canonicalize_latent(fixed)[0]) < 1e-12
    moved = move(L, 0.1 * torch.randn(coordinates(L), generator=torch.Generator().manual_seed(9), dtype=torch.float64))
    assert gap(fixed, canonicalize_latent(moved)[0]) < 1e-12
    assert max(v for v, _ in latent_gauge_residuals(fixed)) < 1e-12
    assert max(v for v, _ in latent_gauge_residuals(L)) > 1e-2


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


@pytest.mark.parametrize("variant", LATENT)
def test_prove_checks_the_latent_twin(variant, tiny_dir):
    r = run_cli(tiny_dir(variant), "--prove", "--format", "json")
    assert r.code == 0, r.stderr
    proof = json.loads(r.stdout)["proof"]
    assert proof["agree"] is True and proof["twin"]["attention"] == "latent"
    assert proof["jacobian_nullity"] == proof["structural_unidentified"] > 0
    assert proof["jacobian_near_null"] == proof["structural_near_unidentified"] == (2 if "direct" not in variant and variant != "deepseek-v2" else 1)
    assert proof["largest_dropped_singular_value"] < 1e-14 and proof["smallest_kept_singular_value"] > 1e-6
    assert proof["twin"]["model_type"] == idinspect.load(tiny_dir(variant)).config.model_type
