"""The per-variant contract of tests/forms/test_gauge.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""

from __future__ import annotations

import pytest
import torch

from idinspect.forms import is_gauge_fixed
from idinspect.forms.per_head import (
    canonicalize,
    gauge_residuals,
    invariant_errors,
)
from tests.forms.test_gauge import IDS, LAYERS, _max_rel, _out, random_gauge  # noqa: F401


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_function_and_invariants_unchanged(name, layer):
    fixed, _ = canonicalize(layer)
    assert fixed.dtype == torch.float64
    errors = invariant_errors(layer, fixed)
    assert max(e.error for e in errors.values()) <= 1e-12, errors
    y0, y1 = _out(layer), _out(fixed)
    assert float((y0 - y1).norm() / y0.norm()) <= 1e-12


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_the_form_changes_the_weights(name, layer):
    """Not a no-op: canonicalising random weights moves them (so the other tests can fail)."""
    fixed, _ = canonicalize(layer)
    assert _max_rel(layer.to(torch.float64), fixed) > 1e-2


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_orbit_invariance(name, layer):
    """Any gauge transform of the input gives the same gauge-fixed form."""
    fixed, _ = canonicalize(layer)
    for seed in (1, 2):
        moved = random_gauge(layer, seed)
        assert _max_rel(layer.to(torch.float64), moved) > 1e-2           # really moved
        assert max(e.error for e in invariant_errors(layer, moved).values()) <= 1e-12
        moved_fixed, _ = canonicalize(moved)
        assert _max_rel(fixed, moved_fixed) <= 1e-9, f"{name} seed {seed}: {_max_rel(fixed, moved_fixed):.2e}"


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_idempotent(name, layer):
    once, _ = canonicalize(layer)
    twice, _ = canonicalize(once)
    assert _max_rel(once, twice) <= 1e-12


@pytest.mark.parametrize("name,layer", LAYERS, ids=IDS)
def test_defining_conditions_hold(name, layer):
    fixed, report = canonicalize(layer)
    assert report.unique
    assert max(v for v, _ in gauge_residuals(fixed)) <= 1e-12
    ok, worst, where = is_gauge_fixed(fixed)
    assert ok and worst <= 1e-12
    ok, worst, where = is_gauge_fixed(layer)
    assert not ok and worst > 0.1 and where.startswith("layer ")
