"""The fast route to the balanced form: k x k Gram matrices -> k x k transforms -> one matmul per factor.

Every step of the recipe in docs/mathematics.md ("The gauge-fixed form") depends on the factors
only through their k x k Gram matrices, except the signs (step 5), which need the key-side and
output-side factors after the transform. So per layer (k = d_k or d_v):

1. Gram matrices, one batched matmul each: G_Q = Q~_g^T Q~_g (summed over the group's heads),
   G_K = K~_g^T K~_g, G_V = V~_g^T V~_g, G_O = O~_g O~_g^T;
2. per group, block-diagonal k x k transforms: on the unrotated dims T_Q, T_K from the Cholesky
   factors and the core SVD (:func:`~idinspect.gauge.linalg.balancing_transforms`); on each rotary
   plane the 2 x 2 scale-and-rotation (:func:`~idinspect.gauge.planes.plane_transforms`); T_V, T_O
   likewise for VO;
3. apply: K~ T_K and O~^T T_O first, read off the signs (which fold into T_Q, T_V), then Q~ T_Q
   and V~ T_V.

Cost O(d k^2) per group in a handful of batched matmuls over all heads and planes at once. The
factors are handled transposed (W_Q^T [H, d_k, d] is the checkpoint's own row layout) and W_O
keeps its input's memory layout, so the results come out in the layout the adapters write,
without a copy. Returns None where a Gram
matrix is too ill-conditioned for this route; the caller then takes the reference route
(:mod:`.reference_route`, thin QR of the stacked factors, the recipe read step by step).
"""

from __future__ import annotations

import torch

from ...gauge.linalg import balancing_transforms, blocks, gram, put_blocks
from ...gauge.planes import plane_transforms
from ...gauge.signs import leading_signs
from ...layer.attention_layer import AttentionLayer
from ...layer.buffers import Float64Buffers
from .balanced import Balanced
from .structure import unrotated_columns


