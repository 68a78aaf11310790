"""RoPE frequencies from config.json, through transformers' own machinery where needed.

Scaled RoPE (llama3, yarn, linear, dynamic, longrope, ...) comes from transformers'
``ROPE_INIT_FUNCTIONS`` for the config, exactly as the model's rotary-embedding module calls it.
The unscaled "default" type is the formula every rotate_half family shares
(``LlamaRotaryEmbedding.compute_default_rope_parameters``; Mistral's and Qwen2's are identical),
written here so that inspecting does not import the modeling code; a test pins both paths to the
models' own ``inv_freq`` buffers bit for bit.

The llama3 type (every Llama 3.x checkpoint) is also computed here when config.json states it
completely in its one common form (:func:`llama3_rope_params`), with the same float32 tensor
operations in the same order as ``ROPE_INIT_FUNCTIONS["llama3"]``, so the frequencies are the same
bits (pinned by tests/forms/test_rope_llama3.py over a grid of settings and by the AutoConfig comparisons
of tests/contract/test_config.py). Importing transformers costs ~0.3-0.65 s, a fifth of a Llama-3.2-1B
inspection (issue 7); any other llama3 form, and every other scaled type, still goes to transformers.

A :class:`~idinspect.sources.config.CheckpointConfig` (config.json as stored, possibly in the legacy
``rope_scaling`` / top-level ``rope_theta`` form) is standardised by transformers'
``RotaryEmbeddingConfigMixin.convert_rope_params_to_dict``, the step the config class runs in
``__post_init__``; only plain unscaled RoPE (a theta and nothing else) is resolved here without
importing transformers.
"""

from __future__ import annotations

import copy
import math

import torch

from ..layer.attention_layer import RotaryPairing, RotarySpec
from .config import CheckpointConfig, setting_optional

#: ``RotaryEmbeddingConfigMixin.default_theta``, the rope_theta of a config that names none.
DEFAULT_THETA = 10_000.0
#: Settings transformers' RoPE code reads from a config besides the RoPE dicts themselves.
_ROPE_CONTEXT = ("hidden_size", "num_attention_heads", "head_dim", "max_position_embeddings",
                 "original_max_position_embeddings", "layer_types")
#: config.json keys that the config class pops and folds into ``rope_parameters``.
_ROPE_LEGACY = ("rope_scaling", "rope_theta", "partial_rotary_factor")


def rotary_spec_from_config(config, pairing: RotaryPairing, partial: bool = False) -> RotarySpec:
    """RoPE of a Llama-style ``config``: inv_freq [rotary_dim/2] (float32) and attention factor.

    ``config`` is a transformers config (standardised on construction) or a :class:`CheckpointConfig`.
    ``partial``: the family's rotary module honours ``rope_parameters["partial_rotary_factor"]``
    (Phi, Phi-3, GPT-NeoX, StableLM): its default frequencies span rotary_dim =
    int(head_dim * factor) dims, the first rotary_dim of each head (Llama's ignore the factor).
    Those families standardise legacy config.json keys in their own ways (Phi's default factor 0.5,
    StableLM's 0.25, GPT-NeoX's ``rotary_pct`` / ``rotary_emb_base``, Phi-3's "su" -> "longrope"), so
    a config.json not already in transformers 5's standard form (:func:`standard_partial_rope`) is
    read through the family's own config class.
    """
    if isinstance(config, CheckpointConfig):
        if partial:
            params = standard_partial_rope(config)
            if params is not None:
                return _default_spec(params["rope_theta"], _partial_dim(config, params), pairing)
            config = config.full_config()
        else:
            theta = plain_rope_theta(config)
            if theta is not None:
                return _default_spec(theta, _head_dim(config), pairing)
            llama3 = llama3_rope_params(config)
            if llama3 is not None:
                return _llama3_spec(llama3, _head_dim(config), pairing)
            config = rope_settings(config)
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        dim = _partial_dim(config, params) if partial else _head_dim(config)
        return _default_spec(params["rope_theta"], dim, pairing)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](config)
    return RotarySpec(pairing=pairing, rotary_dim=2 * inv_freq.numel(), inv_freq=inv_freq.to("cpu"),
                      attention_factor=float(factor), rope_type=rope_type)


