"""Are two models' heads far closer than chance? A permutation test with an exact tail bound.

Statistic. For every head i of A take its nearest head nn(i) among *all* heads of B (distance of
:mod:`.matching`, computed from the invariants alone, blind to layers). Count the heads j of B
that are the nearest head of some head of A in the layer where j sits:

    X = #{ j : nn(i) = j for some i with layer_A(i) = layer_B(j) }

(X = N when every head's nearest counterpart is in its own layer and no two share one).

Null hypothesis: B's heads are unrelated to A's, so B's heads are placed on B's head positions by
a uniformly random permutation sigma (heads re-paired at random within the two models). Writing
a[j, p] = 1 if some i in layer layer_B(p) of A has nn(i) = j, else 0, for head j and position p of B,

    X(sigma) = sum_j a[j, sigma(j)],       E X = (1 / N_B) sum_{j, p} a[j, p]

(at most H_B (number of A heads) / N_B: one layer's worth of heads). X is a linear permutation
statistic with entries in {0, 1}, so Chatterjee's concentration inequality (S. Chatterjee,
"Stein's method for concentration inequalities", Probab. Theory Relat. Fields 138 (2007),
Prop. 1.1: for entries in [0, 1], P(|X - EX| >= t) <= 2 exp(-t^2 / (4 EX + 2t))) gives, for the
observed x > EX and t = x - EX,

    P(X >= x) <= bound = 2 exp(-t^2 / (4 EX + 2 t)).

Monte Carlo: K uniform permutations give p_MC = (1 + #{X_k >= x}) / (K + 1), a valid p-value
that cannot go below 1 / (K + 1). Both are valid, and for any two valid p-values the smaller is
valid up to a factor two (P(min <= a) <= P(bound <= a) + P(p_MC <= a) <= 2a), so the reported
p-value is min(1, 2 min(bound, p_MC)). When the bound is already below 1 / (K + 1) the Monte
Carlo step is skipped (it could not change the minimum) and ``p_monte_carlo`` is null.

Why not the mean similarity of optimally matched heads against random pairings: the optimal
matching maximises that statistic, so even unrelated models beat random pairings by a margin
that grows with the number of heads (false lineage); and its bounded-difference (McDiarmid)
tail bound decays only like exp(-N delta^2 / 2), too slowly to reach 1e-6 for N ~ 100 heads. The
mean matched similarity is reported as a description, not as the test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: Monte Carlo permutations by default (seeded: the result is deterministic).
PERMUTATIONS = 1_000


@dataclass
class LineageTest:
    """The statistic, its null mean, the tail bound, the Monte Carlo p-value and the reported p."""

    statistic: int
    heads: int
    expected: float
    bound: float
    p_monte_carlo: float | None
    permutations: int
    p_value: float

    def to_dict(self) -> dict:
        return {"statistic": self.statistic, "heads": self.heads, "null_mean": self.expected,
                "chatterjee_bound": self.bound, "p_monte_carlo": self.p_monte_carlo,
                "permutations": self.permutations, "p_value": self.p_value,
                "test": "heads of B that are the nearest head of some head of A in the same layer; null: B's heads "
                        "re-paired with positions by a uniformly random permutation"}


def lineage_test(distance: torch.Tensor, layer_a: torch.Tensor, layer_b: torch.Tensor, *,
                 permutations: int = PERMUTATIONS, seed: int = 0, nearest: torch.Tensor | None = None) -> LineageTest:
    """The test for a distance matrix [N_A, N_B] and each head's layer index (layer_a [N_A], layer_b [N_B]);
    ``nearest`` [N_A]: ``distance.argmin(dim=1)`` where the caller has it already."""
    n_a, n_b = distance.shape
    nn = distance.argmin(dim=1) if nearest is None else nearest       # [N_A] first minimum: deterministic
    n_layers = int(max(int(layer_a.max()), int(layer_b.max()))) + 1
    # hit[j, l] = 1 if some i in layer l of A has nn(i) = j; a[j, p] = hit[j, layer_B(p)]
    hit = torch.zeros(n_b, n_layers, dtype=torch.int64)
    hit[nn, layer_a] = 1
    x = int(hit[torch.arange(n_b), layer_b].sum())
    # sum_{j,p} a[j, p] = sum_{j,l} hit[j, l] #{p : layer_B(p) = l}: the same integer without a [N_B, N_B] matrix
    expected = float(int((hit * torch.bincount(layer_b, minlength=n_layers)).sum())) / n_b
    t = x - expected
    bound = 1.0 if t <= 0 else min(1.0, 2.0 * math.exp(-t * t / (4.0 * expected + 2.0 * t)))
    # p_MC >= 1 / (K + 1): when the bound is already smaller, min(bound, p_MC) is the bound
    p_mc = None if bound < 1.0 / (permutations + 1) else _monte_carlo(hit, layer_b, x, permutations, seed)
    p = min(1.0, 2.0 * (bound if p_mc is None else min(bound, p_mc)))
    return LineageTest(statistic=x, heads=n_a, expected=expected, bound=bound, p_monte_carlo=p_mc,
                       permutations=permutations, p_value=p)


def _monte_carlo(counts: torch.Tensor, layer_b: torch.Tensor, x: int, permutations: int, seed: int) -> float:
    """(1 + #{X(sigma_k) >= x}) / (K + 1) over K seeded uniform permutations of B's positions."""
    if permutations <= 0:
        return 1.0
    n_b = counts.shape[0]
    gen = torch.Generator().manual_seed(seed)
    rows = torch.arange(n_b)
    hits = 0
    chunk = max(1, min(permutations, 4_000_000 // max(1, n_b)))
    done = 0
    while done < permutations:
        k = min(chunk, permutations - done)
        sigma = torch.rand(k, n_b, generator=gen).argsort(dim=1)      # head j sits at position sigma[:, j]
        xs = counts[rows[None, :], layer_b[sigma]].sum(dim=1)
        hits += int((xs >= x).sum())
        done += k
    return (1 + hits) / (permutations + 1)
