"""Flat metric dictionaries for loggers (TensorBoard, W&B, a CSV): one float per key."""

from __future__ import annotations

import torch

from ..layer.attention_layer import AttentionLayer
from .live import opened
from .metrics import SIDES, layer_metrics, pooled_rho


def gauge_metrics(model: torch.nn.Module, before: list[AttentionLayer] | None = None, *, per_head: bool = False,
                  prefix: str = "gauge/") -> dict[str, float]:
    """beta, tau (and, with ``before`` from :func:`~idinspect.training.live.snapshot`, rho of the step
    before -> now) of every attention layer of a live model.

    Keys: ``{prefix}layer{i}/{qk|vo}_{beta|tau}``, ``.../{qk|vo}_rho`` and ``.../rho`` (pooled over
    groups: sum of the along-orbit squared lengths over the step's squared length), and
    ``{prefix}layer{i}/{qk|vo}_rho_ref`` (gauge dimension / parameters of the pair: 1/(2H) for
    bias-free multi-head attention). A layer's beta is the Frobenius norm over its groups'
    imbalances (they sit on a block diagonal), tau their sum. With ``per_head`` also
    ``.../group{g}/{qk|vo}_{beta|tau|rho}`` per kv group (= per head without GQA).
    """
    view = opened(model)
    out: dict[str, float] = {}
    for i in range(view.num_layers):
        a = before[i] if before is not None else view.layer(i)
        b = view.layer(i) if before is not None else None
        groups = layer_metrics(a, b)
        p = f"{prefix}layer{i}/"
        for side in SIDES:
            sides = [m[side] for m in groups]
            now = [(s.beta_b, s.tau_b) if b is not None else (s.beta_a, s.tau_a) for s in sides]
            out[p + f"{side}_beta"] = sum(x[0] ** 2 for x in now) ** 0.5
            out[p + f"{side}_tau"] = sum(x[1] for x in now)
            out[p + f"{side}_rho_ref"] = sides[0].reference
            if b is not None:
                out[p + f"{side}_rho"] = pooled_rho(groups, (side,))
            if per_head:
                for g, (s, (beta, tau)) in enumerate(zip(sides, now)):
                    out[p + f"group{g}/{side}_beta"] = beta
                    out[p + f"group{g}/{side}_tau"] = tau
                    if b is not None:
                        out[p + f"group{g}/{side}_rho"] = s.rho
        if b is not None:
            out[p + "rho"] = pooled_rho(groups)
    return out
