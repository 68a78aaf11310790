"""``idinspect scan MODEL DB``: one model against a database of fingerprints, best matches first.

DB is a folder (each ``*.json`` file directly in it, in name order) or a JSONL file (one fingerprint
document per line; blank lines skipped). Every entry is checked as a fingerprint file is
(:mod:`.fingerprint_check`: schema, integrity, declared sizes, figures); a bad entry is an error
naming it (its file, or ``DB line N``). Full and compact fingerprints mix freely.

Each entry E is compared with the model M as ``compare E M`` would, with two shortcuts that keep
hundreds of entries within seconds. The per-layer matching and the same-function bound run only
where the same function is still possible, checked first by a necessary condition: per layer the
same structure and head counts, and every head of E has some head of M (and every head of M some
head of E) whose W_QK and W_OV values all lie within their summed radii (+ the stored values'
relative rounding), as a perfect matching within tolerance needs. Where it fails, the lineage test
alone decides (the same statistic and tail bound as ``compare``), and the similarity reported is
the mean nearest-head similarity instead of the matched one; its head distances are those of
``compare`` bit for bit, with the model's side prepared once (:class:`.nearest.Target`). An entry
of another depth (layers dropped or repeated) is compared in full, as ``compare`` aligns its layers. And no Monte Carlo re-pairings by
default (:data:`SCAN_PERMUTATIONS`): their p-value cannot go below 1 / (K + 1), far above any usable
alpha, so they never change a verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch

from ..errors import IdinspectError
from . import alignment
from .comparison import ALPHA, _structure_notes, compare_invariants, truncated
from .fingerprint import fingerprint_from_document, read_fingerprint
from .fingerprint_check import MAX_FILE_BYTES, parse_document
from .invariants import ModelInvariants, head_vectors
from .lineage import lineage_test
from .matching import distance_matrix
from .nearest import Target

#: Most entries read from one database.
MAX_ENTRIES = 100_000


def read_database(db: str | Path) -> Iterator[tuple[str, ModelInvariants]]:
    """(entry name, checked invariants) of every fingerprint in a folder or a JSONL file."""
    p = Path(db).expanduser()
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix.lower() == ".json" and f.is_file())
        if not files:
            raise IdinspectError(f"{p}: no *.json fingerprint in this folder; write some with "
                                 "'idinspect fingerprint MODEL -o DB/NAME.json'")
        for f in files[:MAX_ENTRIES]:
            yield f.name, read_fingerprint(f)
        return
    if not p.is_file():
        raise IdinspectError(f"{p}: no such folder or JSONL file; DB is a folder of fingerprints or a .jsonl file")
    if p.stat().st_size > 64 * MAX_FILE_BYTES:
        raise IdinspectError(f"{p}: {p.stat().st_size} bytes, more than a fingerprint database is read (16 GiB)")
    n = 0
    with open(p, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            label = f"{p} line {number}"
            if len(raw) > MAX_FILE_BYTES:
                raise IdinspectError(f"{label}: {len(raw)} bytes, more than a fingerprint can hold")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise IdinspectError(f"{label}: not UTF-8 text (byte {exc.start}); one fingerprint's JSON per line") from None
            yield f"line {number}", fingerprint_from_document(label, parse_document(label, text))
            n += 1
            if n >= MAX_ENTRIES:
                return
    if n == 0:
        raise IdinspectError(f"{p}: no fingerprint in it; one fingerprint's JSON per line (idinspect fingerprint MODEL)")


def could_be_same_function(a: ModelInvariants, b: ModelInvariants) -> bool:
    """The necessary condition of the module docstring (False: ``compare`` cannot say same-function).
    The structures are compared last: an unrelated entry usually fails the first layer's values."""
    if len(a.layers) != len(b.layers):
        return False
    for A, B in zip(a.layers, b.layers):
        if A.n_heads != B.n_heads or A.head_shape() != B.head_shape():
            return False
        if not bool(A.finite.all() and B.finite.all()):
            break                             # leave the non-finite heads to compare's own reasoning
        feasible = torch.ones(A.n_heads, B.n_heads, dtype=torch.bool)
        for kind in ("qk", "ov"):
            xa, xb = getattr(A, kind), getattr(B, kind)
            ra, rb = getattr(A, f"radius_{kind}"), getattr(B, f"radius_{kind}")
            tol = (ra[:, None, None] + rb[None, :, None] + a.value_rtol * xa.abs()[:, None, :]
                   + b.value_rtol * xb.abs()[None, :, :])
            feasible &= ((xa[:, None, :] - xb[None, :, :]).abs() <= tol).all(dim=-1)
        if not bool(feasible.any(dim=1).all() and feasible.any(dim=0).all()):
            return False
    return not _structure_notes(a, b)


