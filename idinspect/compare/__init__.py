"""Gauge-invariant comparison of two models and compact fingerprints (``idinspect compare`` /
``idinspect fingerprint``); the mathematics and the statistics are in docs/compare.md."""

from __future__ import annotations

from .comparison import ALPHA, VERDICTS, CompareResult, compare_invariants
from .fingerprint import fingerprint_dict, fingerprint_digest, fingerprint_json, is_fingerprint_file, read_fingerprint
from .invariants import ModelInvariants, model_invariants
from .lineage import PERMUTATIONS


def invariants_of(source, *, revision: str | None = None, token: str | None = None, cache_dir=None,
                  local_files_only: bool = False, device: str = "cpu", on_layer=None) -> ModelInvariants:
    """The invariants of a checkpoint source (anything :func:`idinspect.load` opens, or an already
    open Model), or of a fingerprint file (a path ending in ``.json``)."""
    from ..model import Model, load

    if isinstance(source, ModelInvariants):
        return source
    if is_fingerprint_file(source):
        return read_fingerprint(source)
    if isinstance(source, Model):
        inv = model_invariants(source, device=device, on_layer=on_layer)
        inv.revision = source.provenance.revision
        return inv
    with load(source, revision=revision, token=token, cache_dir=cache_dir, local_files_only=local_files_only) as model:
        inv = model_invariants(model, device=device, on_layer=on_layer)
        inv.revision = model.provenance.revision
        return inv


def compare(a, b, *, alpha: float = ALPHA, permutations: int = PERMUTATIONS, seed: int = 0, **open_kwargs) -> CompareResult:
    """Compare two sources (checkpoints, hub ids, models in memory or fingerprint files)."""
    return compare_invariants(invariants_of(a, **open_kwargs), invariants_of(b, **open_kwargs),
                              alpha=alpha, permutations=permutations, seed=seed)


def fingerprint(source, **open_kwargs) -> dict:
    """The fingerprint dict of a source (see :mod:`.fingerprint`)."""
    inv = invariants_of(source, **open_kwargs)
    return fingerprint_dict(inv, getattr(inv, "revision", None))


__all__ = ["ALPHA", "VERDICTS", "CompareResult", "ModelInvariants", "compare", "compare_invariants", "fingerprint",
           "fingerprint_dict", "fingerprint_digest", "fingerprint_json", "invariants_of", "model_invariants", "read_fingerprint"]
