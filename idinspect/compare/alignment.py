"""Depth changes: which layer of A each layer of B comes from, when B dropped or repeated layers of A.

Layer pruning (B keeps some of A's layers) and depth up-scaling (B repeats a range of A's layers)
leave two models with different layer counts, whose layers cannot be paired by index. Every head j
of B takes its nearest head of A among *all* of A's heads (the distance of :mod:`.matching`); src(j)
is the layer of A where it lies, and V[a, b] counts the heads of B's layer b with src(j) = a (the
votes). Each B layer is aligned to the A layer with the most votes, f(b) = argmax_a V[a, b] (not
necessarily monotone: up-scaling repeats a range), and its heads are paired with that layer's by the
least-distance assignment (rectangular where B dropped heads), with per-layer evidence: the votes,
the runner-up layer and its votes, and the matched similarity.

The test. For a fixed map f, X_f = #{j : src(j) = f(layer_B(j))} is a linear permutation statistic
under the null of :mod:`.lineage` (B's heads placed on B's positions by a uniformly random
permutation): a_f[j, p] = [src(j) = f(layer_B(p))] in {0, 1}, and
E X_f = (1 / N_B) sum_j count_f(src(j)) <= n_max, where count_f(a) is the number of B positions whose
layer f maps to a and n_max the largest number of B heads with src in one layer of A (the sum of
count_f over a is N_B). Chatterjee's bound, increasing in the mean for a fixed x, gives
P(X_f >= x) <= 2 exp(-t^2 / (4 n_max + 2 t)), t = x - n_max. The observed x = sum_b max_a V[a, b] is
the largest X_f over all L_A^L_B maps, so by the union bound

    p <= L_A^L_B * 2 exp(-t^2 / (4 n_max + 2 t)),

computed in logarithms. The price of not knowing the alignment is L_B log L_A in the exponent:
a few hundred heads (a 1B model's 512) resolve p < 1e-6 with room to spare; the 64 heads that
suffice at equal depth do not.
"""

from __future__ import annotations

import math

import torch

from .invariants import ModelInvariants, head_vectors
from .lineage import LineageTest
from .matching import distance_matrix, match


def applies(a: ModelInvariants, b: ModelInvariants) -> bool:
    """Different layer counts, every layer of both with one head width (d_k, d_v)."""
    if len(a.layers) == len(b.layers) or not a.layers or not b.layers:
        return False
    shapes = {L.head_shape()[:2] for L in a.layers + b.layers}
    return len(shapes) == 1


def depth_test(x: int, n_max: int, layers_a: int, layers_b: int) -> tuple[float, float]:
    """(Chatterjee bound for one map, p-value with the union bound over all L_A^L_B maps)."""
    t = x - n_max
    if t <= 0:
        return 1.0, 1.0
    log_single = math.log(2.0) - t * t / (4.0 * n_max + 2.0 * t)
    log_p = log_single + layers_b * math.log(layers_a)
    return min(1.0, math.exp(log_single)), min(1.0, math.exp(min(0.0, log_p)))


def align_layers(a: ModelInvariants, b: ModelInvariants) -> tuple[list[dict], dict, LineageTest, float]:
    """Per-B-layer entries (the compare record's ``layers``), the ``alignment`` record, the test and the
    mean matched similarity (see the module docstring)."""
    La, Lb = a.layers, b.layers
    D = distance_matrix(head_vectors(La), head_vectors(Lb), exact=False)            # [N_A, N_B]
    layer_a = torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(La)])
    layer_b = torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(Lb)])
    src = layer_a[D.argmin(dim=0)]                                                  # [N_B]
    votes = torch.zeros(len(La), len(Lb), dtype=torch.int64)
    votes.index_put_((src, layer_b), torch.ones_like(src), accumulate=True)
    f = votes.argmax(dim=0)                                                         # [L_B], first maximum
    x = int(votes.max(dim=0).values.sum())
    n_max = int(torch.bincount(src, minlength=len(La)).max())
    single, p = depth_test(x, n_max, len(La), len(Lb))
    test = LineageTest(statistic=x, heads=int(layer_b.numel()), expected=float(n_max), bound=single,
                       p_monte_carlo=None, permutations=0, p_value=p)
    entries, sims = [], []
    offsets_a = [0]
    for L in La:
        offsets_a.append(offsets_a[-1] + L.n_heads)
    ob = 0
    for j, B in enumerate(Lb):
        i = int(f[j])
        block = distance_matrix(head_vectors([La[i]]), head_vectors([B]))
        pairs = match(block)
        head_sims = [1.0 - float(block[p, q]) for p, q in pairs]
        sims += head_sims
        ranked = votes[:, j].argsort(descending=True, stable=True).tolist()
        runner = ranked[1] if len(ranked) > 1 else None
        entries.append({"index": B.index, "aligned_a": La[i].index, "votes": int(votes[i, j]),
                        "runner_up": None if runner is None else [La[runner].index, int(votes[runner, j])],
                        "similarity": sum(head_sims) / len(head_sims), "min_similarity": min(head_sims),
                        "heads": [La[i].n_heads, B.n_heads], "nearest_in_layer": int(votes[i, j]),
                        "tolerance_ratio": None, "pairs": [[p, q, round(s, 9)] for (p, q), s in zip(pairs, head_sims)]})
        ob += B.n_heads
    kept = sorted({int(v) for v in f.tolist()})
    record = {"b_from_a": [La[int(i)].index for i in f.tolist()],
              "a_layers_unused": [L.index for k, L in enumerate(La) if k not in kept],
              "a_layers_repeated": [La[k].index for k in kept if int((f == k).sum()) > 1],
              "test": "heads of B whose nearest head of A lies in the A layer their B layer is aligned to; "
                      "p <= L_A^L_B * Chatterjee bound with the null mean bounded by n_max (union over all alignments)",
              "maps": f"{len(La)}^{len(Lb)}"}
    return entries, record, test, sum(sims) / len(sims)
