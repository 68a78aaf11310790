"""Rebalance a live model in place, and what happens to the optimizer state.

The optimizer state is handled by a stated choice, ``optimizer_state``:

- ``"reset"`` (default): the whole per-parameter state (Adam's ``exp_avg``, ``exp_avg_sq`` and
  ``step``) of every parameter that was rewritten is dropped, so the optimizer starts it afresh
  (with bias correction) at its next step. Moments accumulated in the old gauge coordinates do
  not describe the new ones: the first moment transforms like a gradient (G_Q -> G_Q A^-T), but
  the elementwise second moment has no such transformation, so keeping it would scale the next
  steps by a stale, coordinate-dependent preconditioner.
- ``"keep"``: leave the state as it is (what the paper warns against; for comparison).

Parameters outside attention are never touched.
"""

from __future__ import annotations

from typing import Literal

import torch

from .balance import rebalanced_layer
from .live import opened, write_layer

OptimizerStatePolicy = Literal["reset", "keep"]


def rebalance(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
              optimizer_state: OptimizerStatePolicy = "reset", layers: list[int] | None = None) -> list[torch.nn.Parameter]:
    """Replace every kv group of every attention layer (or of ``layers``) of ``model`` by the balanced
    point of its gauge orbit closest to the current weights; the function computed is unchanged up
    to the rounding of the parameters' dtype. Returns the parameters rewritten.
    """
    if optimizer_state not in ("reset", "keep"):
        raise ValueError(f"optimizer_state must be 'reset' or 'keep', not {optimizer_state!r}")
    view = opened(model)
    touched: list[torch.nn.Parameter] = []
    for i in (range(view.num_layers) if layers is None else layers):
        touched += write_layer(model, rebalanced_layer(view.layer(i)))
    if optimizer is not None and optimizer_state == "reset":
        reset_state(optimizer, touched)
    return touched


def reset_state(optimizer, params: list[torch.nn.Parameter]) -> int:
    """Drop the optimizer's per-parameter state of ``params`` (unwrapping accelerate's wrapper);
    returns how many states were dropped."""
    inner = getattr(optimizer, "optimizer", optimizer)
    dropped = 0
    for p in {id(p): p for p in params}.values():
        if p in inner.state:
            del inner.state[p]
            dropped += 1
    return dropped