def balance_fast(L: AttentionLayer, v_live: bool, workspace: Float64Buffers | None = None,
                 apply_dtype: torch.dtype = torch.float64) -> Balanced | None:
    """Steps 2-5 on a float64 layer whose biases are already fixed (step 1); None if ill-conditioned.

    With a ``workspace`` the transformed W_Q and W_O are written into its buffers. The Gram
    matrices, transforms and biases are float64 always; ``apply_dtype`` is the dtype of the four
    factor-sized products X T (step 3) and so of the returned weights: float64, or float32 for a
    caller that rounds them to bfloat16/float16 (:func:`apply_precision`).
    """
    H, G, r, k, dv = L.n_heads, L.n_kv_heads, L.group_size, L.d_k, L.d_v
    kv = torch.arange(H) // r
    b_V = L.b_V if v_live else None
    Qt, Kt, Vt = L.W_Q.transpose(1, 2), L.W_K.transpose(1, 2), L.W_V.transpose(1, 2)   # [n, width, d]

    Go_h = gram(L.W_O)                                            # [H, d_v, d_v] per head
    Tv, To, s_vo, ok = balancing_transforms(gram(Vt, b_V), Go_h.reshape(G, r, dv, dv).sum(1))
    if not bool(ok.all()):
        return None
    Gq_h = gram(Qt, L.b_Q)                                        # [H, k, k] per head
    Gq = Gq_h.reshape(G, r, k, k).sum(1)                          # [G, k, k]
    Gk = gram(Kt, L.b_K)
    Tq, Tk = Gq.new_zeros(G, k, k), Gq.new_zeros(G, k, k)
    s_qk = principal = dead = planes = None
    cols = unrotated_columns(L)
    if len(cols):
        U = torch.tensor(list(cols))[None]                        # one block [1, n_U]
        tq, tk, s_qk, ok = balancing_transforms(blocks(Gq, U)[:, 0], blocks(Gk, U)[:, 0])
        if not bool(ok.all()):
            return None
        put_blocks(Tq, U, tq[:, None])
        put_blocks(Tk, U, tk[:, None])
    if L.positional.kind == "rope":
        planes = torch.tensor(L.positional.rotary.plane_columns())  # [P, 2]
        tq, tk, principal, dead = plane_transforms(blocks(Gq, planes), blocks(Gk, planes))
        put_blocks(Tq, planes, tq)
        put_blocks(Tk, planes, tk)

    # key side first: its leading signs fix each column pair, and each plane's half-turn
    Lw = L if apply_dtype == torch.float64 else L.replace(**{   # the factors in apply_dtype, converted once
        role: _buffer(workspace, f"{apply_dtype} input {role}", getattr(L, role), apply_dtype).copy_(getattr(L, role))
        for role in ("W_Q", "W_K", "W_V", "W_O")})                # (exact for stored bf16/fp16 values)
    Qw, Kw, Vw = Lw.W_Q.transpose(1, 2), Lw.W_K.transpose(1, 2), Lw.W_V.transpose(1, 2)
    cast = lambda T: T.to(apply_dtype)  # noqa: E731 - the k x k transforms, rounded once for the products
    Kt2 = cast(Tk.transpose(1, 2)) @ Kw                           # [G, k, d]
    b_K2 = None if L.b_K is None else (L.b_K[:, None, :] @ Tk)[:, 0]
    s = leading_signs(Kt2, G, b_K2).to(torch.float64)             # [G, k]
    if planes is not None:
        s[:, planes[:, 1]] = s[:, planes[:, 0]]                   # K_p's first column decides the plane
    Kt2 *= s[:, :, None].to(apply_dtype)
    b_K2 = None if b_K2 is None else b_K2 * s
    Tq = Tq * s[:, None, :]
    Qt2 = _buffer(workspace, "balanced W_Q^T", Qw, apply_dtype)
    torch.bmm(cast(Tq[kv].transpose(1, 2)), Qw, out=Qt2)          # [H, k, d]
    b_Q2 = None if L.b_Q is None else (L.b_Q[:, None, :] @ Tq[kv])[:, 0]

    # output side first: its leading signs fix each VO column pair
    O2 = _buffer(workspace, "balanced W_O", Lw.W_O, apply_dtype)  # the input's layout
    torch.bmm(cast(To[kv].transpose(1, 2)), Lw.W_O, out=O2)
    so = leading_signs(O2, G).to(torch.float64)                   # [G, d_v]
    O2 *= so[kv][:, :, None].to(apply_dtype)
    Tv = Tv * so[:, None, :]
    Vt2 = cast(Tv.transpose(1, 2)) @ Vw                           # [G, d_v, d]
    b_V2 = None if b_V is None else (b_V[:, None, :] @ Tv)[:, 0]
    return Balanced(W_Q=Qt2.transpose(1, 2), b_Q=b_Q2, W_K=Kt2.transpose(1, 2), b_K=b_K2,
                    W_V=Vt2.transpose(1, 2), b_V=b_V2, W_O=O2, s_qk=s_qk, principal=principal, dead=dead,
                    s_vo=s_vo, head_grams=(Gq_h, Go_h))


def _buffer(workspace: Float64Buffers | None, key: str, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised ``dtype`` tensor of ``like``'s shape and memory layout: the workspace's reused
    buffer under ``key`` where there is one, else a new tensor."""
    if workspace is None:
        return torch.empty_strided(tuple(like.shape), like.stride(), dtype=dtype, device=like.device)
    return workspace.empty(key, tuple(like.shape), like.stride(), like.device, dtype)


def apply_precision(*dtypes: torch.dtype) -> torch.dtype:
    """The dtype :func:`balance_fast` applies the transforms in for a layer whose factors are stored and
    written in ``dtypes``: float32 where every one is bfloat16/float16, else float64.

    Justification: with the k x k transforms T computed in float64 and rounded once to float32,
    each entry of X T is a k-term float32 dot product of exact inputs (a stored bfloat16/float16
    value is exact in float32), off by at most ~(k + 1) u_32 (sum_j |x_j| |T_j|) (u_32 = 2^-24;
    k = 64: ~4e-6 relative, 1e-7 typical) from the float64 product, against the output's own
    rounding of u = 2^-8 (bfloat16) or 2^-11 (float16) relative. The written value can differ
    from the float64 route's only where the float64 product lies that close to a rounding boundary
    (a one-unit change in about one entry of 10^4), and the invariant check measures the written
    values against the stored ones either way.
    """
    from ...numerics.precision import LOW_PRECISION

    return torch.float32 if dtypes and all(d in LOW_PRECISION for d in dtypes) else torch.float64
