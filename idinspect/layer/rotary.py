"""RoPE arithmetic: the rotation a :class:`RotarySpec` defines, applied as Hugging Face applies it.

Reading the frequencies from config.json is :mod:`idinspect.sources.rope_config`; this module
only rotates.
"""

from __future__ import annotations

import torch

from .attention_layer import RotarySpec


def rotary_cos_sin(spec: RotarySpec, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [..., rotary_dim/2] per plane at integer ``positions`` [...].

    Angles are formed in float32 exactly as transformers does (``position.float() * inv_freq.float()``),
    turned into cos and sin by ``torch.cos`` / ``torch.sin`` (or ``torch.polar`` where ``spec.polar``),
    then scaled by the attention factor and cast to ``dtype``: the reference then agrees with the
    Hugging Face modules to float64 rounding.
    """
    angles = positions[..., None].float() * spec.inv_freq.float()
    if spec.polar:                      # Llama 4: torch.polar(1, angle) * attention_factor, complex64
        turn = torch.polar(torch.ones_like(angles), angles) * spec.attention_factor
        return turn.real.to(dtype), turn.imag.to(dtype)
    cos = angles.cos() * spec.attention_factor
    sin = angles.sin() * spec.attention_factor
    return cos.to(dtype), sin.to(dtype)


def apply_rotary(x: torch.Tensor, spec: RotarySpec, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the planes of ``x`` [..., T, d_k]; cos/sin are [T, rotary_dim/2].

    For plane p with columns (a, b): x_a' = x_a cos - x_b sin, x_b' = x_b cos + x_a sin.
    Dims past ``rotary_dim`` pass through unchanged.
    """
    cols = spec.plane_columns()
    a = torch.tensor([c[0] for c in cols])
    b = torch.tensor([c[1] for c in cols])
    xa, xb = x[..., a], x[..., b]
    out = x.clone()
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xb * cos + xa * sin
    return out
