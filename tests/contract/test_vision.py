"""The per-variant contract of tests/forms/test_vision.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize("variant", ["vit", "clip"])
def test_verify_runs_vision_models_on_images(variant, tiny_dir, tmp_path):
    """``idinspect verify`` feeds pixel_values (and tokens to a text tower) and compares the outputs."""
    src = tiny_dir(variant)
    assert run_cli("export", src, tmp_path / "out").code == 0
    res = run_cli("verify", src, tmp_path / "out")
    assert res.code == 0, res.stderr
    assert "equivalent" in res.stdout and ("logits_per_image" in res.stdout) == (variant == "clip")
