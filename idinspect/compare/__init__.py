"""Gauge-invariant comparison of two models and compact fingerprints (``idinspect compare`` /
``idinspect fingerprint``); the mathematics and the statistics are in docs/compare.md."""

from __future__ import annotations

from .comparison import ALPHA, VERDICTS, CompareResult, compare_invariants
from .fingerprint import fingerprint_dict, fingerprint_digest, fingerprint_json, is_fingerprint_file, read_fingerprint
from .invariants import ModelInvariants, model_invariants
from .lineage import PERMUTATIONS


def invariants_of(source, *, revision: str | None = None, token: str | None = None, cache_dir=None,
                  local_files_only: bool = False, device: str = "cpu", on_layer=None,
                  whole_model: bool = False) -> ModelInvariants:
    """The invariants of a checkpoint source (anything :func:`idinspect.load` opens, or an already
    open Model), or of a fingerprint file (a path ending in ``.json``). ``whole_model``: also the MLP
    unit invariants (:mod:`.mlp_invariants`; reads the MLP tensors)."""
    from ..model import Model, load

    if isinstance(source, ModelInvariants):
        return source
    if is_fingerprint_file(source):
        inv = read_fingerprint(source)
        if whole_model and inv.mlp is None:
            inv.mlp_note = "a fingerprint file holds attention invariants only"
        return inv
    if isinstance(source, Model):
        return _of_model(source, device, on_layer, whole_model)
    with load(source, revision=revision, token=token, cache_dir=cache_dir, local_files_only=local_files_only) as model:
        return _of_model(model, device, on_layer, whole_model)


def _of_model(model, device, on_layer, whole_model: bool) -> ModelInvariants:
    from .mlp_invariants import model_mlp_invariants, why_not_covered

    inv = model_invariants(model, device=device, on_layer=on_layer)
    inv.revision = model.provenance.revision
    if whole_model:
        inv.mlp_note = why_not_covered(model)
        if inv.mlp_note is None:
            inv.mlp, inv.mlp_dtypes = model_mlp_invariants(model)
    return inv


def compare(a, b, *, alpha: float = ALPHA, permutations: int = PERMUTATIONS, seed: int = 0, **open_kwargs) -> CompareResult:
    """Compare two sources (checkpoints, hub ids, models in memory or fingerprint files); ``whole_model=True``
    adds the MLP unit invariants as evidence."""
    return compare_invariants(invariants_of(a, **open_kwargs), invariants_of(b, **open_kwargs),
                              alpha=alpha, permutations=permutations, seed=seed)


def fingerprint(source, **open_kwargs) -> dict:
    """The fingerprint dict of a source (see :mod:`.fingerprint`)."""
    inv = invariants_of(source, **open_kwargs)
    return fingerprint_dict(inv, getattr(inv, "revision", None))


__all__ = ["ALPHA", "VERDICTS", "CompareResult", "ModelInvariants", "compare", "compare_invariants", "fingerprint",
           "fingerprint_dict", "fingerprint_digest", "fingerprint_json", "invariants_of", "model_invariants", "read_fingerprint"]