def _head_dim(config) -> int:
    return setting_optional(config, "head_dim") or config.hidden_size // config.num_attention_heads


def _partial_dim(config, params: dict) -> int:
    """int(head_dim * partial_rotary_factor), as the partial-rotary families' rotary modules compute it;
    ValueError where that is not a positive even number (the modeling code cannot rotate it)."""
    factor = params.get("partial_rotary_factor", 1.0)
    dim = int(_head_dim(config) * factor)
    if dim < 2 or dim % 2:
        raise ValueError(f"partial_rotary_factor {factor} of head_dim {_head_dim(config)} gives {dim} rotary dims, "
                         "not a positive even number")
    return dim


def default_rotary_spec(base: float, rotary_dim: int, pairing: RotaryPairing) -> RotarySpec:
    """Unscaled RoPE over ``rotary_dim`` dims (GPT-J's sinusoid table: base 10000, ``rotary_dim``)."""
    return _default_spec(base, rotary_dim, pairing)


def standard_partial_rope(config: CheckpointConfig) -> dict | None:
    """{rope_theta, partial_rotary_factor} when config.json states unscaled partial RoPE in
    transformers 5's standard form (``rope_parameters`` of type "default" carrying both numbers, no
    ``rope_scaling``), which every partial-rotary family's config class keeps as it is; else None."""
    params = config.stored("rope_parameters")
    if config.stored("rope_scaling") or not isinstance(params, dict):
        return None
    if set(params) - {"rope_type", "rope_theta", "partial_rotary_factor"} or params.get("rope_type") != "default":
        return None
    if not (_is_number(params.get("rope_theta")) and _is_number(params.get("partial_rotary_factor"))):
        return None
    return params


def _default_inv_freq(base: float, dim: int) -> torch.Tensor:
    """inv_freq_i = 1 / base^(2i / dim), i < dim / 2, in float32 (the expression transformers uses)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def _default_spec(base: float, dim: int, pairing: RotaryPairing) -> RotarySpec:
    """The default inv_freq over the whole head; attention factor 1."""
    inv_freq = _default_inv_freq(base, dim)
    return RotarySpec(pairing=pairing, rotary_dim=2 * inv_freq.numel(), inv_freq=inv_freq,
                      attention_factor=1.0, rope_type="default")


def _llama3_spec(params: dict, dim: int, pairing: RotaryPairing) -> RotarySpec:
    """Llama 3.1 frequency scaling of the default inv_freq (``_compute_llama3_parameters``, op for op).

    With wavelength w_i = 2 pi / f_i, L = original_max_position_embeddings:
    w_i < L / high_freq_factor keeps f_i; w_i > L / low_freq_factor gives f_i / factor; in between
    f_i ((1 - s_i) / factor + s_i) with s_i = (L / w_i - low) / (high - low). Attention factor 1.
    """
    base, factor = params["rope_theta"], params["factor"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    old_context_len = params["original_max_position_embeddings"]
    inv_freq = _default_inv_freq(base, dim)
    low_freq_wavelen = old_context_len / low
    high_freq_wavelen = old_context_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq = torch.where(is_medium, smoothed, scaled)
    return RotarySpec(pairing=pairing, rotary_dim=2 * inv_freq.numel(), inv_freq=inv_freq,
                      attention_factor=1.0, rope_type="llama3")


#: The settings ``_compute_llama3_parameters`` reads besides rope_theta.
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def llama3_rope_params(config: CheckpointConfig) -> dict | None:
    """{rope_theta, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings} when
    config.json asks for llama3 RoPE in its common complete form, else None (transformers decides).

    Complete: the RoPE dict (``rope_scaling`` wins over ``rope_parameters``) has type "llama3", each
    of :data:`LLAMA3_KEYS` as a number, nothing else but a theta, and high != low; config.json has no
    top-level ``original_max_position_embeddings`` or ``partial_rotary_factor`` (transformers lets
    those override the dict). The theta is the dict's, else the top-level ``rope_theta``, else
    :data:`DEFAULT_THETA`, as :func:`plain_rope_theta` resolves it.
    """
    params = _stored_rope_dict(config)
    if not isinstance(params, dict) or set(params) - {"rope_type", "type", "rope_theta", *LLAMA3_KEYS}:
        return None
    if params.get("rope_type", params.get("type")) != "llama3":
        return None
    if config.optional("original_max_position_embeddings") is not None or "partial_rotary_factor" in config:
        return None
    out = {"rope_theta": params.get("rope_theta", config.stored("rope_theta", DEFAULT_THETA)),
           **{k: params.get(k) for k in LLAMA3_KEYS}}
    if not all(_is_number(v) for v in out.values()) or out["high_freq_factor"] == out["low_freq_factor"]:
        return None
    return out


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _stored_rope_dict(config: CheckpointConfig):
    """config.json's RoPE dict: ``rope_scaling`` wins over ``rope_parameters``, as the config class decides."""
    return config.stored("rope_scaling") or config.stored("rope_parameters") or {}


