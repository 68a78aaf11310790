"""Distances between heads' invariants and optimal assignment of heads within a layer.

Distance between head a of one model and head b of another, per invariant kind k (``qk``,
``ov``, ``planes``) with descending singular values x_k, y_k:

    d_k(a, b) = ||x_k - y_k||_2 / sqrt(||x_k||^2 + ||y_k||^2)   in [0, 1] (0 when both are zero)

(nonnegative vectors: ||x - y||^2 <= ||x||^2 + ||y||^2), and d(a, b) = the mean over kinds.
The similarity of two heads is 1 - d: 1 for equal invariants, scale-free, comparable across
layers and models. Heads are matched within a layer by the assignment of least total distance
(:func:`assignment`, the Hungarian method with potentials, O(n^2 m)).
"""

from __future__ import annotations

import numpy as np
import torch


#: Rows of A's heads whose distances are formed at a time by :func:`distance_matrix`: its temporaries
#: (the norms' sums, the quotient, the clamp) are [ROW_BLOCK, N_B], not [N_A, N_B] each.
ROW_BLOCK = 256


def distance_matrix(x: dict[str, torch.Tensor], y: dict[str, torch.Tensor], exact: bool = True) -> torch.Tensor:
    """d [N_x, N_y] between the heads of two models (kinds present in both; float64).

    ``exact=False`` forms ||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b with one matrix product (fast for
    thousands of heads; absolute error ~1e-8 of the norms from cancellation), enough to find
    nearest heads; per-layer blocks for matching and similarity use the exact differences.
    Formed :data:`ROW_BLOCK` rows at a time into the result: for two 70B-shaped models' 5120 x 5120
    heads (three kinds) the peak grows by 291 MiB, the result's 200 MiB included, where whole each of
    the half-dozen temporaries took another 200 MiB (+1477 MiB); every entry is computed by the same
    operations, bit for bit."""
    kinds = [k for k in x if k in y and x[k].shape[1] == y[k].shape[1]]
    n_x = x[kinds[0]].shape[0]
    total = torch.zeros(n_x, y[kinds[0]].shape[0], dtype=torch.float64)
    mode = "donot_use_mm_for_euclid_dist" if exact else "use_mm_for_euclid_dist"
    for k in kinds:
        a, b = x[k].to(torch.float64), y[k].to(torch.float64)
        a_sq, b_sq = (a * a).sum(1), (b * b).sum(1)
        if not exact:     # cdist's own product form, [-2a, ||a||^2, 1] . [b, 1, ||b||^2] (its temporaries are N_B wide)
            a_side = torch.cat([a.mul(-2), a.pow(2).sum(-1, keepdim=True), torch.ones_like(a_sq)[:, None]], -1)
            b_side = torch.cat([b, torch.ones_like(b_sq)[:, None], b.pow(2).sum(-1, keepdim=True)], -1).mT.contiguous()
        for r in range(0, n_x, ROW_BLOCK):
            rows = slice(r, r + ROW_BLOCK)
            num = (torch.cdist(a[rows], b, compute_mode=mode) if exact
                   else a_side[rows].matmul(b_side).clamp_min_(0).sqrt_())
            den = torch.sqrt(a_sq[rows, None] + b_sq[None, :])
            d = torch.where(den > 0, num / den.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(num))
            total[rows] += torch.nan_to_num(d.clamp(0.0, 1.0), nan=1.0)
    return total.div_(len(kinds))


def assignment(cost: np.ndarray) -> np.ndarray:
    """Least-total-cost assignment for a cost matrix [n, m] with n <= m: column of each row [n].

    The Hungarian method with row/column potentials (shortest augmenting paths), vectorised over
    columns; exact for finite costs. For n > m, pass the transpose and invert.
    """
    cost = np.asarray(cost, dtype=np.float64)
    n, m = cost.shape
    if n > m:
        raise ValueError("assignment needs rows <= columns")
    INF = np.inf
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    p = np.zeros(m + 1, dtype=np.int64)        # p[j]: row (1-based) assigned to column j; column 0 is virtual
    way = np.zeros(m + 1, dtype=np.int64)
    C = np.zeros((n + 1, m + 1))
    C[1:, 1:] = cost
    for i in range(1, n + 1):
        p[0] = i
        j0 = 0
        minv = np.full(m + 1, INF)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = p[j0]
            free = ~used
            free[0] = False
            cur = C[i0] - u[i0] - v
            better = free & (cur < minv)
            minv[better] = cur[better]
            way[better] = j0
            cand = np.where(free, minv, INF)
            j1 = int(np.argmin(cand))
            delta = cand[j1]
            u[p[used]] += delta
            v[used] -= delta
            minv[free] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while True:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
            if j0 == 0:
                break
    out = np.full(n, -1, dtype=np.int64)
    for j in range(1, m + 1):
        if p[j]:
            out[p[j] - 1] = j - 1
    return out


def match(cost: torch.Tensor) -> list[tuple[int, int]]:
    """Pairs (row, column) of the least-cost assignment of a [n, m] cost matrix (min(n, m) pairs)."""
    c = cost.numpy()
    if c.shape[0] <= c.shape[1]:
        cols = assignment(c)
        return [(i, int(j)) for i, j in enumerate(cols)]
    rows = assignment(c.T)
    return sorted((int(i), j) for j, i in enumerate(rows))
