"""Where verify has no number to compare: float64 weights whose products overflow, and model
outputs that transformers itself computes as NaN/Inf.

:func:`refuse_overflow` stops verify with one line naming the tensor, its largest value and the
limit (inspect reports the same as the ``overflow`` finding); :func:`undefined_outputs` turns the
functional check into a skipped one, with the reason, where A's own outputs are not finite and B's
are not finite at exactly the same places (else a failure), so the invariants decide.
"""

from __future__ import annotations

import torch

from ..errors import IdinspectError


def refuse_overflow(layer, role: str, t: torch.Tensor, side: str) -> None:
    """A float64 tensor whose products overflow float64 has no float64 invariants to compare: one line
    naming it, its largest value and the limit (inspect reports it as the ``overflow`` finding)."""
    from ..forms.per_head.findings import overflow_limit

    limit = overflow_limit(max(layer.d_model, layer.d_k))
    if t.dtype == torch.float64 and t.numel() and float(t.abs().max()) > limit:
        raise IdinspectError(f"{side}: tensor {layer.tensor_names.get(role, role)} holds values up to "
                             f"{float(t.abs().max()):.3g}, beyond {limit:.3g} where its products overflow float64; "
                             "verify cannot compare its invariants: repair or rescale the checkpoint")


def undefined_outputs(out_a, out_b, ids: torch.Tensor) -> tuple[bool | None, str] | None:
    """A skipped functional check when transformers' own run of A gives NaN/Inf (weights whose
    products overflow its arithmetic, e.g. a float32 softmax over float64 scores): the function is
    not defined there, so the invariants decide; B non-finite at the same places only. Returns the
    functional check's (passed: None = skipped, False = failed; detail), or None where A's are finite."""
    bad_a = ~torch.isfinite(out_a.values)
    if not bool(bad_a.any()):
        return None
    bad_b = ~torch.isfinite(out_b.values)
    n, total = int(bad_a.sum()), bad_a.numel()
    if not torch.equal(bad_a, bad_b):
        return False, (f"{out_a.kind} on {tuple(ids.shape)} seeded random ids: A's are not finite at {n} of "
                       f"{total} values, B's at {int(bad_b.sum())} (not the same places)")
    return None, (f"skipped: transformers' own {out_a.kind} of A are not finite at {n} of {total} values (its "
                  "arithmetic overflows on these weights), and B's at the same places; the invariants decide")


def non_finite(name: str, t: torch.Tensor, side: str) -> str | None:
    """Why ``t`` cannot be compared (NaN never equals anything, itself included), else None. One
    summing pass first (:func:`~idinspect.forms.per_head.spectra.all_finite`): ``isfinite`` over every
    bf16 entry took 7.3 s of a 22 s verify at the 1B shape, the sum 0.04 s per 262M entries."""
    from ..forms.per_head.spectra import all_finite

    if not t.is_floating_point() or all_finite(t):
        return None
    n_nan = int(torch.isnan(t).sum())
    n_inf = int(torch.isinf(t).sum())
    return (f"{side}'s {name} holds {n_nan} NaN and {n_inf} Inf values: a function with undefined values is "
            "equivalent to nothing, itself included")


__all__ = ["non_finite", "refuse_overflow", "undefined_outputs"]
