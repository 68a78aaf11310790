"""What canonicalisation reports: where the gauge-fixed form is not unique, and what it changed.

The balanced form is unique when the singular values of each group's QK and VO products are
distinct and each rotary plane's two principal values differ. Where two are closer than a
relative ``NONUNIQUE_RTOL`` (1e-6), the columns of the affected pair can rotate into each other
without changing any invariant: the report names layer, block, group, heads, the pair (or plane)
and the relative gap (s_i - s_{i+1}) / s_i.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

#: Singular values (or plane principal values) closer than this relative gap make the form non-unique.
NONUNIQUE_RTOL = 1e-6
#: Values below this fraction of the largest are numerically zero: their columns vanish, which is unique.
ZERO_RTOL = 1e-12


@dataclass(frozen=True)
class Degeneracy:
    """A place where the gauge-fixed form is not unique.

    ``block`` is ``"qk"`` (unrotated QK dims; ``index`` = column i, tied with i + 1), ``"plane"``
    (rotary plane ``index``: its two principal values tie) or ``"vo"`` (column/row i with i + 1).
    """

    layer: int
    block: str
    group: int
    heads: tuple[int, ...]
    index: int
    relative_gap: float

    def describe(self) -> str:
        what = f"plane {self.index}" if self.block == "plane" else f"singular values {self.index} and {self.index + 1}"
        heads = ",".join(str(h) for h in self.heads)
        return (f"layer {self.layer} {self.block.upper()} group {self.group} (heads {heads}): {what} "
                f"agree to a relative {self.relative_gap:.1e}; the form is not unique there")


@dataclass
class GaugeReport:
    """One layer's canonicalisation: non-uniqueness plus what the bias step did."""

    layer: int
    degeneracies: list[Degeneracy] = field(default_factory=list)
    zeroed_key_bias_dims: int = 0
    folded_value_bias: bool = False
    dead_planes: list[tuple[int, int]] = field(default_factory=list)  # (group, plane) with a zero factor
    #: The input's per-head Gram matrices the fast route computed, Q~^hT Q~^h [H, d_k, d_k] (bias row
    #: included) and W_O^h W_O^hT [H, d_v, d_v] (float64), for ``invariant_errors(..., grams_a=...)``;
    #: None after the reference route. Not part of :meth:`to_dict`.
    head_grams: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False, compare=False)

    @property
    def unique(self) -> bool:
        return not self.degeneracies

    def to_dict(self) -> dict:
        return {"layer": self.layer, "unique": self.unique,
                "degeneracies": [asdict(d) | {"heads": list(d.heads)} for d in self.degeneracies],
                "zeroed_key_bias_dims": self.zeroed_key_bias_dims, "folded_value_bias": self.folded_value_bias,
                "dead_planes": [list(p) for p in self.dead_planes]}


def close_pairs(values: torch.Tensor, rtol: float = NONUNIQUE_RTOL) -> list[tuple[int, int, float]]:
    """(row, i, gap) for descending ``values`` [rows, k] where (v_i - v_{i+1}) / v_i < rtol.

    Pairs from the first numerically zero value on (at most ``ZERO_RTOL`` of the row's largest)
    are skipped: their columns are zero, which is unique. Vectorised: one pass over [rows, k - 1].
    """
    v = values.to(torch.float64)
    if v.shape[-1] < 2:
        return []
    top = v[:, :1]
    a, b = v[:, :-1], v[:, 1:]
    live = torch.cumprod(((a > ZERO_RTOL * top) & (top != 0)).to(torch.int8), dim=1).bool()
    gap = (a - b) / torch.where(live, a, torch.ones_like(a))
    rows, cols = torch.nonzero(live & (gap < rtol), as_tuple=True)
    return [(int(i), int(j), float(g)) for i, j, g in zip(rows.tolist(), cols.tolist(), gap[rows, cols].tolist())]


def group_heads(group: int, group_size: int) -> tuple[int, ...]:
    """Query heads h with h // r == group."""
    return tuple(range(group * group_size, (group + 1) * group_size))
