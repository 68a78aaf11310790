"""Singular values of each head's bilinear forms, without ever forming a d x d matrix.

    W_QK^h = W_Q^h W_K^g(h)T        W_OV^h = W_V^g(h) W_O^h          (both d x d, rank <= d_k)

With W_Q^h = Q_1 R_Q^h and W_K^g = Q_2 R_K^g (Q orthonormal columns, R [d_k, d_k]),
W_QK^h = Q_1 (R_Q^h R_K^gT) Q_2^T and its singular values are those of the small core
R_Q^h R_K^gT. Likewise W_OV^h = Q_3 (R_V^g R_O^hT) Q_4^T with W_O^hT = Q_4 R_O^h. R comes by one
of two routes (:func:`_r_factor`): the fast route, the Cholesky factor of the Gram matrix W^T W,
for well-conditioned factors; the reference route, a thin Householder QR, for the others. Cost
O(d d_k^2) per head, batched over heads and groups, Q never formed.

RoPE: plane p of head h pairs columns (a_p, b_p); the plane's form Q_p K_p^T (Q_p = W_Q^h[:, (a_p, b_p)])
is invariant under the plane's gauge (scale times rotation) and has two singular values, again
from the 2 x 2 core of the QR factors.

Numerical rank: the number of singular values s_i > rtol * s_max with
rtol = max(d, d_k) * eps(float64) (:func:`rank_rtol`), computed from the stored values cast to
float64. The condition number is s_max / s_min over the d_k values (``None`` when s_min is 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...layer.attention_layer import AttentionLayer
from ...layer.buffers import Float64Buffers
from ...numerics import precision
from ...numerics.cholesky import cholesky_upper
from ...numerics.low_precision_gemm import gram_low_precision
from ...numerics.parallel import SplitLayer

RANK_RULE = "s_i > max(d, d_k) * eps(float64) * s_max"


def rank_rtol(d: int, d_k: int) -> float:
    """Relative cut of the numerical rank: max(d, d_k) * eps(float64)."""
    return max(d, d_k) * torch.finfo(torch.float64).eps


@dataclass
class HeadSpectra:
    """Per-head singular values (descending) and the masks of heads that could be computed.

    ``qk`` [H, d_k], ``ov`` [H, d_v], ``qk_planes`` [H, planes, 2] or None without RoPE;
    ``qk_ok`` / ``ov_ok`` [H] are False where a factor held NaN/Inf (values there are meaningless).
    """

    qk: torch.Tensor
    ov: torch.Tensor
    qk_planes: torch.Tensor | None
    qk_ok: torch.Tensor
    ov_ok: torch.Tensor
    rtol: float
    #: R factors of the thin QR (on the compute device): R_Q [H, d_k, d_k], R_K [G, d_k, d_k],
    #: R_V [G, d_v, d_v], R_O [H, d_v, d_v] (of W_O^hT), reused by :mod:`degeneracy`.
    factors: dict | None = None
    #: Role -> [n] bool, slice i of that tensor free of NaN/Inf (as :func:`layer_finite` gives).
    finite: dict | None = None
    #: Factor name ("R_Q", ...) -> [n] bool (CPU): cond(W) certified below the fast route's limit, so
    #: that factor has full column rank (see :func:`_r_factor`).
    certified: dict | None = None

    def ranks(self, values: torch.Tensor) -> torch.Tensor:
        """Numerical rank per head of a [H, k] block of singular values."""
        smax = values[:, :1]
        return (values > self.rtol * smax).sum(dim=1)

    @property
    def qk_rank(self) -> torch.Tensor:
        return self.ranks(self.qk)

    @property
    def ov_rank(self) -> torch.Tensor:
        return self.ranks(self.ov)


#: The fast route (Cholesky of the Gram matrix) gives a factor's R only when the factor's own
#: condition number cond(W) is certainly below this: then R is accurate to ~cond(W)^2 eps ||R|| <=
#: 1e-10 ||R||. Worse-conditioned (and rank-deficient) factors take the reference route, a
#: Householder QR, accurate to ~eps ||R||. (A bound on cond(W), not on cond(W^T W) = cond(W)^2 as
#: the gauge's :data:`idinspect.gauge.linalg.MAX_GRAM_CONDITION` is.)
MAX_FACTOR_CONDITION = 1e3


#: Float64 bytes cast at a time for a Gram matrix on the CPU. The chunk is still in the core's
#: cache when its matmul reads it, and no float64 copy of a whole weight exists (Llama-1B W_Q,
#: 2-core Xeon: cast + Gram 7.2 ms per chunk of one head, 8.6 ms casting the whole tensor first).
CAST_CHUNK_BYTES = 2**20


def gram_float64(tall: torch.Tensor, scratch: Float64Buffers | None = None,
                 row_scale: torch.Tensor | None = None, accumulate: torch.dtype = torch.float64,
                 widen: bool = True) -> torch.Tensor:
    """W^T W [n, k, k] in float64 for W [n, m, k] of any float dtype.

    Float64 input is multiplied as it is; on a GPU the whole tensor is cast at once; on the CPU a
    few heads (:data:`CAST_CHUNK_BYTES`) are cast into ``scratch`` and multiplied while in cache.
    ``row_scale`` [m] (float64): the Gram matrix of diag(row_scale) W instead, scaled in the
    float64 chunk (e.g. a norm gain folded into the projection, with no scaled copy of W).
    ``accumulate=torch.float32``: cast and multiply in float32 and return the result widened to
    float64 (for bfloat16/float16 weights, :mod:`.precision`), or in float32 with ``widen=False``;
    bfloat16/float16 weights go to MKL's mixed-precision gemm where it applies
    (:mod:`.low_precision_gemm`: same float32 sums, no cast).
    """
    to = torch.float64 if widen else accumulate
    acc = accumulate
    if row_scale is not None and tall.dtype == acc:
        tall = tall * row_scale.to(acc)[:, None]
    if tall.dtype == acc:
        return (tall.transpose(-1, -2) @ tall).to(to)
    if tall.device.type != "cpu":
        wide = tall.to(acc)
        if row_scale is not None:
            wide.mul_(row_scale.to(acc)[:, None])
        return (wide.transpose(-1, -2) @ wide).to(to)
    if acc == torch.float32 and row_scale is None:
        fast = gram_low_precision(tall)          # bf16/fp16 on the CPU's matrix units, float32 sums
        if fast is not None:
            return fast.to(to)
    n, m, k = tall.shape
    size = torch.finfo(acc).bits // 8
    per = int(max(1, min(n, CAST_CHUNK_BYTES // max(1, size * m * k))))
    column_major = tall.stride(-2) < tall.stride(-1)           # copy in the source's memory order
    strides = (m * k, 1, m) if column_major else (m * k, k, 1)
    buf = (scratch or Float64Buffers()).empty(("cast", per, m, k, column_major, acc), (per, m, k), strides,
                                              tall.device, acc)
    scale = None if row_scale is None else row_scale.to(acc)[:, None]
    out = torch.empty((n, k, k), dtype=acc, device=tall.device)
    for h in range(0, n, per):
        chunk = buf[:min(per, n - h)]
        chunk.copy_(tall[h:h + per])
        if scale is not None:
            chunk.mul_(scale)
        torch.matmul(chunk.transpose(-1, -2), chunk, out=out[h:h + per])
    return out.to(to)


def _cholesky_route(gram: torch.Tensor, limit: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R, usable, ok) from a Gram batch: R = chol(G) upper where ``ok`` (finite, positive
    definite, certified cond(W) <= ||R||_F ||R^-1||_F < ``limit``), the identity elsewhere;
    ``usable``: the Gram matrix is finite."""
    usable = finite_slices(gram)
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    if not bool(usable.all()):
        gram = torch.where(usable[..., None, None], gram, eye)
    R, info = cholesky_upper(gram)
    ok = usable & (info == 0)
    if not bool(ok.all()):
        R = torch.where(ok[..., None, None], R, eye)
    R_inv = torch.linalg.solve_triangular(R, eye.expand_as(R), upper=True)
    bound = torch.linalg.vector_norm(R, dim=(-2, -1)) * torch.linalg.vector_norm(R_inv, dim=(-2, -1))
    return R, usable, ok & (bound < limit)


