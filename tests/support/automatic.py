"""Reading a model with its hand-written adapter hidden, for the comparisons of --auto against the
adapters written by hand (tests/automatic and bench/automatic_sweep.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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


def counted(model) -> dict:
    """Every total and every per-layer figure of ``idinspect.inspect(model)``, without the stack names
    (a hand-written adapter's words: "text", "vision", "encoder")."""
    r = idinspect.inspect(model)
    return {"totals": {k: v for k, v in r["totals"].items() if k != "stacks"},
            "layers": [{k: v for k, v in x.items() if k != "stack"} for x in r["layers"]]}
