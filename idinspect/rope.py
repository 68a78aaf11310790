"""RoPE frequencies from transformers' own machinery, and the rotation they define.

Scaled RoPE (llama3, yarn, linear, dynamic, longrope, ...) comes from transformers'
``ROPE_INIT_FUNCTIONS`` for the config, exactly as the model's rotary-embedding module calls it.
The unscaled "default" type is the formula every rotate_half family shares
(``LlamaRotaryEmbedding.compute_default_rope_parameters``; Mistral's and Qwen2's are identical),
written here so that inspecting does not import the modeling code; a test pins both paths to the
models' own ``inv_freq`` buffers bit for bit.
"""

from __future__ import annotations

import torch

from .canonical import RotaryPairing, RotarySpec


def rotary_spec_from_config(config, pairing: RotaryPairing) -> RotarySpec:
    """RoPE of a Llama-style ``config``: inv_freq [rotary_dim/2] (float32) and attention factor."""
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        base = params["rope_theta"]
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        factor = 1.0
    else:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](config)
    return RotarySpec(pairing=pairing, rotary_dim=2 * inv_freq.numel(), inv_freq=inv_freq.to("cpu"),
                      attention_factor=float(factor), rope_type=rope_type)


def rotary_cos_sin(spec: RotarySpec, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [..., rotary_dim/2] per plane at integer ``positions`` [...].

    Angles are formed in float32 exactly as transformers does (``position.float() * inv_freq.float()``),
    then scaled by the attention factor and cast to ``dtype``: the reference then agrees with the
    Hugging Face modules to float64 rounding.
    """
    angles = positions[..., None].float() * spec.inv_freq.float()
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