def _r_factor(tall: torch.Tensor, scratch: Float64Buffers | None = None,
              row_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R [..., k, k] float64, finite [...], certified [...]): W = Q R with Q orthonormal for a batch
    W [n, m, k], m >= k, of any float dtype, whether each W is free of NaN/Inf (R is the identity
    where not), and whether cond(W) was certified below the fast route's limit (then W has full
    column rank k, far from the rank cut, so any stack holding it has rank k without an SVD).

    Fast route, for well-conditioned factors: R = chol(W^T W) (:func:`gram_float64`, O(m k^2));
    reference route, for the others: R of a thin QR in float64, so small singular values
    (numerical rank) stay exact to float64 rounding.
    The test is cond(W) = cond(R) <= ||R||_F ||R^-1||_F < :data:`MAX_FACTOR_CONDITION`, an upper
    bound (within a factor k of the 2-norm condition) from one triangular inverse, cheaper than the
    eigenvalues. A NaN or Inf in W makes its Gram matrix non-finite, so finiteness costs no extra
    pass over W; only the rare non-finite Gram of finite entries (overflow past ~1e154) is told
    apart elementwise. ``row_scale`` [m]: the factor of diag(row_scale) W (see :func:`gram_float64`).

    bfloat16/float16 weights try a float32 Gram first (:mod:`.precision`): kept for the heads whose
    bound is below :func:`precision.float32_condition_limit` as well; the others are redone from a
    float64 Gram, then by QR, as for any dtype.
    """
    n, m, _ = tall.shape
    limit32 = min(MAX_FACTOR_CONDITION, precision.float32_condition_limit(tall.dtype, m, tall.shape[-1]))
    if limit32 > 0 and precision.float32_gram_allowed(tall):
        gram32 = gram_float64(tall, scratch, row_scale, accumulate=torch.float32, widen=False)
        R, usable, ok = _cholesky_route(gram32, limit32)             # Cholesky in float32 too
        R = R.to(torch.float64)
        again = usable & ~ok                 # finite but not certified in float32: the float64 Gram
        if bool(again.any()):
            if bool(again.all()):
                R, usable, ok = _cholesky_route(gram_float64(tall, scratch, row_scale), MAX_FACTOR_CONDITION)
            else:
                idx = again.nonzero().flatten()
                R2, _, ok2 = _cholesky_route(gram_float64(tall[idx], scratch, row_scale), MAX_FACTOR_CONDITION)
                R[idx], ok[idx] = R2, ok2
    else:
        R, usable, ok = _cholesky_route(gram_float64(tall, scratch, row_scale), MAX_FACTOR_CONDITION)
    finite = usable.clone()
    if not bool(usable.all()):
        suspect = ~usable
        finite[suspect] = torch.isfinite(tall[suspect]).flatten(1).all(dim=1)
    redo = (finite & ~ok).nonzero().flatten().tolist()
    per = max(1, CAST_CHUNK_BYTES // max(1, 8 * m * tall.shape[-1]))
    for start in range(0, len(redo), per):          # a few heads' float64 copies at a time
        idx = redo[start:start + per]
        wide = tall[idx].to(torch.float64)
        R[idx] = torch.linalg.qr(wide if row_scale is None else wide * row_scale[:, None], mode="r").R
    return R, finite, ok & finite


def core_singular_values(core: torch.Tensor, certified: torch.Tensor | bool) -> torch.Tensor:
    """Singular values (descending) of each k x k core [n, k, k], float64.

    ``certified`` [n]: both factors of that core are stored in bfloat16/float16 and certified well
    conditioned (cond <= 1e3 each, so cond(core) <= 1e6): there the values come from the symmetric
    eigenproblem of core^T core, about 2x cheaper than an SVD, whose error eps64 k cond(core) / 2 (about 1e-8 at most)
    of s_max is far below the stored data's u_s (2^-8, 2^-11) and far above the rank cut; every other
    core takes the SVD."""
    certified = torch.as_tensor(certified, device=core.device).expand(core.shape[0])
    if not bool(certified.any()):
        return torch.linalg.svdvals(core)
    out = torch.empty(core.shape[:-1], dtype=core.dtype, device=core.device)
    sym = core[certified]
    out[certified] = torch.linalg.eigvalsh(sym.transpose(-1, -2) @ sym).flip(-1).clamp(min=0).sqrt()
    if not bool(certified.all()):
        out[~certified] = torch.linalg.svdvals(core[~certified])
    return out


def _qr_r(tall: torch.Tensor) -> torch.Tensor:
    return torch.linalg.qr(tall, mode="r").R


def finite_slices(t: torch.Tensor) -> torch.Tensor:
    """[n, ...] -> [n] bool: every entry of slice i is finite (a 1-d tensor is one slice).

    One summing pass (a NaN or Inf makes the sum non-finite); the elementwise test runs only on
    slices whose sum is not finite (NaN/Inf, or an overflowing sum of finite values).
    """
    if t.dim() == 1:
        t = t[None]
    dims = tuple(range(1, t.dim()))
    ok = torch.isfinite(t.sum(dim=dims))          # no reshape: the adapters' views are strided
    if not bool(ok.all()):
        suspect = (~ok).nonzero().flatten()
        ok[suspect] = torch.isfinite(t[suspect]).flatten(1).all(dim=1)
    return ok


def all_finite(t: torch.Tensor) -> bool:
    """Every entry of ``t`` is finite: one summing pass (no boolean tensor of t's size), the
    elementwise test only where the sum is not finite (NaN/Inf, or finite values overflowing it)."""
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def layer_finite(layer: AttentionLayer) -> dict[str, torch.Tensor]:
    """Role -> [n] bool (slice i of that tensor is finite), for every present tensor."""
    return {role: finite_slices(t) for role, t in layer.tensors().items()}


def head_spectra(layer: AttentionLayer, scratch: Float64Buffers | None = None,
                 input_gain: torch.Tensor | None = None, split: SplitLayer | None = None) -> HeadSpectra:
    """Singular values of every head's W_QK and W_OV (and RoPE planes) of a layer, in float64.

    Weights may be in any float dtype (cast to float64 a few heads at a time, into ``scratch`` when
    given, see :func:`gram_float64`), on any device; results come back on the CPU. The finiteness
    masks (``HeadSpectra.finite``, as :func:`layer_finite` gives them) come out of the Gram matrices.
    ``input_gain`` [d] (float64): spectra of diag(g) W_Q, diag(g) W_K, diag(g) W_V, i.e. with the
    gain of the norm in front of the attention folded in (:mod:`idinspect.compare`).
    ``split`` (CPU): the four R factors computed in its threads (:class:`~idinspect.numerics.parallel.SplitLayer`).
    """
    H, d, dk = layer.W_Q.shape
    kv = torch.arange(H, device=layer.W_Q.device) // layer.group_size   # g(h)

    tall = [(layer.W_Q, input_gain),                 # R_Q [H, k, dk]
            (layer.W_O.transpose(-1, -2), None),     # R_O [H, k, dv]   (W_O^hT = Q R)
            (layer.W_K, input_gain),                 # R_K [G, k, dk]
            (layer.W_V, input_gain)]                 # R_V [G, k, dv]
    if split is None or layer.W_Q.device.type != "cpu":
        factors = [_r_factor(t, scratch, g) for t, g in tall]
    else:
        factors = split.map(lambda job, own: _r_factor(job[0], own, job[1]), tall)
    (R_Q, fin_Q, cert_Q), (R_O, fin_O, cert_O), (R_K, fin_K, cert_K), (R_V, fin_V, cert_V) = factors
    finite = {"W_Q": fin_Q, "W_K": fin_K, "W_V": fin_V, "W_O": fin_O}
    certified = {"R_Q": cert_Q.cpu(), "R_K": cert_K.cpu(), "R_V": cert_V.cpu(), "R_O": cert_O.cpu()}
    low = layer.W_Q.dtype in precision.LOW_PRECISION
    qk_core, qk_fits = _finite_cores(R_Q @ R_K[kv].transpose(-1, -2))
    ov_core, ov_fits = _finite_cores(R_V[kv] @ R_O.transpose(-1, -2))
    # a head whose factors are finite but whose product overflows float64 (entries past ~1e154, the
    # ``overflow`` finding) has no float64 spectrum: skipped like a head holding NaN/Inf
    qk_ok = finite["W_Q"] & finite["W_K"][kv] & qk_fits
    ov_ok = finite["W_V"][kv] & finite["W_O"] & ov_fits
    qk = core_singular_values(qk_core, low & cert_Q & cert_K[kv])
    ov = core_singular_values(ov_core, low & cert_V[kv] & cert_O)

    planes = None
    pos = layer.positional
    if pos.kind == "rope":
        # W[:, cols] = Q R[:, cols] with Q orthonormal, so plane p's form Q_p K_p^T has the singular
        # values of R_Q[:, cols] R_K[:, cols]^T: QR of the small [d_k, 2] column pairs only.
        cols = torch.tensor(pos.rotary.plane_columns(), device=R_Q.device)    # [planes, 2]
        Qp = R_Q[:, :, cols].permute(0, 2, 1, 3)                              # [H, planes, d_k, 2]
        Kp = R_K[:, :, cols].permute(0, 2, 1, 3)                              # [G, planes, d_k, 2]
        core = _qr_r(Qp) @ _qr_r(Kp)[kv].transpose(-1, -2)                    # [H, planes, 2, 2]
        planes = torch.linalg.svdvals(_finite_cores(core)[0]).cpu()

    finite.update({role: finite_slices(t) for role, t in layer.tensors().items() if role not in finite})
    return HeadSpectra(qk=qk.cpu(), ov=ov.cpu(), qk_planes=planes, qk_ok=qk_ok.cpu(), ov_ok=ov_ok.cpu(),
                       rtol=rank_rtol(d, dk), factors={"R_Q": R_Q, "R_K": R_K, "R_V": R_V, "R_O": R_O},
                       finite=finite, certified=certified)


def _finite_cores(core: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(core with every non-finite matrix replaced by zeros, [n] bool: that matrix was finite). A
    product of finite factors is non-finite only where it overflowed float64."""
    fits = torch.isfinite(core).flatten(1).all(dim=1) if core.dim() > 1 else torch.isfinite(core)
    if bool(fits.all()):
        return core, fits
    return torch.where(fits.reshape(-1, *([1] * (core.dim() - 1))), core, torch.zeros_like(core)), fits


def _condition(values: torch.Tensor) -> list[float | None]:
    """s_max / s_min per head; None where s_min is 0 (or the ratio overflows)."""
    out: list[float | None] = []
    for row in values.tolist():
        smin = row[-1] if row else 0.0
        ratio = row[0] / smin if smin > 0 else None
        out.append(ratio if ratio is not None and math.isfinite(ratio) else None)
    return out


def _masked(rows: list, ok: torch.Tensor) -> list:
    """Rows of heads whose factors are finite; None for the others (JSON never sees NaN)."""
    return [r if good else None for r, good in zip(rows, ok.tolist())]


def spectra_dict(s: HeadSpectra) -> dict:
    """The ``spectra`` object of the JSON contract; heads with NaN/Inf factors, or whose core
    overflowed to Inf, are ``null``. ``s`` is left as it is."""
    qk_ok = s.qk_ok & torch.isfinite(s.qk).all(dim=1)
    ov_ok = s.ov_ok & torch.isfinite(s.ov).all(dim=1)
    out = {
        "qk": _masked(s.qk.tolist(), qk_ok),
        "ov": _masked(s.ov.tolist(), ov_ok),
        "qk_rank": _masked(s.qk_rank.tolist(), qk_ok),
        "ov_rank": _masked(s.ov_rank.tolist(), ov_ok),
        "qk_condition": _masked(_condition(s.qk), qk_ok),
        "ov_condition": _masked(_condition(s.ov), ov_ok),
        "rank_rtol": s.rtol,
        "rank_rule": RANK_RULE,
    }
    if s.qk_planes is not None:
        out["qk_planes"] = _masked(s.qk_planes.tolist(), qk_ok)
    return out
