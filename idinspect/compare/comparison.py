"""``compare``: same function, same lineage or unrelated, from the gauge invariants alone.

1. Invariants of both models (:mod:`.invariants`; from a fingerprint file without the weights).
2. Heads matched within each layer by the least-distance assignment (:mod:`.matching`).
3. same-function: same structure, every head matched, and every invariant value within the
   rounding tolerance |s_A - s_B| <= r_A + r_B (+ 2^-24 |s| for a float32 fingerprint side).
4. Otherwise same-lineage when the permutation test of :mod:`.lineage` gives p < alpha, else
   unrelated. Heads of different families or sizes are compared where their widths (d_k, d_v)
   agree (RoPE planes only when both have them); models with no such layer are structurally
   different, hence unrelated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .invariants import LayerInvariants, ModelInvariants, head_vectors
from .lineage import PERMUTATIONS, LineageTest, lineage_test
from .matching import distance_matrix, match

VERDICTS = ("same-function", "same-lineage", "unrelated")
#: Default significance level of the lineage test.
ALPHA = 1e-6
KINDS = ("qk", "ov", "planes")

#: The compare record's schema_version (an integer, as in every idinspect JSON output: docs/json-contract.md).
SCHEMA_VERSION = 1


@dataclass
class CompareResult:
    a: ModelInvariants
    b: ModelInvariants
    verdict: str
    alpha: float
    structure_notes: list[str]
    same_function: dict
    lineage: LineageTest | None
    layers: list[dict] = field(default_factory=list)
    similarity: float | None = None
    #: Depth changes (:mod:`.alignment`): which A layer each B layer comes from; None at equal depth.
    alignment: dict | None = None

    def satisfies(self, expect: str) -> bool:
        """Whether the verdict is at least as strong as ``expect`` (for the exit status)."""
        if expect == "unrelated":
            return self.verdict == "unrelated"
        return VERDICTS.index(self.verdict) <= VERDICTS.index(expect)

    def to_dict(self) -> dict:
        """The JSON record (strict JSON: non-finite numbers become null)."""
        return _json_safe({
            "schema_version": SCHEMA_VERSION, "kind": "idinspect-compare", "verdict": self.verdict, "alpha": self.alpha,
            "a": _side(self.a), "b": _side(self.b),
            "structurally_different": self.lineage is None, "structure_notes": self.structure_notes,
            "similarity": self.similarity, "same_function": self.same_function,
            "lineage": None if self.lineage is None else self.lineage.to_dict(),
            "layers": self.layers, "alignment": self.alignment,
        })


def _json_safe(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _side(m: ModelInvariants) -> dict:
    return {"source": m.source, "origin": m.origin, "dtype": m.dtype, "unit_roundoff": m.unit_roundoff,
            "gains_folded": m.gains_folded, "layers": len(m.layers), "model": m.model,
            "integrity": m.integrity}


def compare_invariants(a: ModelInvariants, b: ModelInvariants, *, alpha: float = ALPHA,
                       permutations: int = PERMUTATIONS, seed: int = 0) -> CompareResult:
    """Compare two models' invariants (see the module docstring).

    Every tensor here is small (heads x singular values): torch runs on one thread, which is faster
    than waking its pool for each tiny op (4.6 s -> well under 1 s for 512 heads on a busy 2-core machine).
    """
    from ..numerics.parallel import single_threaded_kernels

    with single_threaded_kernels():
        return _compare(a, b, alpha, permutations, seed)


def truncated(m: ModelInvariants, k: int) -> ModelInvariants:
    """``m`` as a compact fingerprint holds it: each head's k largest singular values of W_QK and W_OV, no
    RoPE planes (the radii bound every value, so they stay as they are)."""
    import dataclasses

    layers = [dataclasses.replace(L, qk=L.qk[:, :k], ov=L.ov[:, :k], planes=None, radius_planes=None) for L in m.layers]
    return dataclasses.replace(m, layers=layers, compact_values=k)


def _compare(a: ModelInvariants, b: ModelInvariants, alpha: float, permutations: int, seed: int) -> CompareResult:
    compact = min([k for k in (a.compact_values, b.compact_values) if k is not None], default=None)
    if compact is not None:             # compare what both hold: the k largest values of qk and ov per head
        a, b = truncated(a, compact), truncated(b, compact)
    notes = _structure_notes(a, b)
    from . import alignment

    if alignment.applies(a, b):           # layers dropped or repeated: align them instead of pairing by index
        layers, record, test, similarity = alignment.align_layers(a, b)
        sf = {"holds": False, "reason": "; ".join(notes), "compact_values": compact}
        _mlp_evidence(a, b, sf, False)
        verdict = "same-lineage" if test.p_value < alpha else "unrelated"
        return CompareResult(a, b, verdict, alpha, notes, sf, test, layers, similarity, record)
    shared = min(len(a.layers), len(b.layers))
    comparable = [l for l in range(shared) if a.layers[l].head_shape()[:2] == b.layers[l].head_shape()[:2]]
    if not comparable:
        notes.append("no layer has heads of the same width (d_k, d_v): structurally different")
        sf = {"holds": False, "reason": "structurally different"}
        return CompareResult(a, b, "unrelated", alpha, notes, sf, None)
    La, Lb = [a.layers[l] for l in comparable], [b.layers[l] for l in comparable]
    D = distance_matrix(head_vectors(La), head_vectors(Lb), exact=False)
    layer_a = torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(La)])
    layer_b = torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(Lb)])
    test = lineage_test(D, layer_a, layer_b, permutations=permutations, seed=seed)
    nn = D.argmin(dim=1)

    layers, worst, all_matched, sims = [], None, True, []
    oa = ob = 0
    for i, (A, B) in enumerate(zip(La, Lb)):
        block = distance_matrix(head_vectors([A]), head_vectors([B]))
        pairs = match(block)
        all_matched &= len(pairs) == A.n_heads == B.n_heads
        head_sims = [1.0 - float(block[p, q]) for p, q in pairs]
        sims += head_sims
        ratio, where = _tolerance_ratio(A, B, pairs, a.value_rtol, b.value_rtol)
        if where is not None and (worst is None or ratio > worst["ratio"]):
            worst = {"ratio": ratio, "layer": A.index, **where}
        nn_here = nn[oa:oa + A.n_heads]
        same_layer = int(((nn_here >= ob) & (nn_here < ob + B.n_heads)).sum())
        layers.append({"index": A.index, "similarity": sum(head_sims) / len(head_sims),
                       "min_similarity": min(head_sims), "heads": [A.n_heads, B.n_heads],
                       "nearest_in_layer": same_layer, "tolerance_ratio": ratio,
                       "pairs": [[p, q, round(s, 9)] for (p, q), s in zip(pairs, head_sims)]})
        oa += A.n_heads
        ob += B.n_heads

    structural_ok = not notes and len(comparable) == len(a.layers) == len(b.layers) and all_matched
    holds = bool(structural_ok and worst is not None and worst["ratio"] <= 1.0)
    sf = {"holds": holds, "worst": worst, "compact_values": compact,
          "bound": "|s_A - s_B| <= r_A + r_B per singular value, r = eps_Q ||Q||_F ||K||_2 + eps_K ||Q||_2 ||K||_F "
                   "+ (eps_Q eps_K + 1e-9) ||Q||_F ||K||_F, eps = unit roundoff of the stored dtype (u_g + u_W + u_g u_W "
                   "with a folded gain)"}
    if not structural_ok and not holds:
        sf["reason"] = "; ".join(notes) or "layers or heads not all matched"
    holds = _mlp_evidence(a, b, sf, holds)
    if holds:
        verdict = "same-function"
    elif test.p_value < alpha:
        verdict = "same-lineage"
    else:
        verdict = "unrelated"
    return CompareResult(a, b, verdict, alpha, notes, sf, test, layers, sum(sims) / len(sims))


def _mlp_evidence(a: ModelInvariants, b: ModelInvariants, sf: dict, attention_holds: bool) -> bool:
    """Add the MLP unit invariants' evidence to the same-function record ``sf`` (``evidence``, ``mlp``,
    ``decided_by``); returns whether the function is the same on all the evidence."""
    sf["evidence"] = ["attention"]
    sf["attention_holds"] = attention_holds
    if a.mlp is None or b.mlp is None:
        note = a.mlp_note or b.mlp_note
        sf["mlp"] = {"compared": False, "reason": note or "not asked (compare --whole-model adds the MLP units)"}
        sf["decided_by"] = "attention"
        return attention_holds
    from .mlp_invariants import compare_mlp

    mlp = compare_mlp(a.mlp, b.mlp, a.value_rtol, b.value_rtol)
    sf["mlp"] = {"compared": True, **mlp,
                 "bound": "sorted per-unit ||gamma g_i||, ||gamma u_i|| ||w_i||, |cos(gamma g_i, gamma u_i)|: "
                          "|x_A - x_B| <= r_A + r_B from each side's unit roundoff"}
    sf["evidence"].append("mlp")
    holds = attention_holds and mlp["holds"]
    sf["decided_by"] = "attention and mlp" if holds else ("attention" if not attention_holds else "mlp")
    if attention_holds and not mlp["holds"]:
        sf["reason"] = "attention agrees, the MLP units do not"
    return holds


def _tolerance_ratio(A: LayerInvariants, B: LayerInvariants, pairs: list[tuple[int, int]],
                     rtol_a: float, rtol_b: float) -> tuple[float, dict | None]:
    """Largest |s_A - s_B| / tolerance over the matched heads' values, and where."""
    if not pairs:
        return float("inf"), None
    ia = torch.tensor([p for p, _ in pairs])
    ib = torch.tensor([q for _, q in pairs])
    best, where = -1.0, None
    for kind in KINDS:
        xa, xb = getattr(A, kind), getattr(B, kind)
        if xa is None or xb is None:
            continue
        sa, sb = xa[ia], xb[ib]
        ra, rb = getattr(A, f"radius_{kind}")[ia], getattr(B, f"radius_{kind}")[ib]
        while ra.dim() < sa.dim():
            ra, rb = ra[..., None], rb[..., None]
        tol = ra + rb + rtol_a * sa.abs() + rtol_b * sb.abs()
        err = (sa - sb).abs()
        ratio = torch.where(tol > 0, err / tol, torch.where(err > 0, torch.full_like(err, float("inf")), torch.zeros_like(err)))
        ratio = torch.nan_to_num(ratio, nan=float("inf"))
        bad = ~(A.finite[ia] & B.finite[ib])
        ratio[bad] = float("inf")
        flat = int(ratio.flatten().argmax())
        value = float(ratio.flatten()[flat])
        if value > best:
            h = flat // (ratio.numel() // len(pairs))
            best = value
            where = {"kind": kind, "head_a": int(ia[h]), "head_b": int(ib[h]),
                     "error": float(err.flatten()[flat]), "tolerance": float(tol.flatten()[flat])}
    return best, where


def _structure_notes(a: ModelInvariants, b: ModelInvariants) -> list[str]:
    """Differences that rule out the same function (each one line)."""
    notes = []
    if len(a.layers) != len(b.layers):
        notes.append(f"layers differ: {len(a.layers)} vs {len(b.layers)}")
    for La, Lb in zip(a.layers, b.layers):
        sa, sb = La.structure, Lb.structure
        diff = [k for k in sorted(set(sa) | set(sb)) if not _same(sa.get(k), sb.get(k))]
        if diff:
            notes.append(f"layer {La.index}: {', '.join(f'{k} {_short(sa.get(k))} vs {_short(sb.get(k))}' for k in diff)}")
            break
    return notes


def _same(x, y) -> bool:
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y))
    if isinstance(x, float) and isinstance(y, float):
        return abs(x - y) <= 1e-6 * max(abs(x), abs(y))
    return x == y


def _short(v) -> str:
    if isinstance(v, list):
        return f"[{len(v)} values]"
    return str(v)
