"""The per-variant contract of tests/forms/test_counts.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""


import pytest

import idinspect
from tests.support import tiny


@pytest.mark.parametrize("variant", ["llama3-rope", "gpt2", "bert"])
def test_model_parameters_count_tied_embeddings_once(variant, tiny_dir):
    hf = tiny.build(variant)
    n_params = sum(p.numel() for p in hf.parameters())          # torch lists a tied matrix once
    assert idinspect.inspect(tiny_dir(variant), spectra=False)["totals"]["model_parameters"] == n_params
    assert idinspect.inspect(hf, spectra=False)["totals"]["model_parameters"] == n_params
