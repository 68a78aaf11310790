"""The per-variant contract of tests/compare/test_compare_invariants.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/compare/."""

from __future__ import annotations

import pytest
import torch

from idinspect.compare.invariants import layer_invariants, unit_roundoff
from tests.compare.test_compare_invariants import _gauge, _layer, _rotate, _values  # noqa: F401
from tests.support import tiny


@pytest.mark.parametrize("variant", ["bert", "gpt2", "llama-mha", "llama-gqa", "llama-head-dim", "llama3-rope"])
def test_invariants_unchanged_by_gauge_rotation_and_folded_gain(variant):
    gen = torch.Generator().manual_seed(3)
    L = _layer(variant)
    gain = 0.5 + torch.rand(L.d_model, generator=gen, dtype=torch.float64)
    ref = layer_invariants(L, gain)
    rope = L.positional.kind == "rope"
    folded_first = _rotate(_gauge(L, gen, rope), gain, gen)
    other = layer_invariants(folded_first, None)          # gain folded into the weights, none stored
    for x, y in zip(_values(ref), _values(other)):
        assert torch.allclose(x, y, rtol=1e-9, atol=1e-12 * float(x.max())), variant
    # head permutation permutes the rows
    if L.group_size == 1:
        perm = torch.randperm(L.n_heads, generator=gen)
        P = L.replace(W_Q=L.W_Q[perm], W_K=L.W_K[perm], W_V=L.W_V[perm], W_O=L.W_O[perm])
        inv = layer_invariants(P, gain)
        assert torch.allclose(inv.qk, ref.qk[perm], rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("variant", ["bert", "llama-gqa"])
def test_rounding_radius_bounds_a_cast_and_is_not_vacuous(variant, dtype):
    gen = torch.Generator().manual_seed(5)
    L = _layer(variant)
    gain = (0.5 + torch.rand(L.d_model, generator=gen, dtype=torch.float64))
    a = layer_invariants(L, gain)
    b = layer_invariants(L.to(dtype), gain.to(dtype))
    assert unit_roundoff(dtype) == torch.finfo(dtype).eps / 2
    worst = 0.0
    for kind in ("qk", "ov", "planes"):
        x, y = getattr(a, kind), getattr(b, kind)
        if x is None:
            continue
        ra, rb = getattr(a, f"radius_{kind}"), getattr(b, f"radius_{kind}")
        while ra.dim() < x.dim():
            ra, rb = ra[..., None], rb[..., None]
        ratio = (x - y).abs() / (ra + rb)
        worst = max(worst, float(ratio.max()))
    assert worst <= 1.0
    assert worst > 1e-3            # the bound is within three orders of magnitude of the real change


@pytest.mark.parametrize("variant", tiny.per_head(sorted(tiny.VARIANTS), "compare reads per-head invariants and "
                                                  "refuses it by name (tests/forms/test_latent.py)"))
def test_every_family_compares_to_itself_and_finds_its_gains(variant, tiny_dir):
    from idinspect.compare import compare
    from idinspect.model import load

    r = compare(tiny_dir(variant), tiny_dir(variant))
    assert r.verdict == "same-function"
    with load(tiny_dir(variant)) as m:
        known = bool(m.adapter.pre_norm or m.adapter.post_norm)
        known &= len({s.stack for s in m.adapter.sites}) == 1 and "cross" not in tiny.VARIANTS[variant].tags
    # ELECTRA's and ALBERT's embeddings norm has the embedding size, not the hidden size: nothing to
    # fold in front of layer 0 (the other layers' gains are folded); families whose adapter names
    # no norm (and encoder-decoder or cross-attention models) are not asserted
    if known:
        assert r.a.gains_folded == (variant not in ("electra", "albert-shared", "albert-groups")), variant
