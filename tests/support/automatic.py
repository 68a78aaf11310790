"""Reading a model with its hand-written adapter hidden, for the comparisons of --auto against the
adapters written by hand (tests/automatic and bench/automatic_sweep.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from idinspect.adapters import ADAPTERS

import idinspect


@contextlib.contextmanager
def hidden(model_type: str) -> Iterator[None]:
    """The registry without ``model_type``'s hand-written adapter (and any inferred one), restored on exit."""
    cls = ADAPTERS._adapters.pop(model_type)
    try:
        yield
    finally:
        ADAPTERS.remove_automatic(model_type)
        ADAPTERS._adapters[model_type] = cls


def reads_as_by_hand(source, model_type: str | None = None):
    """Read ``source`` (a live model or a folder) by hand and with --auto, its hand-written adapter
    (``model_type``'s; default: the one ``source`` reads with) hidden: the same counts and the same
    attention function, block by block. Returns the --auto model."""
    read = idinspect.load(source)
    by_hand, facts = counted(read), layer_facts(read)
    with hidden(model_type or read.config.model_type):
        model = idinspect.load(source, auto=True)
        assert model.adapter.family == "automatic"
        assert counted(model) == by_hand
        assert layer_facts(model) == facts
        return model


def counted(model) -> dict:
    """Every total and every per-layer figure of ``idinspect.inspect(model)``, without the stack names
    (a hand-written adapter's words: "text", "vision", "encoder")."""
    r = idinspect.inspect(model)
    return {"totals": {k: v for k, v in r["totals"].items() if k != "stacks"},
            "layers": [{k: v for k, v in x.items() if k != "stack"} for x in r["layers"]]}


def layer_facts(model) -> list[dict]:
    """Per attention block of ``model`` (an :class:`idinspect.model.Model`): every fact its adapter
    settles besides the counts (scale, causality, window, soft cap, positional scheme with its RoPE
    pairing, rotated dims and frequencies, q/k norm kind) and its tensors, as comparable values. Two
    adapters that agree here read the same attention function, not merely the same totals."""
    out = []
    for i in range(model.num_layers):
        layer = model.adapter.read_layer(i)
        positional = getattr(layer, "positional", None)
        rot = getattr(positional, "rotary", None)
        norm = getattr(layer, "qk_norm", None)
        kind = getattr(positional, "kind", None)
        out.append({
            "form": type(layer).__name__, "scale": round(float(layer.scale), 12), "causal": layer.causal,
            "window": getattr(layer, "sliding_window", None), "softcap": getattr(layer, "logit_softcap", None),
            "kind": getattr(layer, "kind", None),
            # absolute embeddings outside attention and none at all: the same function inside it
            "positional": "none" if kind == "absolute" else kind,
            "rope": None if rot is None else (rot.pairing, rot.rotary_dim, rot.inv_freq.tolist(), rot.attention_factor),
            "alibi": None if getattr(positional, "alibi_slopes", None) is None else positional.alibi_slopes.tolist(),
            "qk_norm": None if norm is None else (norm.kind, norm.scope, norm.eps, norm.gain_offset),
            "tensors": {k: v.tolist() for k, v in vars(layer).items() if isinstance(v, torch.Tensor)},
        })
    return out
