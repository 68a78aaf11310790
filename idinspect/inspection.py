"""``inspect``: a model in, the JSON-contract dict out (summary, counts, findings)."""

from __future__ import annotations

from .model import Model, load

SCHEMA_VERSION = 1


def tool_info() -> dict:
    from . import __version__

    return {"name": "idinspect", "version": __version__}


def inspect(source, *, revision: str | None = None, token: str | None = None) -> dict:
    """Inspect ``source`` (path, hub id, PreTrainedModel or an open :class:`Model`).

    Returns ``{"schema_version", "tool", "model", ...}``; keys are only ever added.
    """
    model = source if isinstance(source, Model) else load(source, revision=revision, token=token)
    result = {"schema_version": SCHEMA_VERSION, "tool": tool_info(), "model": model.summary()}
    return result
