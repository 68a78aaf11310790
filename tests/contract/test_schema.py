"""The per-variant contract of tests/reports/test_schema.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/reports/."""


import pytest

from tests.reports.test_schema import _json, validator  # noqa: F401


@pytest.mark.parametrize("variant", ["bert", "gpt2", "llama-gqa", "llama-bias", "qwen2", "mistral", "llama3-rope", "llama4-text"])
def test_tiny_output_validates(variant, tiny_dir, validator):
    validator.validate(_json(tiny_dir(variant)))
