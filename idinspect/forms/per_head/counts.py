"""Structural identification counts of one layer and of the whole model (docs/mathematics.md, "Counting").

Per layer, with P the attention parameters and U the unidentified ones:

    U = qk_gauge + vo_gauge + noop_bias + absorbable_bias + redundant_value_bias      ratio = U / P

(``redundant_value_bias`` = max(0, G d_v - d) for a value bias without an output bias; see
:func:`structure.redundant_value_bias_dims`.)

The closed form is the same ratio for the *bias-free* version of the layer, written the way the
paper writes it (G query/key groups, H heads, d width, d_k = d_v head width, rd rotary dims):

    1/(2H)                                 multi-head, no RoPE, d_k = d_v = d/H
    G/(H(H+G))                             grouped / multi-query, no RoPE, d_k = d_v = d/H
    G(d_k + d_v^2)/(2 d d_k (H+G))         full RoPE, d_k = d_v
    G(rd + (d_k-rd)^2 + d_v^2)/(d(H+G)(d_k+d_v))     anything else (the general bias-free form)

Each is evaluated from its own formula, not from :func:`structure.unidentified_dims`, so the two
are independent checks of each other. A layer with a q/k norm has its own bias-free form
(c gain classes, docs/mathematics.md "Normalised queries and keys"; P_0 counts the norm gains):

    (c (rd/2 + d_k - rd) + G d_v^2) / P_0          gains (Qwen3, OLMo2, Gemma 3)
    (G (rd/2 + (d_k-rd)(d_k-rd-1)/2) + G d_v^2) / P_0      no gains (L2)

plus, for LayerNorm, the centring shifts H d + G d. Its nearly-unidentified directions (the
normalised scales, :func:`structure.near_unidentified_dims`) are reported apart, never in U, with
the size of the term that breaks them: ``near_unidentified_break`` = max over normalised scales
of eps / E[mean square of the normalised vector] for unit Gaussian inputs (||W||_F^2 / width + ||b||^2 / width).
"""

from __future__ import annotations

from fractions import Fraction

import torch

from ...layer.attention_layer import BIAS_ROLES, AttentionLayer
from . import structure

FORM_MHA = "1/(2H)"
FORM_GQA = "G/(H(H+G))"
FORM_ROPE = "G(d_k + d_v^2)/(2 d d_k (H+G))"
FORM_GENERAL = "G(rd + (d_k-rd)^2 + d_v^2)/(d(H+G)(d_k+d_v))"
FORM_QK_NORM = "(c(rd/2 + d_k-rd) + G d_v^2)/P_0"
FORM_QK_L2 = "G(rd/2 + (d_k-rd)(d_k-rd-1)/2 + d_v^2)/P_0"
FORM_QK_LAYER = "(c(rd/2 + d_k-rd) + (H+G)d + G d_v^2)/P_0"


