"""``--prove`` for multi-head latent attention: the counts checked on a one-layer MLA twin.

The twin is built by transformers itself (same ``model_type``, bias pattern, query latent or not,
RoPE type and parameters, pairing), small: d = 16, H = 2, latent ranks 8, n = e = v = 4, dense MLP.
Its attention module's Jacobian (float64, the family's float32 casts patched out, Gaussian hidden
states) has three bands of singular values s / s_max: exact null directions below ``EXACT_RTOL``,
nearly-null ones (the latent scales the norms remove only up to eps) below ``NEAR_RTOL``, the rest
above. Both counts must equal the structural ones (:mod:`idinspect.forms.latent.structure`); one
relative cut would not do, since the nearly-null values sit near 1e-9 (docs/mathematics.md).
"""

from __future__ import annotations

import math

import torch

from ...errors import IdinspectError
from ...numerics.parallel import single_threaded_kernels
from . import structure as ls

EXACT_RTOL = 1e-13
NEAR_RTOL = 1e-7


def latent_twin_shape(model) -> dict:
    """Widths of the MLA twin of ``model`` (a query latent only where the model has one)."""
    return {"heads": 2, "kv_heads": 2, "head_dim": 8, "hidden_size": 16, "q_lora_rank": 8 if model.adapter.q_rank else None,
            "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4}


def prove_latent(model, seed: int = 0) -> dict:
    """The ``proof`` object for an MLA model (same keys as :func:`prove.prove`, plus the nearly-null band)."""
    import idinspect

    from ...numerics.twin import TOKENS, attention_jacobian, build_twin

    hf, shape = build_twin(model, seed, shape=latent_twin_shape(model))
    twin = idinspect.load(hf)
    layer = twin.layer(0)
    ls.require_modelled_latent(layer)
    P = layer.parameter_count()
    batch = max(2, math.ceil(2 * P / (TOKENS * layer.d_model)))
    J = attention_jacobian(hf, twin.adapter, batch, seed, block=0)
    if J.shape[1] != P:
        raise IdinspectError(f"--prove: the twin's attention module has {J.shape[1]} parameters, idinspect reads {P}; "
                             "the adapter misses a tensor")
    with single_threaded_kernels():
        s = torch.linalg.svdvals(J)
    r = s / s[0]
    exact, near = int((r < EXACT_RTOL).sum()), int(((r >= EXACT_RTOL) & (r < NEAR_RTOL)).sum())
    kept = float(r[r >= NEAR_RTOL].min())
    dropped = float(r[r < EXACT_RTOL].max()) if exact else None
    near_values = [float(v) for v in r[(r >= EXACT_RTOL) & (r < NEAR_RTOL)]]
    structural, structural_near = ls.unidentified_dims(layer), ls.near_unidentified_dims(layer)
    pos = layer.positional
    block = {"index": 0, "kind": layer.kind, "stack": layer.stack, "layer": layer.layer, "attention_parameters": P,
             "jacobian_shape": list(J.shape), "batches": batch, "smallest_kept_singular_value": kept,
             "largest_dropped_singular_value": dropped, "jacobian_nullity": exact, "jacobian_near_null": near,
             "near_null_singular_values": near_values, "structural_unidentified": structural,
             "structural_near_unidentified": structural_near,
             "agree": exact == structural and near == structural_near}
    return {
        "twin": {"model_type": hf.config.model_type, "family": model.adapter.family, "layers": 1, **shape,
                 "biases": [role for role in ("b_QA", "b_KVA", "b_KR", "b_O") if getattr(layer, role) is not None],
                 "positional": pos.kind, "rotary_dim": layer.d_rope, "rope_type": pos.rotary.rope_type,
                 "causal": layer.causal, "sliding_window": None, "seed": seed, "attention": "latent"},
        "attention_parameters": P, "jacobian_shape": list(J.shape), "batches": batch, "tokens": TOKENS,
        "rtol": EXACT_RTOL, "near_rtol": NEAR_RTOL,
        "smallest_kept_singular_value": kept, "largest_dropped_singular_value": dropped,
        "jacobian_nullity": exact, "jacobian_near_null": near, "structural_unidentified": structural,
        "structural_near_unidentified": structural_near, "agree": block["agree"], "blocks": [block],
    }
