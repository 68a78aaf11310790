"""``transformers.Trainer`` callbacks: gauge metrics through the trainer's own logging, and rebalancing.

    trainer = Trainer(model=model, args=args, train_dataset=ds)
    GaugeCallback.attach(trainer, every=50)          # rho, beta, tau per layer every 50 steps
    RebalanceCallback.attach(trainer, every=200)     # optional: the paper's rebalancing
    trainer.train()

The metrics go through ``Trainer.log``, so every reporter the user configured (TensorBoard, W&B,
the console, ``state.log_history``) receives them. rho is measured on the optimizer step itself:
the attention weights are copied just before ``optimizer.step()`` on logging steps and compared
just after.
"""

from __future__ import annotations

from transformers import TrainerCallback

from ..errors import IdinspectError
from .gauge_log import gauge_metrics
from .live import snapshot
from .rebalance import OptimizerStatePolicy, rebalance


class GaugeCallback(TrainerCallback):
    """Log rho, beta and tau per layer (per kv group with ``per_head``) every ``every`` optimizer steps."""

    def __init__(self, every: int = 50, *, per_head: bool = False, prefix: str = "gauge/"):
        if every < 1:
            raise ValueError("every must be >= 1")
        self.every, self.per_head, self.prefix = every, per_head, prefix
        self.trainer = None
        self._before = None
        self._pending = None

    @classmethod
    def attach(cls, trainer, every: int = 50, **kwargs) -> "GaugeCallback":
        """Create the callback, bind it to ``trainer`` (whose ``log`` it calls) and add it."""
        callback = cls(every, **kwargs)
        callback.trainer = trainer
        trainer.add_callback(callback)
        return callback

    def _due(self, state) -> bool:
        return (state.global_step + 1) % self.every == 0

    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer is None:
            raise IdinspectError("GaugeCallback logs through Trainer.log: create it with GaugeCallback.attach(trainer)")

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self._due(state) and model is not None:
            self._before = snapshot(model)

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self._before is None or model is None:
            return
        self._pending = gauge_metrics(model, self._before, per_head=self.per_head, prefix=self.prefix)
        self._before = None

    def on_step_end(self, args, state, control, **kwargs):
        # after global_step has counted the step the metrics describe
        if self._pending is not None:
            metrics, self._pending = self._pending, None
            self.trainer.log(metrics)


class RebalanceCallback(TrainerCallback):
    """Rebalance every attention group every ``every`` optimizer steps (see :mod:`.rebalance` for
    ``optimizer_state``)."""

    def __init__(self, every: int = 200, *, optimizer_state: OptimizerStatePolicy = "reset"):
        if every < 1:
            raise ValueError("every must be >= 1")
        self.every, self.optimizer_state = every, optimizer_state
        self.count = 0

    @classmethod
    def attach(cls, trainer, every: int = 200, **kwargs) -> "RebalanceCallback":
        callback = cls(every, **kwargs)
        trainer.add_callback(callback)
        return callback

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if model is not None and (state.global_step + 1) % self.every == 0:
            rebalance(model, optimizer, optimizer_state=self.optimizer_state)
            self.count += 1
