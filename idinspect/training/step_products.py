"""The k x k products of a step between two bfloat16/float16 layers, per head or kv group.

For one head's (or group's) factor X [m, k] at A and at B, with dX = X_B - X_A, diff needs

    GA = X_A^T X_A,   GB = X_B^T X_B,   M = X_A^T dX,   D = dX^T dX

each accurate against its own size (D is ||dX||^2-sized, M ||X_A|| ||dX||-sized; forming D as
GB - ... would cancel). Both routes use only exact products of the stored numbers (a bf16 or fp16
product fits float32) summed in float32, on the CPU's matrix units through MKL
(:mod:`idinspect.numerics.low_precision_gemm`), several times faster than float32 arithmetic:

- **large steps**, tr D >= :data:`TAU` max(tr GA, tr GB) (two unrelated checkpoints): from GA, GB
  and C = X_A^T X_B alone, D = GA + GB - C - C^T and M = C - GA. A float32 sum of m products is off
  by at most gamma ||x|| ||y|| (gamma = sqrt(m) u_32, as :mod:`idinspect.numerics.precision`), so
  D is off by gamma (||X_A|| + ||X_B||)^2 <= (4 gamma / TAU) ||dX||^2, M by 2 gamma / sqrt(TAU) of
  max(||X_A||, ||X_B||) ||dX||.
- **small steps** (fine-tunes, training steps): dX, exact in float32, is split into three bf16
  pieces hi = bf16(dX), lo = bf16(dX - hi), lo2 = dX - hi - lo (exact: 3 x 8 bits hold float32's
  24); then M = X_A^T (hi + lo + lo2) and D = the products of the pieces but lo^T lo2, lo2^T lo and
  lo2^T lo2 (below 2^-23 of D), off by (gamma + 2^-23) of their sizes. The pieces are made one
  head at a time, in cache (a whole batch at once, 16-24 MB of temporaries per role at 1B width,
  took twice the CPU); a head whose dX is exactly zero (an unchanged head) has M = D = 0 and no products.

:attr:`StepProducts.gamma` is the invariant check's rounding unit
(:meth:`idinspect.forms.per_head.aligned.Alignment.errors` takes every Gram matrix X^T Y as off by at most
gamma ||X|| ||Y||, and :mod:`idinspect.forms.per_head.step_invariants` uses D and G2 = -(M^T + D) =
-dX^T X_B): for large steps gamma (||X_A|| + ||X_B||)^2 / ||dX||^2 (D's bound; G2 = C - GB there is
off by gamma ||X_B|| (||X_A|| + ||X_B||), within it), where pieces were used 3 (gamma + 2^-23)
(||dX|| <= ||X_B|| there, so G2's gamma ||dX|| (||X_A|| + ||dX||) <= 3 gamma ||dX|| ||X_B||).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..numerics import low_precision_gemm as lp
from ..numerics.precision import UNIT_ROUNDOFF_32

#: Relative step size (tr D / max(tr GA, tr GB)) from which the products of the stored factors
#: alone give D and M.
TAU = 0.25
#: What the products left out of D weigh against D (relative; see the module doc).
PIECE_ERROR = 2.0 ** -23


@dataclass
class StepProducts:
    """Per head or group [n, k, k] (float64): GA, GB, M, D of the module doc; ``gamma`` bounds their
    relative errors (see the module doc)."""

    GA: torch.Tensor
    GB: torch.Tensor
    M: torch.Tensor
    D: torch.Tensor
    gamma: float


def _trace(G: torch.Tensor) -> torch.Tensor:
    return G.diagonal(dim1=-2, dim2=-1).sum(-1)


def step_products(xa: torch.Tensor, xb: torch.Tensor) -> StepProducts | None:
    """GA, GB, M, D for the batches X_A, X_B [n, m, k] (same layout, bf16 or fp16 on the CPU), or
    None where the MKL route does not run (the caller takes its float32 route)."""
    products = lp.pair_products_low_precision(xa, xb)        # X_A^T X_A, X_A^T X_B, X_B^T X_B
    if products is None:
        return None
    GA, C, GB = (p.double() for p in products)
    D = GA + GB - C - C.transpose(-1, -2)
    M = C - GA
    ta, tb, td = _trace(GA), _trace(GB), _trace(D)
    small = td < TAU * torch.maximum(ta, tb)
    gamma = math.sqrt(xa.shape[1]) * UNIT_ROUNDOFF_32
    # large steps: D off by gamma (||X_A|| + ||X_B||)^2, relative to ||dX||^2 (at most 4 gamma / TAU)
    spread = ((ta.sqrt() + tb.sqrt()) ** 2 / td.clamp(min=torch.finfo(td.dtype).tiny))[~small]
    bound = 2 * gamma if spread.numel() == 0 else max(2 * gamma, gamma * float(spread.max()))
    for h in small.nonzero().flatten().tolist():
        M[h], D[h] = _small_step(xa[h], xb[h])
        bound = max(bound, 3 * (gamma + PIECE_ERROR))
    return StepProducts(GA, GB, M, D, bound)


def _small_step(xa: torch.Tensor, xb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, D) [k, k] float64 of one factor X [m, k] from the three-piece split of dX (module doc)."""
    m, k = xa.shape
    column_major = xa.stride(0) == 1 and xa.stride(1) >= m
    dx = torch.empty_strided((m, k), (1, m) if column_major else (k, 1), dtype=torch.float32)
    dx.copy_(xb).sub_(xa)                                 # exact: a float32 difference of two bf16 numbers
    if not bool(dx.any()):                                # an unchanged head: M and D are exactly zero
        zero = torch.zeros(k, k, dtype=torch.float64)
        return zero, zero.clone()
    pieces = (torch.empty(3 * k, m, dtype=xa.dtype).t() if column_major
              else torch.empty(m, 3 * k, dtype=xa.dtype))  # [hi lo lo2], [m, 3k] in xa's orientation
    hi, lo, lo2 = pieces[:, :k], pieces[:, k:2 * k], pieces[:, 2 * k:]
    hi.copy_(dx)
    lo.copy_(dx.sub_(hi))
    lo2.copy_(dx.sub_(lo))
    Mp = lp.products_low_precision(xa[None], pieces[None])[0].double()          # X_A^T [hi lo lo2]
    Hp = lp.products_low_precision(hi[None], pieces[None])[0].double()          # hi^T [hi lo lo2]
    ll = lp.products_low_precision(lo[None], lo[None])[0].double()
    hl, h2 = Hp[:, k:2 * k], Hp[:, 2 * k:]
    return Mp[:, :k] + Mp[:, k:2 * k] + Mp[:, 2 * k:], Hp[:, :k] + hl + hl.T + h2 + h2.T + ll
