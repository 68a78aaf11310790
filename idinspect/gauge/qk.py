"""Step 2 of the balanced gauge: the QK form on the unrotated head dims, per kv group.

With Q~ [G, r (d+1), n] the group's stacked bias-augmented query columns and K~ [G, d, n] the key
columns (n = the unrotated dims: all of d_k without RoPE; the no-op key bias is already zero
there, so it carries no row): thin SVD Q~ K~^T = U S V^T, then Q~ = U S^1/2, K~ = V S^1/2 with
column signs fixed by step 5. This uses every element of GL(n) once: (Q~ A) (K~ A^-T)^T = Q~ K~^T.
"""

from __future__ import annotations

import torch

from .linalg import balanced_factors
from .signs import fix_column_signs


def balance_qk(Q_stack: torch.Tensor, K: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Balanced (Q~, K~, S) for Q_stack [G, r m, n], K [G, d, n]; S [G, n] descending."""
    Q2, K2, s = balanced_factors(Q_stack, K)
    Q2, K2 = fix_column_signs(Q2, K2)
    return Q2, K2, s
