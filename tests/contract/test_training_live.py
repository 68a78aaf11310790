"""The per-variant contract of tests/training/test_training_live.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/training/."""

from __future__ import annotations

import pytest
import torch

from idinspect.training import gauge_metrics, rebalance, snapshot
from idinspect.training.balance import rebalanced_layer
from idinspect.training.live import opened, write_layer
from idinspect.training.metrics import group_factors, side_algebra
from idinspect.training.orbit import imbalance
from tests.support.gauge_moves import gauge_move
from tests.support.tiny import build
from tests.training.test_training_live import VARIANTS, _logits, _rel  # noqa: F401


@pytest.mark.parametrize("variant", VARIANTS)
def test_rebalancing_keeps_logits_zeroes_beta_and_is_idempotent(variant):
    model = build(variant)
    before = _logits(model)
    view = opened(model)
    old = [view.layer(i).to(torch.float64) for i in range(view.num_layers)]
    old = [L.replace(**{r: t.clone() for r, t in L.tensors().items()}) for L in old]
    rebalance(model)
    assert _rel(_logits(model), before) < 1e-12
    for i in range(view.num_layers):
        layer = view.layer(i)
        for g in range(layer.n_kv_heads):
            for side in ("qk", "vo"):
                L, R = group_factors(layer, g, side)
                beta = imbalance(L, R, side_algebra(layer, side))[0]
                assert beta < 1e-12 * float(L.square().sum() + R.square().sum())
        again = rebalanced_layer(layer)
        assert max(float((again.tensors()[r] - t).abs().max()) for r, t in layer.tensors().items()) < 1e-10
    # closest balanced point: any other orthogonal Z of the balanced orbit is farther from the old weights
    layer, prev = view.layer(0), old[0]
    L, R = group_factors(layer, 0, "vo")
    L0, R0 = group_factors(prev, 0, "vo")
    best = float((L - L0).square().sum() + (R - R0).square().sum())
    g = torch.Generator().manual_seed(4)
    for _ in range(5):
        Z = torch.linalg.qr(torch.randn(L.shape[1], L.shape[1], generator=g, dtype=torch.float64))[0]
        assert best <= float((L @ Z - L0).square().sum() + (R @ Z - R0).square().sum()) + 1e-12


@pytest.mark.parametrize("variant", ["gpt2", "llama-gqa", "qwen2"])
def test_gauge_move_of_a_live_model_keeps_logits_and_has_rho_one(variant):
    model = build(variant)
    before_logits = _logits(model)
    before = snapshot(model)
    g = torch.Generator().manual_seed(2)
    for layer in before:
        write_layer(model, gauge_move(layer, g, 1e-5))
    assert _rel(_logits(model), before_logits) < 1e-12
    metrics = gauge_metrics(model, before, per_head=True)
    rhos = {k: v for k, v in metrics.items() if k.endswith("rho")}
    assert rhos and all(abs(v - 1) < 1e-8 for v in rhos.values()), rhos
