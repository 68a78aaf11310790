"""``--prove``: the structural count checked numerically on a shrunken twin of the model's attention.

The twin is a one-layer model of the same ``model_type`` built by transformers itself, with the
same bias pattern, positional scheme (RoPE type and parameters), causality and sliding window,
but small: G' = min(G, 2) groups (H' = min(H, 4) for multi-head), H' = min(r, 4) G' with r = H/G,
head width 4 with RoPE (2 planes) or 2 without, and a width d' near d / (H d_k) that every family's
config validation accepts (:func:`twin_width`).

Its attention module's output y (float64, sdpa, Gaussian hidden states of B sequences x T tokens,
the real module's own masks and rotary embeddings) is differentiated with respect to that module's
parameters theta. The nullity of the Jacobian dy/dtheta [B T d', P'], with singular values cut at
``RTOL`` * s_max, is the number of parameter directions that change no output: it must equal the
twin's structural unidentified count (:func:`structure.unidentified_dims`).

Every attention block of the one-layer twin is proven on its own: a decoder with cross-attention
has a self and a cross block, an encoder-decoder an encoder self block and decoder self and cross
blocks, so each block kind and stack is checked. A family whose layers come in kinds with different
attention (Llama 4: RoPE layers with a q/k norm and chunks, NoPE layers with temperature-tuned
queries) gets one twin layer of each kind (``twin.layers``). A cross block's encoder states are drawn from
N(0, 1) as well. The top-level numbers sum over the blocks (their Jacobians side by side, block
diagonal: the nullity of the whole is the sum); ``blocks`` lists each one.
"""

from __future__ import annotations

import math

from ...errors import IdinspectError
from ...numerics.twin import (
    NEAR_EXACT_RTOL,
    NEAR_RTOL,
    RTOL,
    attention_jacobian,
    bands,
    build_twin,
    nullity,
)
from . import structure


def prove(model, seed: int = 0) -> dict:
    """The ``proof`` object of a per-head model: the twin, its Jacobian nullity and its structural count."""
    import idinspect

    hf, shape = build_twin(model, seed)
    twin = idinspect.load(hf)
    blocks = [_prove_block(hf, twin, n, seed) for n in range(twin.num_layers)]
    layer = twin.layer(0)
    pos = layer.positional
    dropped = [b["largest_dropped_singular_value"] for b in blocks if b["largest_dropped_singular_value"] is not None]
    near = {}
    if any("jacobian_near_nullity" in b for b in blocks):
        near = {"jacobian_near_nullity": sum(b.get("jacobian_near_nullity", 0) for b in blocks),
                "structural_near_unidentified": sum(b.get("structural_near_unidentified", 0) for b in blocks),
                "near_rtol": NEAR_RTOL}
    return {
        **near,
        "twin": {
            "model_type": hf.config.model_type, "family": model.adapter.family,
            "layers": 1 + max(s.layer for s in twin.adapter.sites), **shape,
            "biases": [r for r in ("b_Q", "b_K", "b_V", "b_O") if getattr(layer, r) is not None],
            "positional": pos.kind, "rotary_dim": structure.rotary_dim(layer),
            "rope_type": pos.rotary.rope_type if pos.kind == "rope" else None,
            "causal": layer.causal, "sliding_window": layer.sliding_window, "seed": seed,
            "logit_softcap": layer.logit_softcap, "sinks": layer.sinks is not None,
        },
        "attention_parameters": sum(b["attention_parameters"] for b in blocks),
        "jacobian_shape": [sum(b["jacobian_shape"][0] for b in blocks), sum(b["jacobian_shape"][1] for b in blocks)],
        "batches": max(b["batches"] for b in blocks),
        "tokens": model.adapter.twin_tokens,
        "rtol": NEAR_EXACT_RTOL if near else RTOL,
        "smallest_kept_singular_value": min(b["smallest_kept_singular_value"] for b in blocks),
        "largest_dropped_singular_value": max(dropped) if dropped else None,
        "jacobian_nullity": sum(b["jacobian_nullity"] for b in blocks),
        "structural_unidentified": sum(b["structural_unidentified"] for b in blocks),
        "agree": all(b["agree"] for b in blocks),
        "blocks": blocks,
    }


def _prove_block(hf, twin, n: int, seed: int) -> dict:
    """Block ``n`` of the twin: its Jacobian nullity against its structural count."""
    layer = twin.layer(n)
    structure.require_modelled(layer)
    P = layer.parameter_count()
    batch = max(2, math.ceil(2 * P / (twin.adapter.twin_tokens * layer.d_model)))
    J = attention_jacobian(hf, twin.adapter, batch, seed, block=n)
    if J.shape[1] != P:
        raise IdinspectError(f"--prove: the twin's attention module of block {n} ({layer.kind}) has {J.shape[1]} "
                             f"parameters, idinspect reads {P}; the adapter misses a tensor")
    structural = structure.unidentified_dims(layer)
    near_structural = structure.near_unidentified_dims(layer)
    out = {"index": n, "kind": layer.kind, "stack": layer.stack, "layer": layer.layer, "attention_parameters": P,
           "jacobian_shape": list(J.shape), "batches": batch}
    if not near_structural:
        null, kept, dropped = nullity(J)
        return {**out, "smallest_kept_singular_value": kept, "largest_dropped_singular_value": dropped,
                "jacobian_nullity": null, "structural_unidentified": structural, "agree": null == structural}
    null, near, kept, dropped, near_lo, near_hi = bands(J)
    return {**out, "smallest_kept_singular_value": kept, "largest_dropped_singular_value": dropped,
            "jacobian_nullity": null, "structural_unidentified": structural,
            "jacobian_near_nullity": near, "structural_near_unidentified": near_structural,
            "near_singular_values": [near_lo, near_hi], "rtol": NEAR_EXACT_RTOL, "near_rtol": NEAR_RTOL,
            "agree": null == structural and near == near_structural}
