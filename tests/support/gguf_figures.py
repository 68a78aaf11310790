"""Prints the figures docs/gguf.md quotes: the largest relative invariant error and the largest weight
error (relative to the tensor's largest value) of tiny models written as Q8_0, Q4_K and a Q4_K/Q8_0
mix, read back by idinspect (``python -m tests.support.gguf_figures``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

import idinspect
from tests.sources.test_gguf import Q4_K_MIX, wide
from tests.support import tiny
from tests.support.gguf_convert import convert


def figures(kind: str, qtype, width: int) -> tuple[dict[str, float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        model = wide(kind, width)
        tiny.save(model, Path(tmp) / "hf", dtype=torch.float32)
        path = convert(model, Path(tmp) / "q.gguf", qtype)
        worst: dict[str, float] = {}
        weight = 0.0
        with idinspect.load(Path(tmp) / "hf") as hf, idinspect.load(path) as g:
            for i in range(hf.num_layers):
                for key in hf.adapter.attention_keys(i):
                    x, y = hf.reader.get(key), g.reader.get(key)
                    weight = max(weight, ((x - y).abs().max() / x.abs().max()).item())
                for name, e in idinspect.invariant_errors(hf.layer(i), g.layer(i)).items():
                    worst[name] = max(worst.get(name, 0.0), e.error)
    return worst, weight


def main() -> None:
    for kind in ("llama", "qwen2", "phi3", "gpt2"):
        for label, qtype, width in (("Q8_0", "Q8_0", 64), ("Q8_0", "Q8_0", 256), ("Q4_K", "Q4_K", 256),
                                    ("Q4_K+Q8_0 attn_v", Q4_K_MIX, 256)):
            worst, weight = figures(kind, qtype, width)
            cells = ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items()))
            print(f"{kind:6s} d={width:<4d} {label:17s} weights {weight:.2e} | {cells}")


if __name__ == "__main__":
    main()