def plain_rope_theta(config: CheckpointConfig) -> float | None:
    """rope_theta when config.json asks for plain unscaled RoPE over the whole head, else None.

    Plain: the RoPE dict (``rope_scaling`` wins over ``rope_parameters``, as the config class
    decides) holds at most a type of "default" and a theta, and no partial_rotary_factor is set.
    The theta is the dict's, else the top-level ``rope_theta``, else :data:`DEFAULT_THETA`.
    """
    params = _stored_rope_dict(config)
    if not isinstance(params, dict) or set(params) - {"rope_type", "type", "rope_theta"}:
        return None
    if params.get("rope_type", params.get("type", "default")) != "default" or "partial_rotary_factor" in config:
        return None
    theta = params.get("rope_theta", config.stored("rope_theta", DEFAULT_THETA))
    return float(theta) if _is_number(theta) else None


def rope_settings(config: CheckpointConfig):
    """An object transformers' RoPE functions accept, standardised as the config class does it.

    The class's ``__post_init__`` calls ``convert_rope_params_to_dict(**kwargs)`` with the
    config.json keys that are not its fields (``rope_scaling``, ``rope_theta``,
    ``partial_rotary_factor``) while ``rope_parameters`` holds the stored dict; this replays that
    call on a bare ``RotaryEmbeddingConfigMixin`` carrying the settings the RoPE code reads.
    """
    from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin

    class RopeSettings(RotaryEmbeddingConfigMixin):
        pass

    settings = RopeSettings()
    for name in _ROPE_CONTEXT:
        value = getattr(config, name, None)
        if value is not None or name in config:
            setattr(settings, name, copy.deepcopy(value))
    settings.rope_parameters = config.stored("rope_parameters")
    settings.convert_rope_params_to_dict(**{k: config.stored(k) for k in _ROPE_LEGACY if k in config})
    return settings


def rotary_spec_for_layer_type(config, layer_type: str, pairing: RotaryPairing) -> RotarySpec:
    """RoPE of the layers of ``layer_type`` in a config whose ``rope_parameters`` are keyed by layer
    type (Gemma 3: "sliding_attention" and "full_attention"), as the family's rotary module computes
    it: the default type from that type's ``rope_theta`` over head_dim, any other type by transformers'
    own init function with ``layer_type``. ``config``: transformers' config class (already standardised)."""
    params = config.rope_parameters[layer_type]
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        return _default_spec(params["rope_theta"], _head_dim(config), pairing)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](config, layer_type=layer_type)
    return RotarySpec(pairing=pairing, rotary_dim=2 * inv_freq.numel(), inv_freq=inv_freq.to("cpu"),
                      attention_factor=float(factor), rope_type=rope_type)
