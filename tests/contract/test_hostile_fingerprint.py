"""The per-variant contract of tests/hostile/test_hostile_fingerprint.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/hostile/."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize("variant", ["llama-gqa", "bert", "gpt2"])
def test_a_fingerprint_read_back_and_written_again_is_the_same_file(tiny_dir, tmp_path, variant):
    """Radii capped at the top of their range (float64 tiny models: the 1e-9 term of unbalanced
    factors) stay within it read back, and writing the file again changes nothing."""
    first = tmp_path / "fp.json"
    assert run_cli("fingerprint", tiny_dir(variant), "-o", first).code == 0
    again = run_cli("fingerprint", first)
    assert again.code == 0 and again.stdout == first.read_text()
    assert run_cli("compare", first, tiny_dir(variant)).code == 0
