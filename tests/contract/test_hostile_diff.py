"""The per-variant contract of tests/hostile/test_hostile_diff.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/hostile/."""

from __future__ import annotations

import pytest

from tests.hostile.test_hostile_diff import UNRELATED, _result  # noqa: F401
from tests.support import tiny
from tests.support.hostile import run_case


@pytest.mark.parametrize("variant,dtype", UNRELATED, ids=[f"{v}-{str(d)[6:]}" for v, d in UNRELATED])
def test_diff_of_unrelated_models_of_one_shape_is_a_result(tmp_path, variant, dtype):
    tiny.save(tiny.build(variant, seed=1), tmp_path / "a", dtype=dtype)
    tiny.save(tiny.build(variant, seed=2), tmp_path / "b", dtype=dtype)
    doc = _result(run_case(tmp_path, "diff", tmp_path / "a", tmp_path / "b", "--format", "json", code=0))
    assert doc["totals"]["invariant_change_max"] > 1e-2          # unrelated: the function changed
