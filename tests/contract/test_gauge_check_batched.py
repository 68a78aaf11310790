"""The per-variant contract of tests/forms/test_gauge_check_batched.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""


import pytest

import idinspect
from idinspect.forms.per_head.residuals import gauge_residuals
from tests.forms.test_gauge_check_batched import reference  # noqa: F401


@pytest.mark.parametrize("variant", ["llama-gqa", "llama-bias", "gpt-neox", "llama3-rope"])
def test_batched_conditions_equal_the_definitions(variant, tiny_dir, tmp_path):
    from idinspect.exporting.pipeline import export

    export(tiny_dir(variant), tmp_path / "out")
    for source in (tiny_dir(variant), tmp_path / "out"):     # far from fixed, and fixed
        with idinspect.load(source) as model:
            for layer in model.layers():
                got = dict((where, value) for value, where in gauge_residuals(layer))
                want = reference(layer)
                assert want.keys() <= got.keys()
                for where, value in want.items():
                    assert got[where] == pytest.approx(value, rel=1e-9, abs=1e-15), where
