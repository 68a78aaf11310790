"""The per-variant contract of tests/forms/test_whole_model_jacobian.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""

from __future__ import annotations

import pytest

from tests.forms.test_whole_model_jacobian import (  # noqa: F401
    OVERSAMPLE,
    TWINS,
    _assert_every_unit_switches,
    _reported,
    _twin,
)
from tests.support.whole_jacobian import (
    NULL_RTOL,
    sample_ids,
    whole_model_singular_values,
)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_whole_model_nullity_equals_the_reported_count(name, tmp_path):
    model = _twin(name)
    report = _reported(model, tmp_path)
    assert report["derived"], report
    tokens = model.config.n_positions if hasattr(model.config, "n_positions") else 8
    if getattr(model.config, "activation_function", "") == "relu":
        _assert_every_unit_switches(model, sample_ids(model, tokens, oversample=OVERSAMPLE[name]))
    s_logits, s_log_probs, P = whole_model_singular_values(model, tokens=tokens, oversample=OVERSAMPLE.get(name, 2.5))
    for log_probs, expected, s in ((False, report["exact"], s_logits), (True, report["exact_log_prob"], s_log_probs)):
        null = int((s < NULL_RTOL).sum())
        dropped = float(s[s < NULL_RTOL].max()) if null else 0.0
        kept = float(s[s >= NULL_RTOL].min())
        print(f"{name} log_probs={log_probs}: P={P} nullity={null} reported={expected} largest null {dropped:.1e} "
              f"smallest kept {kept:.1e}")
        assert P == report["parameters_total"]
        assert null == expected, (name, log_probs, null, expected, report["components"])
        assert dropped < NULL_RTOL / 30 and kept > NULL_RTOL * 30, (dropped, kept)   # a gap of >= 3 decades
