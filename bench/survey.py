"""``python -m bench.survey [--models N] [--repeats R]``: models per minute of ``idinspect survey``.

Builds N small random float32 checkpoints (default hidden 768, 6 layers; BERT, GPT-2, Llama MHA/GQA/MQA, Qwen2,
Mistral; 2 to 16 heads) once, then runs the real command in a child process, as a user does, on
the local pool with 1 and 2 workers and on a local Ray instance (2 CPUs), each on all N models and
on the first 2, alternating within each repeat. The difference of the two runs gives the marginal
throughput (models per minute once started) and the fixed start-up (Python, torch, pool or Ray);
the floor is the same inspections in one warm process, one after another (``survey_row`` in a
loop). Writes bench/results/<time>-survey.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .machine import describe, load_average

RESULTS = Path(__file__).resolve().parent / "results"
BACKENDS = {"pool-1": ["--workers", "1"], "pool-2": ["--workers", "2"], "ray-2": ["--workers", "2", "--ray=local"]}


def zoo_configs(n: int, hidden: int = 768, layers: int = 6) -> list[tuple[str, object, type]]:
    """``n`` (name, config, model class) cycling over families and head counts."""
    import transformers as tf

    base = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, vocab_size=512,
                max_position_embeddings=128)
    kinds = [
        ("bert-h{h}", lambda h: tf.BertConfig(**base, num_attention_heads=h), tf.BertModel),
        ("gpt2-h{h}", lambda h: tf.GPT2Config(n_embd=hidden, n_layer=layers, n_head=h, vocab_size=512, n_positions=128),
         tf.GPT2Model),
        ("llama-h{h}", lambda h: tf.LlamaConfig(**base, num_attention_heads=h, num_key_value_heads=h), tf.LlamaModel),
        ("llama-gqa-h{h}", lambda h: tf.LlamaConfig(**base, num_attention_heads=h, num_key_value_heads=max(1, h // 4)),
         tf.LlamaModel),
        ("qwen2-h{h}", lambda h: tf.Qwen2Config(**base, num_attention_heads=h, num_key_value_heads=max(1, h // 2)),
         tf.Qwen2Model),
        ("mistral-mqa-h{h}", lambda h: tf.MistralConfig(**base, num_attention_heads=h, num_key_value_heads=1),
         tf.MistralModel),
    ]
    heads = (4, 8, 16, 2)
    out = []
    for i in range(n):
        name, make, cls = kinds[i % len(kinds)]
        h = heads[(i // len(kinds)) % len(heads)]
        out.append((f"{i:02d}-" + name.format(h=h), make(h), cls))
    return out


def build_zoo(folder: Path, n: int, hidden: int = 768, layers: int = 6) -> list[str]:
    import torch

    paths = []
    for i, (name, config, cls) in enumerate(zoo_configs(n, hidden, layers)):
        path = folder / name
        if not (path / "config.json").exists():
            torch.manual_seed(i)
            cls(config).to(torch.float32).save_pretrained(path)
        paths.append(str(path))
    return paths


def floor_seconds(models: list[str]) -> float:
    """The inspections alone, one after another in this (warm) process."""
    from idinspect.survey import survey_row

    survey_row(models[0])  # warm imports
    start = time.perf_counter()
    for m in models:
        survey_row(m)
    return time.perf_counter() - start


def timed_survey(models: list[str], extra: list[str], out: Path) -> float:
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "idinspect", "survey", *models, "--jsonl", str(out), "-q", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... exited {proc.returncode}: {proc.stderr[-2000:]}")
    return took


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.survey", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=24, help="checkpoints in the zoo (default 24)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=list(BACKENDS))
    p.add_argument("--hidden", type=int, default=768, help="hidden size of every checkpoint (default 768)")
    p.add_argument("--layers", type=int, default=6, help="layers of every checkpoint (default 6)")
    p.add_argument("--zoo", type=Path, default=None,
                   help="where the checkpoints are built (default: a folder in the temp dir named after the shape)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    args.zoo = args.zoo or Path(tempfile.gettempdir()) / f"idinspect-survey-zoo-{args.hidden}x{args.layers}"
    args.zoo.mkdir(parents=True, exist_ok=True)
    models = build_zoo(args.zoo, args.models, args.hidden, args.layers)
    small = models[:2]
    machine = {**describe(), "load_average_start": load_average()}
    floor = floor_seconds(models)
    times: dict[str, dict[str, list[float]]] = {b: {"all": [], "two": []} for b in args.backends}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for b in args.backends:
                times[b]["all"].append(timed_survey(models, BACKENDS[b], Path(tmp) / f"{b}.jsonl"))
                times[b]["two"].append(timed_survey(small, BACKENDS[b], Path(tmp) / f"{b}-2.jsonl"))
    n = len(models)
    summary = {"floor": {"seconds": floor, "models_per_minute": 60 * n / floor}}
    for b, t in times.items():
        t_all, t_two = statistics.median(t["all"]), statistics.median(t["two"])
        marginal = (n - 2) / max(t_all - t_two, 1e-9)
        summary[b] = {"seconds_all": t_all, "seconds_two": t_two, "models_per_minute": 60 * n / t_all,
                      "marginal_models_per_minute": 60 * marginal, "startup_seconds": t_two - 2 / marginal,
                      "runs_all": t["all"], "runs_two": t["two"]}
    if "pool-1" in summary and "pool-2" in summary:
        summary["scaling_pool_2_over_1"] = summary["pool-2"]["marginal_models_per_minute"] / summary["pool-1"]["marginal_models_per_minute"]
    if "ray-2" in summary and "pool-2" in summary:
        r, q = summary["ray-2"], summary["pool-2"]
        summary["ray_overhead"] = {"startup_seconds": r["startup_seconds"] - q["startup_seconds"],
                                   "per_model_seconds": 60 / r["marginal_models_per_minute"] - 60 / q["marginal_models_per_minute"]}
    result = {"models": n, "hidden_size": args.hidden, "layers": args.layers, "repeats": args.repeats, "machine": machine, "load_average_end": load_average(),
              "summary": summary}
    print(json.dumps(summary, indent=2))
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        (RESULTS / f"{stamp}-survey.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
