"""Step 5 of the balanced gauge: deterministic signs and half-turns.

The balanced SVD leaves each column pair (query column, key column) determined up to a common
sign, and each rotary plane up to a half-turn (rotation by pi, i.e. negating both columns). The
choice: the largest-magnitude entry of the key-side column (K~; K_p's first column for a plane)
or of the output-side row (O~) is positive, ties to the lowest index.
"""

from __future__ import annotations

import torch

from .linalg import key_side_signs


def fix_column_signs(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip column pairs of A [..., m, k] and B [..., n, k] so each column of B leads positive."""
    s = key_side_signs(B)[..., None, :]
    return A * s, B * s


def fix_half_turns(Qp: torch.Tensor, Kp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate planes Qp [..., m, 2], Kp [..., n, 2] by pi where K_p's first column leads negative."""
    s = key_side_signs(Kp[..., :1])[..., None, :]
    return Qp * s, Kp * s
