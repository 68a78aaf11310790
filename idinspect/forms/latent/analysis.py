"""Analysis of one multi-head latent attention block (:class:`LatentAttentionLayer`): counts and findings.

The per-head pipeline (spectra, rank findings, bias findings) does not apply to MLA: its keys and
values are not linear in the hidden states. What is reported is structural
(:mod:`idinspect.forms.latent.structure`) plus the ``non-finite`` finding; weight-level extras
(``extra_unidentified``) are not computed (None).

``near_unidentified`` counts the latent scales the norms remove only up to eps;
``near_unidentified_scale`` is the size of the term that breaks them: for each latent z = x W_A + b_A
with unit-variance inputs, eps / (mean(z^2) + eps), mean(z^2) = (||W_A||_F^2 + ||b_A||^2) / r (the
relative change of N(s z) per unit log s), the largest over the block's latents.
"""

from __future__ import annotations

import torch

from ...layer.latent_layer import LatentAttentionLayer
from ..per_head.findings import _finding
from . import structure as ls

FORM_LATENT = "(H n^2 + e + H v^2 + sum_latents r(r+1)/2) / P"


def near_unidentified_scale(layer: LatentAttentionLayer) -> float | None:
    """eps / (mean(z^2) + eps) of the most weakly broken latent scale, for unit-variance inputs; None without any."""
    sizes = []
    for name, rank, eps in ls.latent_ranks(layer):
        if eps <= 0:
            continue
        W, b = (layer.W_QA, layer.b_QA) if name == "q" else (layer.W_KVA, layer.b_KVA)
        power = W.to(torch.float64).pow(2).sum() + (b.to(torch.float64).pow(2).sum() if b is not None else 0.0)
        mean_square = float(power) / rank
        sizes.append(eps / (mean_square + eps))
    return max(sizes) if sizes else None


def latent_counts(layer: LatentAttentionLayer) -> dict:
    """The per-layer counts object of the JSON contract for an MLA block."""
    P = layer.parameter_count()
    qk, vo, latent = ls.qk_gauge_dim(layer), ls.vo_gauge_dim(layer), ls.latent_gauge_dim(layer)
    U = qk + vo + latent
    P0 = ls.bias_free_parameters(layer)
    pos = layer.positional
    near = ls.near_unidentified_dims(layer)
    return {
        "index": layer.index, "kind": layer.kind, "stack": layer.stack, "layer": layer.layer,
        "attention": "latent",
        "attention_parameters": P,
        "unidentified_parameters": U,
        "qk_gauge": qk,
        "vo_gauge": vo,
        "latent_gauge": latent,
        "noop_bias": 0,
        "absorbable_bias": 0,
        "identification_ratio": U / P,
        "closed_form_ratio": U / P0,
        "closed_form": FORM_LATENT,
        "heads": layer.n_heads,
        "kv_heads": layer.n_kv_heads,
        "d_k": layer.d_k,
        "d_v": layer.d_v,
        "latent": {"q_rank": layer.q_rank, "kv_rank": layer.kv_rank, "nope_dim": layer.d_nope,
                   "rope_dim": layer.d_rope, "eps_q": layer.eps_Q if layer.q_rank else None, "eps_kv": layer.eps_KV},
        "positional": pos.kind,
        "rotary_dim": layer.d_rope,
        "rope_type": pos.rotary.rope_type if pos.rotary is not None else None,
        "causal": layer.causal,
        "biases": [role for role in ("b_QA", "b_KVA", "b_KR", "b_O") if getattr(layer, role) is not None],
        "bias_free_parameters": P0,
        "bias_free_unidentified": U,
        "redundant_value_bias": 0,
        "relative_bias_shift": 0,
        "near_unidentified": near,
        "near_unidentified_scale": near_unidentified_scale(layer) if near else None,
    }


def latent_findings(layer: LatentAttentionLayer) -> list[dict]:
    """``non-finite`` findings: one per tensor holding NaN or Inf."""
    out = []
    for role, t in layer.tensors().items():
        bad = ~torch.isfinite(t)
        n_bad = int(bad.sum())
        if n_bad:
            n_nan = int(torch.isnan(t).sum())
            out.append(_finding("non-finite", layer, (role,), n_bad,
                                f"{layer.tensor_names.get(role, role)} holds {n_nan} NaN and {n_bad - n_nan} Inf "
                                "values; the attention output is not defined there",
                                role=role, nan=n_nan, inf=n_bad - n_nan))
    return out


def analyze_latent_layer(layer: LatentAttentionLayer) -> tuple[dict, list[dict]]:
    """(layer object of the JSON contract, findings) of one MLA block; refuses what the counts do not model."""
    ls.require_modelled_latent(layer)
    counts = latent_counts(layer)
    counts.update(extra_unidentified=None, unidentified_with_weights=None, dead_heads=None)
    return counts, latent_findings(layer)
