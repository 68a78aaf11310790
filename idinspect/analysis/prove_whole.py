"""``--prove --whole-model``: the whole-model count checked numerically on a small twin of the model.

The twin is a two-layer model of the same ``model_type`` and head class (``architectures[0]``),
built by transformers, with the model's tying, biases, activation, norm epsilon and kv-group
pattern but small sizes (RMSNorm form: d = 8, f = 6, H = 4, d_h = 2, V = 12; LayerNorm form:
d = 8, H = 2, P = 8, f = 16, V = 12). Every parameter is random (matrices N(0, 0.5^2), gains
uniform in [0.5, 1.5], biases N(0, 0.5^2)). The Jacobian of its logits at every position of
random sequences (about 2.5 P rows; 6 P for ReLU MLPs, which are piecewise linear) with respect to
every parameter (a tied embedding is one) is taken in float64, RMSNorm computed in float64 and a
softmax asked for float32 kept in float64; its nullity, cut at ``RTOL`` s_max, must equal the
twin's whole-model count (:func:`idinspect.analysis.whole_model_read.whole_model`), for logits
and for log-probabilities (J_lp = J - 1 (p^T J) per position).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch

from ..numerics.parallel import single_threaded_kernels
from ..numerics.twin import exact_softmax
from .whole_model_read import FORM_BY_TYPE, PRE_LN, whole_model

#: Relative singular-value cut (null directions measured <= 5e-16, kept >= 7e-11 on the twins).
RTOL = 1e-13
#: Settings copied from the model's config where it has them.
COPIED = ("tie_word_embeddings", "attention_bias", "mlp_bias", "rms_norm_eps", "layer_norm_epsilon", "hidden_act",
          "activation_function", "multi_query", "sliding_window", "use_sliding_window", "rope_parameters",
          "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "embedding_multiplier", "residual_multiplier",
          "logits_scaling", "attention_multiplier", "num_experts_per_tok")


def twin_settings(model) -> dict:
    """The twin's config keywords (see the module docstring)."""
    cfg = model.hf_config
    kw = {k: getattr(cfg, k) for k in COPIED if getattr(cfg, k, None) is not None}
    kw.update(bos_token_id=None, eos_token_id=None, pad_token_id=None, vocab_size=12)
    if FORM_BY_TYPE[cfg.model_type] == PRE_LN:
        return {**kw, "n_embd": 8, "n_head": 2, "n_layer": 2, "n_positions": 8, "n_inner": 16}
    a = model.adapter
    G = 4 if a.n_kv_heads == a.n_heads else (1 if a.n_kv_heads == 1 else 2)
    kw.update(hidden_size=8, intermediate_size=6, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=G,
              head_dim=2, max_position_embeddings=64, layer_types=None, max_window_layers=0)
    if getattr(cfg, "num_local_experts", None):       # Mixtral: as many experts as tokens choose, plus one
        kw["num_local_experts"] = int(cfg.num_experts_per_tok) + 1
    return kw


def build_whole_twin(model, seed: int = 0):
    """The twin (float64, eval, eager attention), randomised as the module docstring says."""
    import transformers

    cfg = model.hf_config
    settings = {k: v for k, v in twin_settings(model).items() if hasattr(cfg, k) or k in ("vocab_size",)}
    config = type(cfg)(**settings)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    cls = getattr(transformers, cfg.architectures[0])
    hf = cls(config).to(torch.float64).eval()
    for m in hf.modules():      # a padding row's autograd gradient is zero though it changes outputs: a fake null
        if isinstance(m, torch.nn.Embedding):
            m.padding_idx = None
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.dim() == 1 and not name.endswith("bias"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g, dtype=torch.float64))
            else:
                p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return hf


def _rms_float64(hf):
    from ..adapters.float64 import exact_norms, weighted_rms

    return exact_norms({type(m): weighted_rms for m in hf.modules() if type(m).__name__.endswith("RMSNorm")})


