"""The per-variant contract of tests/forms/test_gauge_routes.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""

from __future__ import annotations

import pytest
import torch

from idinspect.forms.per_head import (
    canonicalize,
    invariant_errors,
)
from tests.forms.test_gauge import (
    IDS,
    LAYERS,
    random_gauge,
)
from tests.forms.test_gauge_routes import FIELDS, _qr_errors, _routes  # noqa: F401


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_gram_route_equals_qr_route(name, layer):
    gram, qr = _routes(layer)
    assert gram is not None, "well-conditioned random weights take the Gram route"
    for f in FIELDS if layer.qk_norm is None else ("W_V", "b_V", "W_O", "s_vo"):   # q/k norm: QK is kept as stored
        a, b = getattr(gram, f), getattr(qr, f)
        assert (a is None) == (b is None), f
        if b is not None:
            assert float((a - b).norm()) <= 1e-12 * max(float(b.norm()), 1.0), f


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_aligned_invariant_errors_equal_the_qr_ones(name, layer):
    fixed, _ = canonicalize(layer)
    pairs = {"fixed": fixed, "moved": random_gauge(layer, 3), "generic": random_gauge(layer, 4, generic_qk=True),
             "bf16": fixed.to(torch.bfloat16), "f32": fixed.to(torch.float32),
             "f16 moved": random_gauge(layer, 5).to(torch.float16)}
    for what, other in pairs.items():
        fast = {k: e.error for k, e in invariant_errors(layer, other).items() if k not in ("output_bias", "sinks")}
        ref = _qr_errors(layer, other)
        assert fast.keys() == ref.keys()
        for k in ref:
            if max(fast[k], ref[k]) > 1e-12:
                assert abs(fast[k] - ref[k]) <= 1e-6 * ref[k], (what, k, fast[k], ref[k])
            else:
                assert fast[k] <= 1e-13 and ref[k] <= 1e-13, (what, k, fast[k], ref[k])


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_reused_grams_and_overwriting_give_the_same_errors(name, layer):
    """grams_a (the canonicalisation's own Grams) and overwrite_a change the cost, not the answer;
    without overwrite_a the caller's float64 tensors are left alone."""
    original = layer.to(torch.float64)
    fixed, report = canonicalize(original)
    for other in (fixed.to(torch.bfloat16), fixed, random_gauge(layer, 6).to(torch.float32)):
        plain = {k: e.error for k, e in invariant_errors(original, other).items()}
        kept = {r: t.clone() for r, t in original.tensors().items()}
        reused = {k: e.error for k, e in invariant_errors(original, other, grams_a=report.head_grams).items()}
        assert all(torch.equal(t, kept[r]) for r, t in original.tensors().items())
        scratch = original.replace(**{r: t.clone() for r, t in original.tensors().items()})
        consumed = {k: e.error for k, e in invariant_errors(scratch, other, overwrite_a=True,
                                                            grams_a=report.head_grams).items()}
        for k, want in plain.items():
            for got in (reused[k], consumed[k]):
                assert abs(got - want) <= 1e-9 * want + 1e-15, (k, got, want)
