"""Step 5 of the balanced gauge: deterministic signs and half-turns.

The balanced SVD leaves each column pair (query column, key column) determined up to a common
sign, and each rotary plane up to a half-turn (rotation by pi, i.e. negating both columns). The
choice: the largest-magnitude entry of the key-side column (K~; K_p's first column for a plane)
or of the output-side row (O~) is positive, ties to the lowest index.
"""

from __future__ import annotations

import torch

from .linalg import key_side_signs


def leading_signs(Xt: torch.Tensor, n_groups: int, row: torch.Tensor | None = None) -> torch.Tensor:
    """±1 [G, k]: the sign of the largest-magnitude entry of each column of each group's stack.

    Xt [G r, k, m] holds r blocks per group, each transposed (block b of group g is
    X^{g r + b} [m, k]); the stack is X~_g = [X^{g r}; ...; X^{g r + r - 1}; row_g] with the optional
    extra row [G, k] last. Ties go to the lowest stacked row (first block, then first row within
    it); an all-zero column gets +1.

    Two reductions without temporaries (max and min of each row of Xt) decide every column but
    those where +a and -a are both a row's largest magnitude; only those rows are searched for
    the first one.
    """
    N, k, _ = Xt.shape
    r = N // n_groups
    hi, lo = Xt.amax(dim=-1), Xt.amin(dim=-1)                                # [N, k]
    top = torch.maximum(hi, -lo)
    lead = torch.where(hi >= -lo, hi, lo)
    tie = (hi == -lo) & (hi > 0)
    if bool(tie.any()):                                                      # the first of +a, -a decides
        n, c = tie.nonzero(as_tuple=True)
        rows = Xt[n, c]                                                      # [ties, m]
        lead[n, c] = rows.gather(-1, rows.abs().argmax(dim=-1, keepdim=True)).squeeze(-1)
    top, lead = top.reshape(n_groups, r, k), lead.reshape(n_groups, r, k)
    block = top.argmax(dim=1, keepdim=True)                                  # first block attaining it
    top, lead = top.gather(1, block).squeeze(1), lead.gather(1, block).squeeze(1)
    if row is not None:                                                      # last: wins only if larger
        lead = torch.where(row.abs() > top, row, lead)
    return torch.where(lead < 0, -torch.ones_like(lead), torch.ones_like(lead))


def fix_column_signs(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip column pairs of A [..., m, k] and B [..., n, k] so each column of B leads positive."""
    s = key_side_signs(B)[..., None, :]
    return A * s, B * s


def fix_half_turns(Qp: torch.Tensor, Kp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate planes Qp [..., m, 2], Kp [..., n, 2] by pi where K_p's first column leads negative."""
    s = key_side_signs(Kp[..., :1])[..., None, :]
    return Qp * s, Kp * s
