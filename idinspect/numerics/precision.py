"""Precision that follows the data: when a float32 Gram matrix is as good as a float64 one.

A weight stored in bfloat16 or float16 is known to its unit roundoff u_s (2^-8 and 2^-11):
rounding it to the stored dtype moved each entry by up to u_s |W_ij|, which moves the R factor of
W = Q R by about cond(W) u_s relative to ||R|| (first order). The Gram matrix W^T W accumulated
in float32 (exact products: a bfloat16 or float16 product fits float32's 24 bits) carries an
error ||dG|| <= gamma_32 ||W||^2 with gamma_32 = sqrt(m) u_32 for m-term sums (the probabilistic
bound of Higham & Mary, SIAM J. Sci. Comput. 41 (2019); blocked BLAS summation does better), and
moves the Cholesky factor by about cond(W)^2 gamma_32. So the float32 Gram adds no more error than
the storage already put there while

    cond(W) <= u_s / (gamma_32(m) + k u_32)            (:func:`float32_condition_limit`; the k u_32
                                                        is the float32 Cholesky factorisation's own)

about 340 for bfloat16 at m = 4096, k = 128 (Llama-3.1-8B), 300 at m = 8192 (70B), 430 at
m = 3072, k = 96 (Phi-3-mini); 43 and 37 for float16 at the Llama shapes. The analyzer takes the float32 Gram for a head only when the head's certified bound on
cond(W) is below that limit (and below :data:`idinspect.forms.per_head.spectra.MAX_FACTOR_CONDITION`);
every other head, every float32/float64 weight, and the proofs take the float64 routes. The rank
rule (float64 eps) is unchanged: a head taken in float32 has cond(W) <= ~1e3, far from any rank
cut, so no rank, count or finding depends on the route.
"""

from __future__ import annotations

import math

import torch

#: Stored dtypes whose Gram matrices may be accumulated in float32.
LOW_PRECISION = (torch.bfloat16, torch.float16)

UNIT_ROUNDOFF_32 = torch.finfo(torch.float32).eps / 2


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = eps / 2 of a floating dtype (2^-8 for bfloat16, 2^-11 for float16, 2^-24 for float32)."""
    return torch.finfo(dtype).eps / 2


def gamma_float32(m: int) -> float:
    """Relative error bound sqrt(m) u_32 of an m-term float32 dot product (probabilistic)."""
    return math.sqrt(max(1, m)) * UNIT_ROUNDOFF_32


def float32_condition_limit(dtype: torch.dtype, m: int, k: int = 0) -> float:
    """cond(W) up to which a float32 Gram of W [m, k] stored in ``dtype``, and its Cholesky factor
    in float32, are as exact as the data: u_s / (gamma_32(m) + k u_32) (the Cholesky factorisation
    of a k x k matrix adds a backward error ~k u_32, Higham, Accuracy and Stability, thm 10.3);
    0 for dtypes that keep the float64 routes."""
    if dtype not in LOW_PRECISION:
        return 0.0
    return unit_roundoff(dtype) / (gamma_float32(m) + k * UNIT_ROUNDOFF_32)


def float32_gram_allowed(t: torch.Tensor) -> bool:
    """Whether ``t``'s Gram matrices may start in float32: a bfloat16/float16 tensor, and on a GPU
    only while TF32 matmuls are off (TF32 keeps 10 mantissa bits, not float32's 23)."""
    if t.dtype not in LOW_PRECISION:
        return False
    return t.device.type == "cpu" or not torch.backends.cuda.matmul.allow_tf32


def comparison_precision(*dtypes: torch.dtype) -> torch.dtype:
    """float32 where every layer compared is stored in bfloat16/float16 (a difference of two such
    weights is exact in float32 but for exponent gaps past 2^16, and the changes they can show are
    ~u_s, far above float32's rounding), else float64."""
    return torch.float32 if dtypes and all(d in LOW_PRECISION for d in dtypes) else torch.float64
