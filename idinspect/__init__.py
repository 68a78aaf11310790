"""idinspect: parameter identification in transformer attention.

Library entry points::

    import idinspect
    model = idinspect.load("path/or/org-name")      # or a transformers PreTrainedModel
    layer = model.layer(0)                           # canonical AttentionLayer
    report = idinspect.inspect(model)                # the JSON-contract dict
    counts = idinspect.analyze(model)                # just {"totals", "layers", "findings"}
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("idinspect")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

from .layer.attention_layer import AttentionLayer, Positional, RotarySpec
from .errors import IdinspectError
from .analysis.inspection import inspect
from .analysis import analyze
from .sources.model import Model, load
from .layer.reference import reference_attention
from .gauge import canonicalize, invariant_errors, is_gauge_fixed
from .exporting.pipeline import export  # note: binds idinspect.export to the function (the module stays importable by name)
from .equivalence.verify import verify

__all__ = ["AttentionLayer", "IdinspectError", "Model", "Positional", "RotarySpec", "__version__", "analyze",
           "canonicalize", "export", "inspect", "invariant_errors", "is_gauge_fixed", "load", "reference_attention",
           "verify"]
