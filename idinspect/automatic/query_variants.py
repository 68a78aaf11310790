"""Layouts worth trying beyond :func:`.infer.candidates`' base ones, for attention that acts on the
queries and keys past their projections by position or layer (Llama 4's text model): chunked
attention, query temperature tuning, a weightless L2 q/k norm after RoPE, and RoPE whose cos and
sin come from ``torch.polar`` in float32. Each is a law of the config (a setting's name, the layers a
per-layer setting marks), tried after every base layout, never trusted: :func:`.infer.settle` keeps
the first layout whose canonical form reproduces every block of the twin to 1e-10.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from ..adapters.inferred import FoundLayout
from .trace import affine_kind

#: Settings that may hold (floor_scale, attn_scale) of query temperature tuning (tried, not trusted).
TEMPERATURE_KEYS = (("floor_scale", "attn_scale"),)


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def variant_settings(cfg, module: torch.nn.Module) -> list[dict]:
    """FoundLayout overrides worth trying on ``cfg`` whose attention module is ``module`` (none of them
    first): chunked attention from an integer setting naming a chunk, on every layer or on the layers
    ``layer_types`` marks chunked; query temperature from :data:`TEMPERATURE_KEYS`, on every layer or on
    those without RoPE; a weightless L2 norm after RoPE (where the module holds a norm without
    parameters), eps from a float setting naming an eps, on every layer or on the RoPE layers."""
    settings = cfg.to_dict()
    chunks = [{}] + [{"chunk_key": k, "chunk_layers": where} for k, v in settings.items()
                     if "chunk" in k and _numeric(v) and isinstance(v, int) and v > 0
                     for where in ("layer_types", "all")]
    temperatures = [{}] + [{"temperature_keys": keys, "temperature_layers": where} for keys in TEMPERATURE_KEYS
                           if all(_numeric(settings.get(k)) for k in keys) for where in ("norope", "all")]
    weightless = any("norm" in type(m).__name__.lower() and affine_kind(m) is None and not list(m.parameters())
                     for m in module.modules())
    norms = [{}] + ([{"l2_norm_eps_key": k, "l2_norm_layers": where} for k, v in settings.items()
                     if "eps" in k and isinstance(v, float) and v > 0 for where in ("rope", "all")] if weightless else [])
    return [{**a, **b, **c} for a, b, c in itertools.product(chunks, temperatures, norms)][1:]


def extended(layouts: list[FoundLayout], cfg, module: torch.nn.Module) -> list[FoundLayout]:
    """Every RoPE layout of ``layouts`` with each of :func:`variant_settings`' overrides, then each RoPE
    layout (and those) with cos and sin from ``torch.polar`` (Llama 4's complex RoPE)."""
    rope = [x for x in layouts if x.positional in ("half", "interleaved")]
    out = [dataclasses.replace(x, **kw) for kw in variant_settings(cfg, module) for x in rope]
    polar = [dataclasses.replace(x, rope_polar=True) for x in rope + out if x.rope == "config"]
    return out + polar


__all__ = ["TEMPERATURE_KEYS", "extended", "variant_settings"]
