"""GaugeCallback and RebalanceCallback inside a real transformers.Trainer run (tiny GPT-2, CPU)."""

from __future__ import annotations

import pytest
import torch

from idinspect.errors import IdinspectError
from tests.support.tiny import build


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n=16, length=12):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _trainer(tmp_path, model, **kw):
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=4, learning_rate=1e-3,
                             logging_steps=100, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, **kw)
    return Trainer(model=model, args=args, train_dataset=_Tokens())


def test_gauge_callback_logs_through_trainer_log(tmp_path):
    from idinspect.training import GaugeCallback

    model = build("gpt2", dtype=torch.float32)
    trainer = _trainer(tmp_path, model)
    seen = []

    class Reporter(__import__("transformers").TrainerCallback):   # stands in for TensorBoard / W&B
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append((state.global_step, dict(logs)))

    trainer.add_callback(Reporter())
    GaugeCallback.attach(trainer, every=3, per_head=True)
    trainer.train()
    gauge = [(step, logs) for step, logs in seen if any(k.startswith("gauge/") for k in logs)]
    assert [step for step, _ in gauge] == [3, 6]
    logs = gauge[0][1]
    for i in range(2):
        for key in ("qk_beta", "qk_tau", "vo_beta", "vo_tau", "qk_rho", "vo_rho", "rho", "qk_rho_ref",
                    "group3/qk_rho"):
            assert isinstance(logs[f"gauge/layer{i}/{key}"], float)
        assert 0 <= logs[f"gauge/layer{i}/rho"] <= 1
    assert logs["gauge/layer0/qk_rho_ref"] == pytest.approx(4 * 4 / ((17 + 17) * 4))   # d_k^2 / ((d+1 + d+1) d_k)
    assert any("gauge/layer0/rho" in entry for entry in trainer.state.log_history)


def test_unbound_gauge_callback_is_refused(tmp_path):
    from idinspect.training import GaugeCallback

    trainer = _trainer(tmp_path, build("gpt2", dtype=torch.float32))
    trainer.add_callback(GaugeCallback(every=2))
    with pytest.raises(IdinspectError, match="attach"):
        trainer.train()


def test_rebalance_callback_rebalances_and_resets_adam_state(tmp_path):
    from idinspect.training import RebalanceCallback
    from idinspect.training.live import opened
    from idinspect.training.metrics import layer_metrics

    model = build("gpt2", dtype=torch.float64)
    trainer = _trainer(tmp_path, model)
    cb = RebalanceCallback.attach(trainer, every=3)
    trainer.train()
    assert cb.count == 2
    # rebalanced after step 6, the last one: beta ~ 0 everywhere
    for i in range(2):
        for m in layer_metrics(opened(model).layer(i)):
            assert m["qk"].beta_a < 1e-10 and m["vo"].beta_a < 1e-10
    opt = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    attn = model.transformer.h[0].attn.c_attn.weight
    assert attn not in opt.state                       # dropped after the rebalance at step 6
    assert int(opt.state[model.transformer.wte.weight]["step"]) == 6
