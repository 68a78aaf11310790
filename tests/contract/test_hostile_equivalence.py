"""The per-variant contract of tests/hostile/test_hostile_equivalence.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/hostile/."""

from __future__ import annotations

import pytest

from tests.support.hostile import (
    case_dir,
    run_case,
)


@pytest.mark.parametrize("variant", ["llama-bias", "bert", "gpt2", "qwen2"])
def test_own_export_passes_audit_at_warning(tiny_dir, tmp_path, variant):
    case_dir(tiny_dir(variant), tmp_path)
    run_case(tmp_path, "export", "model", "out", code=0, expect=("out",))
    case = run_case(tmp_path, "audit", "out", "--fail-on", "warning", code=0)
    assert "noop-bias" not in case.out and "absorbable-bias" not in case.out
