"""Gauge metrics and rebalancing for models in training (the paper's section 5).

- :func:`gauge_metrics` (beta, tau, and rho of a step from a :func:`snapshot`) for custom loops;
- :class:`GaugeCallback` / :class:`RebalanceCallback` for ``transformers.Trainer``
  (imported on first use: they need ``transformers``);
- :func:`rebalance` (in place, with a stated optimizer-state policy);
- :mod:`.orbit` and :mod:`.metrics`: the mathematics on canonical layers (also used by ``idinspect diff``).

A custom loop::

    before = idinspect.training.snapshot(model)
    optimizer.step()
    logs = idinspect.training.gauge_metrics(model, before)    # {"gauge/layer0/qk_rho": ..., ...}
"""

from __future__ import annotations

from .gauge_log import gauge_metrics
from .live import snapshot
from .rebalance import rebalance, reset_state

__all__ = ["GaugeCallback", "RebalanceCallback", "gauge_metrics", "rebalance", "reset_state", "snapshot"]


def __getattr__(name: str):
    if name in ("GaugeCallback", "RebalanceCallback"):
        from . import callback

        return getattr(callback, name)
    raise AttributeError(name)
