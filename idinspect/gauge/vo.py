"""Step 4 of the balanced gauge: the VO form per kv group.

V~ [G, d (+1), d_v] (bias row only while b_V is live) and O~^T [G, r d, d_v]: thin SVD
V~ O~ = U S W^T, then V~ = U S^1/2, O~ = S^1/2 W^T, signs so each row of O~ (column of O~^T) has
its largest-magnitude entry positive. Any B in GL(d_v) (V~ B, B^-1 O~) gives the same result.
"""

from __future__ import annotations

import torch

from .linalg import balanced_factors
from .signs import fix_column_signs


def balance_vo(V: torch.Tensor, O_T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Balanced (V~, O~^T, S) for V [G, m, d_v], O_T [G, r d, d_v]; S [G, d_v] descending."""
    V2, OT2, s = balanced_factors(V, O_T)
    V2, OT2 = fix_column_signs(V2, OT2)
    return V2, OT2, s
