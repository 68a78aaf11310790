"""Tiny random Hugging Face models for tests, built from transformers configs and save_pretrained.

Every parameter (biases and norms included) is randomised so that zeros hide nothing.

``VARIANTS`` is the tagged registry of family variants: every entry takes part in every generic
test (equivalence with the HF attention module in float64, read/write round trip, Jacobian nullity
equal to the reported count, export logits through stock transformers, ``--prove``). Adding a
family = its adapter module + entries here (docs/adding-a-family.md). Tags select subsets:
``rope`` (RoPE frequencies compared with the model's own rotary module), ``lm`` (greedy decoding
after export), ``cross`` (has cross-attention blocks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers as tf


@dataclass(frozen=True)
class Variant:
    """One family variant: how to build its config, the model class, tags, and the export bound.

    ``export_bound``: relative logit error allowed after a float64 export read by stock
    transformers (1e-12 where the family computes in float64 end to end; 1e-6 where transformers
    rounds inside, e.g. RMSNorm in float32).
    """

    config: Callable[[], object]
    model_class: type
    tags: frozenset[str] = field(default_factory=frozenset)
    export_bound: float = 1e-6

    def __iter__(self):  # (config factory, model class), as the registry's entries once were
        return iter((self.config, self.model_class))

    def __getitem__(self, i: int):
        return (self.config, self.model_class)[i]


def variants(*tags: str) -> list[str]:
    """Names of the registered variants carrying every tag in ``tags`` (all of them with none)."""
    return sorted(name for name, v in VARIANTS.items() if set(tags) <= v.tags)


def _discover() -> dict[str, Variant]:
    """Every ``VARIANTS`` dict of the modules in tests/families/ (one module per family)."""
    import importlib
    import pkgutil

    from tests import families

    found: dict[str, Variant] = {}
    for info in sorted(pkgutil.iter_modules(families.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"tests.families.{info.name}")
        for name, v in module.VARIANTS.items():
            if name in found:
                raise RuntimeError(f"variant {name!r} registered twice")
            found[name] = v
    return found


VARIANTS: dict[str, Variant] = _discover()


def attn_for(cls) -> str:
    """"sdpa" where the model class supports it (exact float64 softmax), else "eager" (BLOOM)."""
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def build(variant: str, dtype: torch.dtype = torch.float64, seed: int = 0):
    """A randomised HF model of ``variant`` in ``dtype`` (eval mode, sdpa attention)."""
    v = VARIANTS[variant]
    config, cls = v.config(), v.model_class
    config._attn_implementation = attn_for(cls)
    config._experts_implementation = "eager"   # MoE grouped_mm kernels take no float64
    torch.manual_seed(seed)
    model = cls(config).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def save(model, directory: Path, max_shard_size: str | None = None, dtype: torch.dtype | None = None) -> Path:
    """save_pretrained into ``directory`` (optionally sharded / cast); returns the directory."""
    if dtype is not None:
        model = model.to(dtype)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(directory, **kwargs)
    return Path(directory)


def attention_modules(model, i: int):
    """(module whose input is the attention's hidden states, module whose output is W_O z + b_O) of
    attention block i, where idinspect's adapter for ``model`` says the block lives."""
    import idinspect

    src, out = idinspect.load(model).adapter.live_modules(model, i)
    return src, (out if out is not None else src)


def capture_attention(model, input_ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Run ``model`` and return, per attention block, (attention input hidden states, attention output)."""
    import idinspect

    adapter = idinspect.load(model).adapter
    records: list[dict] = [dict() for _ in range(adapter.num_blocks)]
    handles = []
    for i in range(adapter.num_blocks):
        src, dst = adapter.live_modules(model, i)
        dst = dst if dst is not None else src

        def pre(module, args, kwargs, i=i):
            records[i]["x"] = (kwargs.get("hidden_states") if "hidden_states" in kwargs else args[0]).detach().clone()

        def post(module, args, output, i=i):
            out = output[0] if isinstance(output, tuple) else output
            records[i]["y"] = out.detach().clone()

        handles.append(src.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(dst.register_forward_hook(post))
    from idinspect.analysis.prove import exact_softmax

    try:
        with torch.no_grad(), exact_softmax(), adapter.exact_float64():
            model(input_ids=input_ids)
    finally:
        for h in handles:
            h.remove()
    return [(r["x"], r["y"]) for r in records]


def float64_layer(layer):
    """A canonical layer with every tensor cast to float64 (the reference the analyzer's lean,
    stored-dtype path is compared with)."""
    return layer.replace(**{role: t.to(torch.float64) for role, t in layer.tensors().items()})