def bias_free_closed_form(layer: AttentionLayer) -> tuple[str, Fraction]:
    """(name, exact value) of the closed-form U/P of the layer's configuration without biases."""
    H, G, d, dk, dv = layer.n_heads, layer.n_kv_heads, layer.d_model, layer.d_k, layer.d_v
    rd = structure.rotary_dim(layer)
    norm = layer.qk_norm
    if norm is not None:
        P0, ku = bias_free_parameters(layer), dk - rd
        scales = structure.qk_norm_scales(layer) if norm.eps == 0 else 0
        if norm.q_gain is None:
            return FORM_QK_L2, Fraction(G * (rd // 2 + ku * (ku - 1) // 2 + dv ** 2) + scales, P0)
        core = structure.qk_norm_gain_classes(layer) * (rd // 2 + ku) + G * dv ** 2 + scales
        if norm.kind == "layer":
            return FORM_QK_LAYER, Fraction(core + (H + G) * d, P0)
        return FORM_QK_NORM, Fraction(core, P0)
    if rd == 0 and dk == dv and H * dk == d:
        if G == H:
            return FORM_MHA, Fraction(1, 2 * H)
        return FORM_GQA, Fraction(G, H * (H + G))
    if rd == dk and dk == dv:
        return FORM_ROPE, Fraction(G * (dk + dv ** 2), 2 * d * dk * (H + G))
    return FORM_GENERAL, Fraction(G * (rd + (dk - rd) ** 2 + dv ** 2), d * (H + G) * (dk + dv))


def bias_free_parameters(layer: AttentionLayer) -> int:
    """P without biases: H d d_k + G d d_k + G d d_v + H d_v d (+ the q/k norm gains)."""
    H, G, d, dk, dv = layer.n_heads, layer.n_kv_heads, layer.d_model, layer.d_k, layer.d_v
    gains = layer.qk_norm.parameter_count() if layer.qk_norm is not None else 0
    return d * (H * dk + G * dk + G * dv + H * dv) + gains


def qk_norm_description(layer: AttentionLayer) -> dict | None:
    """The ``qk_norm`` object of the JSON contract: kind, scope, eps, gains ("shared", "per_head",
    "none") and gain offset; None without a q/k norm."""
    norm = layer.qk_norm
    if norm is None:
        return None
    gains = "none" if norm.q_gain is None else ("shared" if norm.shared_gain else "per_head")
    return {"kind": norm.kind, "scope": norm.scope, "eps": norm.eps, "gains": gains, "gain_offset": norm.gain_offset,
            "after_rope": norm.after_rope}


def query_temperature_description(layer: AttentionLayer) -> dict | None:
    """The ``query_temperature`` object of the JSON contract (floor_scale, attn_scale), or None."""
    t = getattr(layer, "query_temperature", None)
    return None if t is None else {"floor_scale": t.floor_scale, "attn_scale": t.attn_scale}


def near_unidentified_break(layer: AttentionLayer) -> float | None:
    """eps / E[mean square] of the least-normalised vector (see the module docstring), or None."""
    norm = layer.qk_norm
    if norm is None or not structure.near_unidentified_dims(layer):
        return None
    worst = 0.0
    for W, b in ((layer.W_Q, layer.b_Q), (layer.W_K, layer.b_K)):
        W = W.to(torch.float64)
        if norm.scope == "projection":
            ms = W.pow(2).sum() / (W.shape[0] * W.shape[2])
            ms = ms + (b.to(torch.float64).pow(2).sum() / b.numel() if b is not None else 0.0)
            ms = ms.reshape(1)
        else:
            ms = W.pow(2).sum(dim=(1, 2)) / W.shape[2]
            if b is not None:
                ms = ms + b.to(torch.float64).pow(2).sum(dim=1) / W.shape[2]
        if norm.kind == "layer":     # the centred part: (1 - 1/width) of the mean square, for isotropic rows
            ms = ms * (1 - 1 / W.shape[2])
        ms = ms[torch.isfinite(ms)]
        if ms.numel():
            worst = max(worst, float(norm.eps / ms.min()) if float(ms.min()) > 0 else float("inf"))
    return worst


def layer_counts(layer: AttentionLayer) -> dict:
    """The per-layer counts object of the JSON contract (everything except ``spectra``).

    The layer must already have passed :func:`structure.require_modelled`.
    """
    P = layer.parameter_count()
    qk = structure.qk_gauge_dim(layer)
    vo = structure.vo_gauge_dim(layer)
    noop = structure.noop_key_bias_dims(layer)
    absorbable = structure.absorbable_value_bias_dims(layer)
    redundant = structure.redundant_value_bias_dims(layer)
    shift = structure.relative_bias_shift_dims(layer)
    U = qk + vo + noop + absorbable + redundant + shift
    near = structure.near_unidentified_dims(layer)
    form, value = bias_free_closed_form(layer)
    pos = layer.positional
    return {
        "index": layer.index,
        "kind": layer.kind,
        "stack": layer.stack,
        "layer": layer.layer,
        "attention_parameters": P,
        "unidentified_parameters": U,
        "qk_gauge": qk,
        "vo_gauge": vo,
        "noop_bias": noop,
        "absorbable_bias": absorbable,
        "identification_ratio": U / P,
        "closed_form_ratio": float(value),
        "closed_form": form,
        "heads": layer.n_heads,
        "kv_heads": layer.n_kv_heads,
        "d_k": layer.d_k,
        "d_v": layer.d_v,
        "positional": pos.kind,
        "rotary_dim": structure.rotary_dim(layer),
        "rope_type": pos.rotary.rope_type if pos.kind == "rope" else None,
        "causal": layer.causal,
        "biases": [role for role in BIAS_ROLES if getattr(layer, role) is not None],
        "bias_free_parameters": bias_free_parameters(layer),
        "bias_free_unidentified": qk - structure.qk_norm_bias_shifts(layer) + vo,
        "redundant_value_bias": redundant,
        "relative_bias_shift": shift,
        "logit_softcap": layer.logit_softcap,
        "sinks": 0 if layer.sinks is None else layer.sinks.numel(),
        "near_unidentified": near,
        "near_unidentified_break": near_unidentified_break(layer),
        "near_unidentified_scale": near_unidentified_break(layer),
        "qk_norm": qk_norm_description(layer),
        "attention_chunk": getattr(layer, "attention_chunk", None),
        "query_temperature": query_temperature_description(layer),
    }


_SUMMED = ("attention_parameters", "unidentified_parameters", "qk_gauge", "vo_gauge", "noop_bias",
           "absorbable_bias", "redundant_value_bias", "relative_bias_shift", "bias_free_parameters",
           "bias_free_unidentified", "near_unidentified")


def model_totals(layers: list[dict], model_parameters: int) -> dict:
    """The ``totals`` object: sums over layers, U/P, the share of all model parameters.

    ``closed_form_ratio`` is the bias-free U/P summed over layers (sum U_0 / sum P_0), which equals
    every layer's closed form when the layers share one; ``closed_form`` names it, or is
    ``"mixed"`` when layers differ.
    """
    sums = {key: sum(layer.get(key, 0) for layer in layers) for key in _SUMMED}
    P, U = sums["attention_parameters"], sums["unidentified_parameters"]
    forms = sorted({layer["closed_form"] for layer in layers})
    return {
        "attention_parameters": P,
        "unidentified_parameters": U,
        "identification_ratio": U / P if P else 0.0,
        "model_parameters": model_parameters,
        "unidentified_share_of_model": U / model_parameters if model_parameters else 0.0,
        "closed_form_ratio": (sums["bias_free_unidentified"] / sums["bias_free_parameters"]
                              if sums["bias_free_parameters"] else 0.0),
        "closed_form": forms[0] if len(forms) == 1 else ("mixed" if forms else None),
        "qk_gauge": sums["qk_gauge"],
        "vo_gauge": sums["vo_gauge"],
        "noop_bias": sums["noop_bias"],
        "absorbable_bias": sums["absorbable_bias"],
        "redundant_value_bias": sums["redundant_value_bias"],
        "near_unidentified_break": max((layer["near_unidentified_break"] for layer in layers
                                        if layer.get("near_unidentified_break") is not None), default=None),
        "attention_share_of_model": P / model_parameters if model_parameters else 0.0,
        "layers": len(layers),
        "near_unidentified": sum(layer.get("near_unidentified", 0) for layer in layers),
    }
