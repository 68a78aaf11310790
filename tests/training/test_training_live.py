"""idinspect.training on live transformers models: gauge moves, rebalancing, metrics, optimizer state."""

from __future__ import annotations

import pytest
import torch

from idinspect.training import gauge_metrics, rebalance, snapshot
from idinspect.training.balance import rebalanced_layer
from idinspect.training.live import opened, write_layer
from idinspect.training.metrics import group_factors, layer_metrics, side_algebra
from idinspect.training.orbit import imbalance
from tests.support.gauge_moves import gauge_move
from tests.support.tiny import build

VARIANTS = ["gpt2", "bert", "llama-gqa", "llama-bias", "llama-mqa", "qwen2"]


def _logits(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=g)
    with torch.no_grad():
        return model(input_ids=ids).logits


def _rel(a, b):
    return float((a - b).norm() / b.norm())


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


def test_sgd_step_rho_small_and_adam_reset_policy():
    model = build("gpt2")
    model.train()
    ids = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert len(opt.state) == len(list(model.parameters()))
    touched = rebalance(model, opt)
    assert touched and all(p not in opt.state for p in touched)
    assert len(opt.state) == len(list(model.parameters())) - len({id(p) for p in touched})
    loss = model(input_ids=ids, labels=ids).loss        # the optimizer starts the touched states afresh
    loss.backward()
    opt.step()
    assert all(int(opt.state[p]["step"]) == 1 for p in touched)
    # a plain gradient step: the gradient is orthogonal to the orbit, so rho = O(lr^2) relative
    sgd = torch.optim.SGD(model.parameters(), lr=1e-4)
    before = snapshot(model)
    opt.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    sgd.step()
    rho = gauge_metrics(model, before)
    assert max(v for k, v in rho.items() if k.endswith("/rho")) < 1e-6


def test_layer_metrics_refuse_mismatched_layers():
    from idinspect.errors import IdinspectError

    a = opened(build("llama-gqa")).layer(0)
    b = opened(build("llama-mha")).layer(0)
    with pytest.raises(IdinspectError, match="same model"):
        layer_metrics(a, b)