def _lineage_only(a: ModelInvariants, b: ModelInvariants, alpha: float, permutations: int, seed: int,
                  target: Target | None = None) -> dict:
    """The lineage test alone (``compare``'s statistic and tail bound); ``target``: B's side prepared
    (:class:`.nearest.Target`), used where it fits A (the same distances, bit for bit)."""
    if target is not None and target.fits(a.layers):
        D = target.distances(a.layers)
        return _lineage_row(D, torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(a.layers)]),
                            target.layer, alpha, permutations, seed)
    comparable = [i for i in range(min(len(a.layers), len(b.layers)))
                  if a.layers[i].head_shape()[:2] == b.layers[i].head_shape()[:2]]
    if not comparable:
        return {"verdict": "unrelated", "p_value": None, "similarity": None, "statistic": None, "heads": None,
                "compared": "structure: no layer has heads of the same width"}
    La, Lb = [a.layers[i] for i in comparable], [b.layers[i] for i in comparable]
    D = distance_matrix(head_vectors(La), head_vectors(Lb), exact=False)
    layer_a = torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(La)])
    layer_b = torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(Lb)])
    return _lineage_row(D, layer_a, layer_b, alpha, permutations, seed)


def _lineage_row(D: torch.Tensor, layer_a: torch.Tensor, layer_b: torch.Tensor, alpha: float, permutations: int,
                 seed: int) -> dict:
    nn = torch.from_numpy(D.numpy().argmin(axis=1))          # first minimum, as torch's argmin; numpy's is ~5x faster
    nearest = D[torch.arange(D.shape[0]), nn]
    t = lineage_test(D, layer_a, layer_b, permutations=permutations, seed=seed, nearest=nn)
    return {"verdict": "same-lineage" if t.p_value < alpha else "unrelated", "p_value": t.p_value,
            "similarity": 1.0 - float(nearest.mean()), "statistic": t.statistic, "heads": t.heads,
            "compared": "lineage test (same function ruled out per head)"}


#: Monte Carlo re-pairings in a scan: none by default. Its p-value cannot go below 1 / (K + 1), far above
#: any usable alpha, so it never changes a verdict; the tail bound decides, and its p-value is reported.
SCAN_PERMUTATIONS = 0


def scan(model: ModelInvariants, db: str | Path, *, alpha: float = ALPHA, permutations: int = SCAN_PERMUTATIONS,
         seed: int = 0) -> list[dict]:
    """One row per entry of ``db`` (entry, source, verdict, p_value, similarity, ...), best first: by
    verdict (same-function, same-lineage, unrelated), then p-value, then similarity (descending)."""
    from ..numerics.parallel import single_threaded_kernels

    rows = []
    reduced: dict[int | None, tuple[ModelInvariants, Target]] = {}
    with single_threaded_kernels():
        for name, entry in read_database(db):
            k = entry.compact_values                  # an entry read holds k values per head already
            if k not in reduced:
                m = model if k is None else truncated(model, k)
                reduced[k] = (m, Target(m.layers))
            m, target = reduced[k]
            e = entry
            if could_be_same_function(e, m) or alignment.applies(e, m):     # depth changes: compare aligns layers
                r = compare_invariants(e, m, alpha=alpha, permutations=permutations, seed=seed)
                row = {"verdict": r.verdict, "p_value": None if r.lineage is None else r.lineage.p_value,
                       "similarity": r.similarity, "statistic": None if r.lineage is None else r.lineage.statistic,
                       "heads": None if r.lineage is None else r.lineage.heads, "compared": "in full"}
            else:
                row = _lineage_only(e, m, alpha, permutations, seed, target)
            rows.append({"entry": name, "source": entry.source, "compact_values": k, **row})
    order = {"same-function": 0, "same-lineage": 1, "unrelated": 2}
    rows.sort(key=lambda r: (order[r["verdict"]], 1.0 if r["p_value"] is None else r["p_value"],
                             -(r["similarity"] or 0.0)))
    return rows


def scan_json(rows: list[dict], model_source: str, db: str, alpha: float) -> str:
    """The JSON record of a scan (strict JSON)."""
    return json.dumps({"kind": "idinspect-scan", "schema_version": 1, "model": model_source, "database": str(db),
                       "alpha": alpha, "entries": len(rows), "matches": rows}, indent=1, allow_nan=False) + "\n"
