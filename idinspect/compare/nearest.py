"""Distances from many models' heads to one model's heads, that model's side prepared once (``scan``).

:func:`.matching.distance_matrix` with ``exact=False`` computes, per kind k with rows a (heads of
A) and b (heads of B),

    num = sqrt(max(0, [-2a, ||a||^2, 1] . [b, 1, ||b||^2]))     (torch.cdist, use_mm_for_euclid_dist)
    d_k = clamp(num / sqrt(||a||^2 + ||b||^2), 0, 1)            (0 where both are zero, 1 where NaN)

and D = the mean of d_k over the kinds. :class:`Target` holds B's side of this ([b, 1, ||b||^2] and
||b||^2 per kind, float64) so that each entry of a scan pays for one matrix product [N_A, k + 2] x
[k + 2, N_B] and a few in-place passes over D [N_A, N_B], with the same operations in the same
order as ``distance_matrix``: the same float64 D, bit for bit (tests/compare/test_scan_matches_compare.py
checks it), hence the same nearest heads, lineage statistic and p-value, and the same similarity.
"""

from __future__ import annotations

import torch

from .invariants import LayerInvariants, head_vectors

_TINY = torch.finfo(torch.float64).tiny


class Target:
    """B's heads (``layers`` of one model) prepared for :meth:`distances` from any A of the same shape."""

    def __init__(self, layers: list[LayerInvariants]):
        self.shapes = [L.head_shape() for L in layers]
        self.planes = [L.planes is not None for L in layers]
        self.layer = torch.cat([torch.full((L.n_heads,), i) for i, L in enumerate(layers)])
        self.finite = bool(all(bool(L.finite.all()) for L in layers))
        self.side: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for kind, b in head_vectors(layers).items():
            b = b.to(torch.float64)
            norm = b.pow(2).sum(-1, keepdim=True)                                     # [N_B, 1]
            self.side[kind] = (torch.cat([b, torch.ones_like(norm), norm], -1).mT.contiguous(), (b * b).sum(1))

    def fits(self, layers: list[LayerInvariants]) -> bool:
        """Whether A's ``layers`` pair with B's one to one (same count, same (d_k, d_v, planes) per layer, RoPE
        planes in both or neither): then :meth:`distances` is ``distance_matrix`` over all layers of both."""
        return [L.head_shape() for L in layers] == self.shapes and \
            [L.planes is not None for L in layers] == self.planes

    def distances(self, layers: list[LayerInvariants]) -> torch.Tensor:
        """D [N_A, N_B] (float64) between A's heads (``layers``, :meth:`fits`) and B's."""
        x = head_vectors(layers)
        finite = self.finite and all(bool(L.finite.all()) for L in layers)
        total = None
        for kind, (b_side, b_norm) in self.side.items():
            a = x[kind].to(torch.float64)
            a_norm = a.pow(2).sum(-1, keepdim=True)                                    # [N_A, 1]
            num = torch.cat([a.mul(-2), a_norm, torch.ones_like(a_norm)], -1).matmul(b_side)
            num.clamp_min_(0).sqrt_()
            a_sq = (a * a).sum(1)
            den = (a_sq[:, None] + b_norm[None, :]).sqrt_()
            # min(den) = sqrt(min a_sq + min b_norm) (rounded sums and sqrt are monotone): without a pass over den
            if finite and float((a_sq.min() + b_norm.min()).sqrt()) >= _TINY:   # where, nan_to_num: no change
                d = num.div_(den).clamp_(0.0, 1.0)
            else:
                d = torch.where(den > 0, num / den.clamp_min(_TINY), torch.zeros_like(num))
                d = torch.nan_to_num(d.clamp(0.0, 1.0), nan=1.0)
            total = d if total is None else total.add_(d)
        return total.div_(len(self.side))
