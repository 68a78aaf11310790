"""The per-variant contract of tests/forms/test_precision.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""

from __future__ import annotations

import pytest
import torch

import idinspect
from idinspect.numerics import precision
from tests.forms.test_precision import _rank_deficient_and_dead, _without_values  # noqa: F401
from tests.support import tiny


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2"])
def test_low_precision_checkpoint_reports_what_its_float32_copy_reports(variant, dtype, tmp_path):
    """The same weights stored in bf16/fp16 (float32 Gram route) and widened exactly to float32
    (float64 routes): equal counts, ranks and findings; singular values within the stored dtype's
    unit roundoff of the largest."""
    model = tiny.build(variant, dtype=torch.float32)
    if variant.startswith("llama"):
        _rank_deficient_and_dead(model)
    low = tiny.save(model, tmp_path / "low", dtype=dtype)
    wide = tiny.save(model.to(dtype).to(torch.float32), tmp_path / "wide")
    a, b = idinspect.inspect(low), idinspect.inspect(wide)
    assert a["totals"] == b["totals"]
    u = precision.unit_roundoff(dtype)
    for la, lb in zip(a["layers"], b["layers"]):
        sa, sb = la.pop("spectra"), lb.pop("spectra")
        assert la == lb
        for key in ("qk_rank", "ov_rank"):
            assert sa[key] == sb[key]
        for key in ("qk", "ov", "qk_planes"):
            for ha, hb in zip(sa.get(key) or [], sb.get(key) or []):
                x, y = torch.tensor(ha, dtype=torch.float64), torch.tensor(hb, dtype=torch.float64)
                assert (x - y).abs().max() <= u * y.abs().max()
    assert _without_values(a["findings"]) == _without_values(b["findings"])
    if variant.startswith("llama"):
        found = {(f["rule"], f.get("head"), f.get("kind")) for f in a["findings"]}
        assert {("rank-deficient-head", 0, "qk"), ("rank-deficient-head", 1, "ov")} <= found
        assert a["layers"][0]["dead_heads"] == b["layers"][0]["dead_heads"] == [1]
