"""The per-variant contract of tests/compare/test_comparison_precision.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/compare/."""

from __future__ import annotations

import pytest
import torch

from idinspect.forms.per_head import invariant_error_tensors
from tests.compare.test_comparison_precision import _pair  # noqa: F401


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2", "qwen2"])
def test_float32_alignment_matches_float64(variant, dtype, tmp_path):
    """Every invariant's change, per head, within 1e-4 of the float64 value (relative), and a layer
    against itself within 1e-6 (the float32 floor), on RoPE, GQA, biased and fused layouts."""
    a, b = _pair(variant, dtype, tmp_path)
    e64 = invariant_error_tensors(a, b)
    e32 = invariant_error_tensors(a, b, precision=torch.float32)
    assert e64.keys() == e32.keys()
    for kind in e64:
        assert e32[kind].dtype == torch.float64
        assert torch.allclose(e32[kind], e64[kind], rtol=1e-4, atol=1e-7), kind
    assert max(float(v.max()) for v in invariant_error_tensors(a, a, precision=torch.float32).values()) < 1e-6
