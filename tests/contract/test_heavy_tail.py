"""The per-variant contract of tests/forms/test_heavy_tail.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""

from __future__ import annotations

import pytest
import torch

import idinspect
from tests.forms.test_gauge import random_gauge
from tests.forms.test_heavy_tail import _assert_invariant  # noqa: F401
from tests.support import tiny


@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2", "qwen2"])
def test_invariant_tiny_families(variant):
    model = idinspect.load(tiny.build(variant))
    for layer in model.layers():
        _assert_invariant(layer.to(torch.float64), random_gauge(layer, 3 + layer.index))
