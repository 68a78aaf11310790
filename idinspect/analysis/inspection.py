"""``inspect``: a model in, the JSON-contract dict out (summary, totals, layers, findings)."""

from __future__ import annotations

from collections.abc import Callable

from ..model import Model, load

SCHEMA_VERSION = 1


def tool_info() -> dict:
    from .. import __version__

    return {"name": "idinspect", "version": __version__}


def inspect(source, *, revision: str | None = None, token: str | None = None, device: str | None = "cpu",
            spectra: bool = True, prove: bool = False, whole_model: bool = False, heavy_tails: bool = False,
            on_layer: Callable[[int, int], None] | None = None) -> dict:
    """Inspect ``source`` (path, hub id, ``pkg:`` source, PreTrainedModel or an open :class:`Model`).

    Returns ``{"schema_version", "tool", "model", "totals", "layers", "findings"}`` (plus ``"proof"``
    with ``prove=True``, ``"whole_model"`` with ``whole_model=True``: the continuous exact symmetries of the
    whole checkpoint per component, :mod:`idinspect.analysis.whole_model`; ``layers[].spectra.heavy_tail``
    with ``heavy_tails=True``, :mod:`idinspect.forms.per_head.heavy_tail`); keys are only ever added. Layers are streamed one at a time;
    ``on_layer(i, n)`` is called after layer ``i`` (0-based) of ``n``. ``device`` ("cpu" or
    "cuda") is where the linear algebra runs; CUDA without a GPU falls back to cpu with a warning.
    """
    from . import analyze

    opened = not isinstance(source, Model)
    model = load(source, revision=revision, token=token) if opened else source
    try:
        result = {"schema_version": SCHEMA_VERSION, "tool": tool_info(), "model": model.summary()}
        result.update(analyze(model, device=device, spectra=spectra, on_layer=on_layer, heavy_tails=heavy_tails))
        from ..sources.file_digest import checkpoint_files

        files = checkpoint_files(model)
        if files is not None:   # sizes and header digests: which files these numbers describe
            result["model"]["files"] = files
        fetched = model.fetch_summary()
        if fetched is not None:   # a hub checkpoint read in part: known once every layer was read
            result["model"]["fetch"] = fetched
        if whole_model:
            from .whole_model_read import whole_model as whole

            result["whole_model"] = whole(model, result["totals"]["unidentified_parameters"])
            if prove and result["whole_model"]["derived"]:
                from .prove_whole import prove_whole_model

                result["whole_model"]["proof"] = prove_whole_model(model)
        if prove:
            from .prove import prove as run_proof

            result["proof"] = run_proof(model)
    finally:
        if opened:
            model.close()
    return result
