"""idinspect.training on live transformers models: gauge moves, rebalancing, metrics, optimizer state."""

from __future__ import annotations

import pytest
import torch

from idinspect.training import gauge_metrics, rebalance, snapshot
from idinspect.training.live import opened
from idinspect.training.metrics import layer_metrics
from tests.support.tiny import build

VARIANTS = ["gpt2", "bert", "llama-gqa", "llama-bias", "llama-mqa", "qwen2"]


def _logits(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=g)
    with torch.no_grad():
        return model(input_ids=ids).logits


def _rel(a, b):
    return float((a - b).norm() / b.norm())


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
