"""llama3 RoPE frequencies computed without importing transformers equal transformers' own, bit for bit.

``idinspect.sources.rope_config`` computes llama3 scaling itself when config.json states it completely (importing
transformers is a fifth of a Llama-3.2-1B inspection). These tests pin that path to
``ROPE_INIT_FUNCTIONS["llama3"]`` of the installed transformers on a grid of settings, including
the published Llama 3.1 / 3.2 ones, in both config.json forms; and check that every other form is
left to transformers (and still agrees with it).
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
import torch
import transformers as tf
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from idinspect.sources import rope_config as rope
from idinspect.sources.config import CheckpointConfig

BASE = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072}


def _modern(head_dim: int, theta, **params) -> dict:
    """config.json as transformers 5 saves it: everything in rope_parameters."""
    return {**BASE, "head_dim": head_dim, "rope_parameters": {"rope_type": "llama3", "rope_theta": theta, **params}}


def _legacy(head_dim: int, theta, **params) -> dict:
    """config.json as the hub's Llama 3.x checkpoints have it: rope_scaling plus a top-level rope_theta."""
    return {**BASE, "head_dim": head_dim, "rope_theta": theta, "rope_scaling": {"rope_type": "llama3", **params}}


def _transformers(settings: dict) -> tuple[torch.Tensor, float]:
    return ROPE_INIT_FUNCTIONS["llama3"](tf.LlamaConfig(**settings))


def _ours(settings: dict):
    return rope.rotary_spec_from_config(CheckpointConfig(settings), "half")


def _assert_same_bits(settings: dict) -> None:
    expected, factor = _transformers(settings)
    got = _ours(settings)
    assert got.inv_freq.dtype == expected.dtype == torch.float32
    assert torch.equal(got.inv_freq, expected), (settings, (got.inv_freq - expected).abs().max())
    assert got.attention_factor == factor and got.rope_type == "llama3" and got.rotary_dim == 2 * expected.numel()


PUBLISHED = {
    # (head_dim, theta, factor, low, high, original max): Llama 3.1 8B/70B/405B, 3.2 1B and 3B
    "3.1": (128, 500000.0, 8.0, 1.0, 4.0, 8192),
    "3.2-1B": (64, 500000.0, 32.0, 1.0, 4.0, 8192),
    "3.2-3B": (128, 500000.0, 32.0, 1.0, 4.0, 8192),
}


@pytest.mark.parametrize("form", [_modern, _legacy])
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_llama3_settings(name, form):
    hd, theta, factor, low, high, orig = PUBLISHED[name]
    settings = form(hd, theta, factor=factor, low_freq_factor=low, high_freq_factor=high,
                    original_max_position_embeddings=orig)
    assert rope.llama3_rope_params(CheckpointConfig(settings)) is not None     # the native path
    _assert_same_bits(settings)


GRID = list(itertools.product(
    (64, 128, 96, 80),                  # head_dim
    (10000.0, 500000, 1.0e6),           # rope_theta (an int too)
    (8.0, 32, 1.5),                     # factor
    ((1.0, 4.0), (1, 2), (0.5, 8.0)),   # (low_freq_factor, high_freq_factor)
    (8192, 64, 2048.0),                 # original_max_position_embeddings
))


@pytest.mark.parametrize("hd,theta,factor,lowhigh,orig", GRID)
def test_llama3_grid_is_bit_identical(hd, theta, factor, lowhigh, orig):
    low, high = lowhigh
    settings = _modern(hd, theta, factor=factor, low_freq_factor=low, high_freq_factor=high,
                       original_max_position_embeddings=orig)
    assert rope.llama3_rope_params(CheckpointConfig(settings)) is not None
    _assert_same_bits(settings)


def test_the_smooth_band_is_exercised():
    """The 3.2-1B settings put some planes in each of the three bands, so all branches are compared."""
    hd, theta, factor, low, high, orig = PUBLISHED["3.2-1B"]
    default = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
    got = _ours(_modern(hd, theta, factor=factor, low_freq_factor=low, high_freq_factor=high,
                        original_max_position_embeddings=orig)).inv_freq
    kept, divided = got == default, torch.isclose(got, default / factor, rtol=1e-6, atol=0)
    assert kept.any() and divided.any() and (~kept & ~divided).any()


LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

LEFT_TO_TRANSFORMERS = {
    "no original_max (transformers falls back to max_position_embeddings)":
        {k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"},
    "an extra key": {**LLAMA3, "attention_factor": 1.0},
    "partial_rotary_factor in the dict": {**LLAMA3, "partial_rotary_factor": 0.5},
    "a factor that is not a number": {**LLAMA3, "factor": "8"},
    "a boolean": {**LLAMA3, "low_freq_factor": True},
    "high == low (division by zero)": {**LLAMA3, "high_freq_factor": 1.0},
}


@pytest.mark.parametrize("name", sorted(LEFT_TO_TRANSFORMERS))
def test_other_llama3_forms_are_left_to_transformers(name):
    params = LEFT_TO_TRANSFORMERS[name]
    cfg = CheckpointConfig(_modern(64, 500000.0, **params))
    assert rope.llama3_rope_params(cfg) is None


@pytest.mark.parametrize("top", [{"original_max_position_embeddings": 4096}, {"partial_rotary_factor": 0.5}])
def test_top_level_overrides_are_left_to_transformers(top):
    """transformers lets a top-level original_max_position_embeddings replace the dict's (Phi-3's
    convention), and a top-level partial_rotary_factor shorten the rotary part."""
    settings = {**_legacy(128, 500000.0, **LLAMA3), **top}
    assert rope.llama3_rope_params(CheckpointConfig(settings)) is None
    _assert_same_bits(settings)


def test_the_missing_original_max_fallback_still_agrees():
    settings = _legacy(128, 500000.0, **LEFT_TO_TRANSFORMERS[
        "no original_max (transformers falls back to max_position_embeddings)"])
    _assert_same_bits(settings)


def test_rope_scaling_wins_over_rope_parameters_as_in_transformers():
    settings = {**_modern(64, 10000.0, factor=2.0, low_freq_factor=1.0, high_freq_factor=2.0,
                          original_max_position_embeddings=64),
                "rope_scaling": {"rope_type": "llama3", "rope_theta": 500000.0, **LLAMA3}}
    assert rope.llama3_rope_params(CheckpointConfig(settings))["rope_theta"] == 500000.0
    _assert_same_bits(settings)


def test_inspecting_llama3_imports_no_transformers(tiny_dir):
    """The point of the native path: a llama3 checkpoint is inspected without importing transformers;
    a yarn one still imports transformers' RoPE utilities (the fallback path is live)."""
    probe = "import sys, idinspect; idinspect.inspect(sys.argv[1]); print('transformers' in sys.modules)"
    for variant, imported in (("llama3-rope", "False"), ("llama-yarn", "True")):
        out = subprocess.run([sys.executable, "-c", probe, str(tiny_dir(variant))], capture_output=True, text=True,
                             check=True).stdout
        assert out.strip() == imported, (variant, out)
