"""diff's fast route for bf16 pairs (issue 23's speed): the step's products from the stored weights
(exact products, float32 sums) and the invariants without an alignment fit give what the float64
route gives on the same numbers, for small, large, zero and pure-gauge steps."""

from __future__ import annotations

import pytest
import torch

import idinspect
from idinspect.numerics import low_precision_gemm
from idinspect.training import diff as diff_module
from idinspect.training.live import snapshot, write_layer
from tests.support.gauge_moves import gauge_move
from tests.support.tiny import build, save

pytestmark = pytest.mark.skipif(not low_precision_gemm.available(torch.bfloat16),
                                reason="no bf16 matrix units with MKL's mixed-precision gemm on this machine")


def _pair(variant: str, tmp_path, step: str):
    """Checkpoints A and B, both stored in bf16 (B = A plus the step, rounded to bf16)."""
    model = build(variant, dtype=torch.float32)
    a = save(model, tmp_path / "a", dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        if step == "large":
            model = build(variant, dtype=torch.float32, seed=1)
        elif step == "small":
            for p in model.parameters():
                p.add_(1e-3 * p.abs().mean() * torch.randn(p.shape, generator=g))
        elif step == "gauge":
            model = model.to(torch.float64)
            for layer in snapshot(model):
                write_layer(model, gauge_move(layer, g, 0.3))
    return a, save(model, tmp_path / "b", dtype=torch.bfloat16)


def _records(a, b, fast: bool, monkeypatch) -> list[dict]:
    """diff_layer of every layer pair: fast route, or the float64 route on the same (widened) numbers."""
    out = []
    with idinspect.load(str(a)) as A, idinspect.load(str(b)) as B:
        for i in range(A.num_layers):
            la, lb = A.layer(i), B.layer(i)
            if not fast:
                la, lb = la.to(torch.float64), lb.to(torch.float64)
            record = diff_module.diff_layer(la, lb)
            record["scale"] = sum(float(t.double().norm()) ** 2 for L in (la, lb) for t in L.tensors().values())
            out.append(record)
    return out


def _close(x, y, rel, abs_):
    return x is None and y is None or abs(x - y) <= abs_ + rel * max(abs(x), abs(y))
