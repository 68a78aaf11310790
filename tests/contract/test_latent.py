"""The per-variant contract of tests/forms/test_latent.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""


import json

import pytest
import torch

import idinspect
from idinspect.forms import reference_attention
from idinspect.forms.latent import structure as ls
from tests.forms.test_latent import LATENT, _float64_layer, _rel  # noqa: F401
from tests.support import tiny
from tests.support.cli import run_cli
from tests.support.jacobian import (
    RTOL,
    attention_nullity,
)
from tests.support.latent_moves import coordinates, flat, move


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
