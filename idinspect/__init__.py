"""idinspect: parameter identification in transformer attention.

Library entry points::

    import idinspect
    model = idinspect.load("path/or/org-name")      # or a transformers PreTrainedModel
    layer = model.layer(0)                           # canonical AttentionLayer
    report = idinspect.inspect(model)                # the JSON-contract dict
    counts = idinspect.analyze(model)                # just {"totals", "layers", "findings"}
"""

from __future__ import annotations

# The public names (and ``__version__``, whose importlib.metadata costs ~50 ms) are imported on
# first use (PEP 562), so that ``import idinspect`` (and with it ``idinspect --help`` /
# ``--version``) does not import torch, about a second on a 2-core machine, and so that the process
# entry point installs its signal handlers before anything slow runs.
_PUBLIC = {
    "AttentionLayer": ".layer.attention_layer", "Positional": ".layer.attention_layer",
    "RotarySpec": ".layer.attention_layer", "IdinspectError": ".errors", "inspect": ".analysis.inspection",
    "analyze": ".analysis", "Model": ".model", "load": ".automatic.loading",
    "reference_attention": ".forms", "canonicalize": ".forms", "invariant_errors": ".forms.per_head",
    "is_gauge_fixed": ".forms", "export": ".exporting.pipeline", "verify": ".equivalence.verify",
}


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("idinspect")
    except PackageNotFoundError:  # running from a source tree without installing
        return "0.0.0+unknown"


def __getattr__(name: str):
    if name == "__version__":
        globals()[name] = value = _package_version()
        return value
    if name not in _PUBLIC:
        raise AttributeError(f"module 'idinspect' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value      # binds idinspect.export / idinspect.verify to the functions, once
    return value


def __dir__() -> list[str]:
    """The public names (each once, loaded or not), ``__version__`` and the submodules imported so far;
    not the ``annotations`` feature flag of ``from __future__`` nor private helpers."""
    names = {n for n in globals() if not n.startswith("_") and n != "annotations"}
    return sorted(names | set(_PUBLIC) | {"__version__"})


__all__ = ["AttentionLayer", "IdinspectError", "Model", "Positional", "RotarySpec", "__version__", "analyze",
           "canonicalize", "export", "inspect", "invariant_errors", "is_gauge_fixed", "load", "reference_attention",
           "verify"]