def logit_jacobian(hf, tokens: int, rows_per_parameter: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(J [positions, V, P] of the logits w.r.t. every parameter, softmax probabilities [positions, V])."""
    from torch.func import functional_call, jacrev

    names, values = zip(*[(k, v.detach()) for k, v in hf.named_parameters()])
    sizes = [v.numel() for v in values]
    V = hf.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (math.ceil(rows_per_parameter * sum(sizes) / (tokens * V)), tokens), generator=g)

    def logits(theta: torch.Tensor, ids: torch.Tensor = ids) -> torch.Tensor:
        params = {n: t.view_as(v) for n, t, v in zip(names, theta.split(sizes), values)}
        return functional_call(hf, params, (ids,), {"use_cache": False}).logits.reshape(-1, V)

    theta = torch.cat([v.reshape(-1) for v in values])
    from ..adapters.float64 import exact_routers
    from ..numerics.twin import SEQUENCES_PER_CALL

    with single_threaded_kernels(), _rms_float64(hf), exact_softmax(), exact_routers(hf):
        # a few sequences per call: the same rows, and each row's backward pass runs over its call's
        # sequences only (GPT-2 ReLU's twin, 86 sequences: 23 s in one call, under 2 s two at a time)
        J = torch.cat([jacrev(lambda t, part=part: logits(t, part), chunk_size=512)(theta)
                       for part in ids.split(SEQUENCES_PER_CALL)])
        p = torch.softmax(logits(theta), -1)
    return J, p


def _nullity(J: torch.Tensor) -> tuple[int, float, float | None]:
    with single_threaded_kernels():
        s = torch.linalg.svdvals(J)
    rel = torch.cat([s / s[0], s.new_zeros(max(0, J.shape[1] - s.numel()))])
    null = rel < RTOL
    return int(null.sum()), float(rel[~null].min()), float(rel[null].max()) if bool(null.any()) else None


def prove_whole_model(model, seed: int = 0) -> dict:
    """The ``whole_model.proof`` object: the twin, its Jacobian nullities and its reported counts."""
    import idinspect

    hf = build_whole_twin(model, seed)
    with tempfile.TemporaryDirectory(prefix="idinspect-twin-") as tmp:
        hf.save_pretrained(Path(tmp))
        with idinspect.load(Path(tmp)) as twin:
            report = whole_model(twin, idinspect.inspect(twin, spectra=False)["totals"]["unidentified_parameters"])
    relu = str(getattr(hf.config, "activation_function", "")) == "relu"
    tokens = getattr(hf.config, "n_positions", 8)
    J, p = logit_jacobian(hf, tokens, 6.0 if relu else 2.5, seed)
    J_lp = J - torch.einsum("nv,nvp->np", p, J).unsqueeze(1)      # d log p_v = d z_v - sum_w p_w d z_w
    null, kept, dropped = _nullity(J.reshape(-1, J.shape[-1]))
    null_lp, kept_lp, dropped_lp = _nullity(J_lp.reshape(-1, J.shape[-1]))
    drops = [x for x in (dropped, dropped_lp) if x is not None]
    return {"twin": {"model_type": hf.config.model_type, "architecture": type(hf).__name__, "head": report["head"],
                     "hidden_size": int(getattr(hf.config, "hidden_size", 8)), "layers": 2, "seed": seed},
            "parameters": report["parameters_total"], "jacobian_shape": [J.shape[0] * J.shape[1], J.shape[2]],
            "rtol": RTOL, "jacobian_nullity": null, "whole_model_count": report["exact"],
            "jacobian_nullity_log_prob": null_lp, "whole_model_count_log_prob": report["exact_log_prob"],
            "smallest_kept_singular_value": min(kept, kept_lp),
            "largest_dropped_singular_value": max(drops) if drops else None,
            "agree": null == report["exact"] and null_lp == report["exact_log_prob"]}


__all__ = ["RTOL", "build_whole_twin", "prove_whole_model", "twin_settings"]
