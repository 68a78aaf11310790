"""The per-variant contract of tests/compare/test_diff.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/compare/."""

from __future__ import annotations

import pytest

from idinspect.training.diff import diff
from tests.compare.test_diff import _moved, _orthogonal_step  # noqa: F401
from tests.support.gauge_moves import gauge_move


@pytest.mark.parametrize("variant", ["gpt2", "llama-gqa", "llama-bias", "bert"])
def test_gauge_move_gives_rho_one_and_no_invariant_change(variant, tmp_path):
    a, b = _moved(variant, tmp_path, lambda layer, g: gauge_move(layer, g, 1e-5))
    doc = diff(str(a), str(b))
    for L in doc["layers"]:
        for grp in L["groups"]:
            for side in ("qk", "vo"):
                assert abs(grp[side]["rho"] - 1) < 1e-8
                assert grp[side]["beta_b"] == pytest.approx(grp[side]["beta_a"], rel=1e-3)
        assert L["invariant_change_max"] < 1e-12 < L["raw_change"]["relative"]
    assert doc["one_over_2H"] == 1 / (2 * doc["model"]["heads"])


@pytest.mark.parametrize("variant", ["gpt2", "qwen2"])
def test_orthogonal_step_gives_rho_zero(variant, tmp_path):
    a, b = _moved(variant, tmp_path, _orthogonal_step)
    doc = diff(str(a), str(b))
    assert doc["totals"]["rho"] < 1e-12
    assert all(L["invariant_change_max"] > 1e-6 for L in doc["layers"])
