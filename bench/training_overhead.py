"""``python -m bench.training_overhead``: the cost of GaugeCallback against the training step it rides on.

A GPT-2-shaped model (default d = 256, 4 layers, 8 heads, batch 8 x 128, float32, one thread) is
trained by ``transformers.Trainer`` for ``--steps`` steps three times, alternating: without the
callback, with ``GaugeCallback(every=1)`` (the worst case: metrics on every step), and with
``GaugeCallback(every=50)``. Per-step wall times come from a timing callback (on_step_begin ->
on_step_end), so start-up is excluded. Reported: the median plain step, the extra time of a logged
step (snapshot + metrics) as a ratio of the plain step, and the amortised overhead at every=50.
Results are written as JSON under ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n, length, vocab):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def measure(mode: str, args) -> list[float]:
    """Per-step wall times (s) of one Trainer run; ``mode`` is 'plain', 'every1' or 'every50'."""
    import tempfile

    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from idinspect.training import GaugeCallback

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=256, n_positions=args.block, n_embd=args.width, n_layer=args.layers,
                        n_head=args.heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(output_dir=tmp, max_steps=args.steps, per_device_train_batch_size=args.batch,
                                  learning_rate=1e-3, logging_steps=10_000, report_to=[], save_strategy="no",
                                  use_cpu=True, disable_tqdm=True)
        trainer = Trainer(model=model, args=targs, train_dataset=_Tokens(args.steps * args.batch, args.block, 256))
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)      # the metrics go to Trainer.log; no console printing
        trainer.add_callback(Timer())
        if mode != "plain":
            GaugeCallback.attach(trainer, every=1 if mode == "every1" else 50)
        trainer.train()
    return times[2:]      # the first steps warm allocators up


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.training_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    samples = {"plain": [], "every1": [], "every50": []}
    for _ in range(args.repeats):
        for mode in samples:
            samples[mode] += measure(mode, args)
    plain = statistics.median(samples["plain"])
    logged = statistics.median(samples["every1"])
    per_log = logged - plain
    every50 = statistics.fmean(samples["every50"])
    result = {
        "config": vars(args), "torch": torch.__version__,
        "plain_step_s": plain, "logged_step_s": logged,
        "metrics_over_step": per_log / plain,
        "amortised_every50_predicted": per_log / plain / 50,
        "every50_mean_over_plain_mean": every50 / statistics.fmean(samples["plain"]) - 1,
    }
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (RESULTS / f"{stamp}-training-overhead.json").write_text(json.dumps({**result, "samples": samples}, indent=1))
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
