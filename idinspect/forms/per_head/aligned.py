"""||P_a S_a^T - P_b S_b^T||_F per head, from k x k Gram matrices, without cancellation.

Every invariant is a product P S^T of a per-head factor P [m, k] (the query Q~^h, or W_O^hT) and a
per-group factor S [n, k] (K~^g, or W_V^g), restricted to column blocks (the unrotated dims,
each rotary plane, all of d_v). Expanding ||P_a S_a^T - P_b S_b^T||^2 into Gram traces directly
cancels catastrophically when the two are close (the error floor would be sqrt(eps)). Instead,
for ANY invertible block-diagonal Y [k, k], exactly

    P_b S_b^T = P~ S~^T   with  S~ = S_b Y,  P~ = P_b Y^-T,   so
    P_a S_a^T - P_b S_b^T = dP S_a^T + P~ dS^T,   dP = P_a - P~,  dS = S_a - S~,

    ||.||^2 = tr(dP^T dP . S_a^T S_a) + 2 tr(dP^T P~ . dS^T S_a) + tr(P~^T P~ . dS^T dS).

Y is the least-squares fit S_b Y ~ S_a per group and block (small factors only), so dP and dS
are as small as the change itself and no term cancels: the comparison is honest (the identity
holds for every Y) and accurate to rounding. Cost per layer and factor pair: one batched matmul
for dP and three Gram matrices of the per-head factors [H, k, k] (two when P_a^T P_a is already
known, e.g. from the canonicalisation); everything else is k x k or touches only the small
per-group factors.

A signed column permutation M (block-diagonal like Y) compares P_a (S_a M)^T with P_b (S_b M)^T
from the same Gram matrices, k x k work only: M = J^T per plane gives the Q_p J K_p^T invariant.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ...gauge.linalg import block_traces, blocks, blocks_of, gram, put_blocks, relative

#: Alignment blocks whose least-squares Gram (or the fitted Y) is worse conditioned than this are
#: not trusted (the identity would still hold, but rounding in Y^-1 would show): the caller then
#: compares through thin QR instead.
ALIGN_MAX_CONDITION = 1e10
#: The same limit for an alignment computed in float32 (:func:`align` on float32 factors): rounding
#: in Y^-1 stays below ~cond(Y) sqrt(m) u_32 <= 1e-3 of the invariant there, the scale of a
#: bfloat16 rounding; worse blocks are redone in float64 by the caller.
ALIGN_MAX_CONDITION_32 = 1e2


@dataclass
class Alignment:
    """The Gram matrices of one aligned factor pair (see the module doc).

    Per head [H, k, k]: G1 = dP^T dP, G2 = dP^T P~, G3 = P~^T P~, Gb = P_b^T P_b. Per group
    [G, k, k]: Y and the Grams SaSa = S_a^T S_a, SbSb, SbSa = S_b^T S_a, dSSa = dS^T S_a,
    dSSb = dS^T S_b, dSdS = dS^T dS with dS = S_a - S_b Y; kv [H] the group of each head.
    """

    G1: torch.Tensor
    G2: torch.Tensor
    G3: torch.Tensor
    Gb: torch.Tensor
    Y: torch.Tensor
    SaSa: torch.Tensor
    SbSb: torch.Tensor
    SbSa: torch.Tensor
    dSSa: torch.Tensor
    dSSb: torch.Tensor
    dSdS: torch.Tensor
    kv: torch.Tensor
    #: The rounding unit gamma = sqrt(m) u of the products when :meth:`errors` tests that each block
    #: is resolved (``checked`` alignments, :func:`align`); 0: no test.
    gamma: float = 0.0
    #: Set by :meth:`errors` where a block's difference is not resolved (see :meth:`_check_resolved`).
    uncertain: bool = False
    #: P_a^T P_a per head [H, k, k] when the caller has it (else formed as G1 + G2 + G2^T + G3).
    Ga: torch.Tensor | None = None

    def errors(self, index: torch.Tensor, perm: torch.Tensor | None = None, sign: torch.Tensor | None = None
               ) -> torch.Tensor:
        """Relative change ||X_a - X_b|| / max(||X_a||, ||X_b||) [H, nb] on blocks index [nb, bs].

        X = P S^T, or with a signed column permutation M (column j of S M is sign[j] * column
        perm[j] of S, block-diagonal like Y) X = P (S M)^T, from k x k matrices only: with the
        commutator C = Y M - M Y, exactly dS_M = S_a M - S_b M Y = dS M + S_b C, so

            dS_M^T (S_a M) = M^T dSSa M + C^T SbSa M,
            dS_M^T dS_M   = M^T dSdS M + M^T dSSb C + C^T dSSb^T M + C^T SbSb C,

        every term as small as the change itself (no cancellation); M^T G M is a re-indexing.
        """
        groups = (self.SaSa, self.dSSa, self.dSdS, self.SbSb)
        if perm is None:
            A1, A2, A3, B1 = blocks_of(index, *groups)                                   # per group
        else:
            sign = sign.to(self.Y.dtype)
            MY = torch.empty_like(self.Y)
            MY[:, perm, :] = self.Y * sign[:, None]                           # row perm_j of M Y = sign_j Y[j]
            C = self.Y.index_select(-1, perm) * sign - MY                       # Y M - M Y
            s = sign[index]                # blocks of M^T G M: entries sign_i sign_j G[perm_i, perm_j]
            A1, A2, A3, B1 = (X * (s[:, :, None] * s[:, None, :]) for X in blocks_of(perm[index], *groups))
            if bool(C.any()):                                                   # zero where Y commutes (Y = I)
                M = torch.zeros(perm.numel(), perm.numel(), dtype=self.Y.dtype)
                M[perm, torch.arange(perm.numel())] = sign                      # S M: column j = sign_j S[:, perm_j]
                Ct = C.transpose(1, 2)
                cross = M.T @ self.dSSb @ C
                dA2, dA3 = blocks_of(index, Ct @ self.SbSa @ M, cross + cross.transpose(1, 2) + Ct @ self.SbSb @ C)
                A2, A3 = A2 + dA2, A3 + dA3
        per_head = (self.G1, self.G2, self.G3, self.Gb) + (() if self.Ga is None else (self.Ga,))
        G1, G2, G3, Gb, *known = blocks_of(index, *per_head)                           # per head
        if known:
            Ga = known[0]
        else:
            Ga = G1 + G2 + G2.transpose(-1, -2) + G3              # P_a^T P_a, as P_a = dP + P~
        t1, t2, t3, ta, tb = self._traces(((G1, A1), (G2, A2), (G3, A3), (Ga, A1), (Gb, B1)))
        diff2 = t1 + 2 * t2 + t3
        na, nb = ta.clamp(min=0).sqrt(), tb.clamp(min=0).sqrt()
        if self.gamma:
            self._check_resolved(diff2, (G1, A1), (G2, A2), (G3, A3), torch.maximum(na, nb))
        return relative(diff2.clamp(min=0).sqrt(), na, nb)

    def _traces(self, pairs: tuple[tuple[torch.Tensor, torch.Tensor], ...]) -> list[torch.Tensor]:
        """:meth:`_head_group_traces` of several (X, A) pairs on the same blocks; many small blocks
        go side by side through one call (fewer, larger kernels)."""
        if pairs[0][0].shape[1] == 1:
            return [self._head_group_traces(X, A) for X, A in pairs]
        nb = pairs[0][0].shape[1]
        X, A = (torch.cat(side, dim=1) for side in zip(*pairs))
        return list(self._head_group_traces(X, A).split(nb, dim=1))

    def _head_group_traces(self, X: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        """tr(X_b A_b) [H, nb] for per-head blocks X [H, nb, bs, bs] and per-group blocks A [G, ...]
        (head h with group kv[h]); heads of a group side by side meet their group's A without a
        per-head copy of it: one batched product per group for a single block (X read once),
        broadcasting for many small ones."""
        H, G = X.shape[0], A.shape[0]
        if self._groups_in_order:
            if X.shape[1] == 1:       # one block, all columns: tr(X_h A_g) = <vec X_h, vec A_g^T>, X read once
                k2 = X.shape[-1] * X.shape[-2]
                At = A.transpose(-1, -2).reshape(G, k2, 1)
                return torch.bmm(X.reshape(G, H // G, k2), At).reshape(H, 1)
            return block_traces(X.reshape(G, H // G, *X.shape[1:]), A[:, None]).reshape(H, -1)
        return block_traces(X, A[self.kv])

    @functools.cached_property
    def _groups_in_order(self) -> bool:
        """Whether head h is in group h // (H / G) (kv's usual layout: a group's heads side by side)."""
        H, G = self.kv.numel(), self.SaSa.shape[0]
        return H % G == 0 and torch.equal(self.kv, torch.arange(H, device=self.kv.device) // (H // G))

    def _check_resolved(self, diff2, one, cross, three, size) -> None:
        """In float32 a Gram matrix G = X^T Y carries ||dG||_F <= gamma ||X||_F ||Y||_F, so a term
        tr(G A) of diff^2 is known to gamma (||X|| ||Y|| ||A||_F + ||G||_F ||U|| ||V||) for A = U^T V
        (first order). The difference is resolved where diff^2 exceeds 1e3 times the sum over the
        three terms (relative error below ~1e-3: the alignment made dP and dS as small as the
        change, or the change is large, as between unrelated layers), or where the error is below
        1e-5 of the invariant (a change at float32's floor, e.g. two equal layers); :attr:`uncertain`
        is set where neither holds."""
        tr = lambda X: X.diagonal(dim1=-2, dim2=-1).sum(-1).clamp(min=0)  # noqa: E731
        fro = lambda X: torch.linalg.vector_norm(X, dim=(-2, -1))                        # noqa: E731
        (G1, A1), (G2, A2), (G3, A3) = one, cross, three        # G per head, A per group
        tA1, tA3, fA1, fA2, fA3 = torch.stack((tr(A1), tr(A3), fro(A1), fro(A2), fro(A3)))[:, self.kv]
        tG1, tG3 = tr(G1), tr(G3)
        e1 = tG1 * fA1 + fro(G1) * tA1
        e3 = tG3 * fA3 + fro(G3) * tA3
        e2 = (tG1 * tG3).sqrt() * fA2 + fro(G2) * (tA3 * tA1).sqrt()
        error = self.gamma * (e1 + 2 * e2 + e3)
        resolved = (diff2 >= 1e3 * error) | (error.sqrt() <= 1e-5 * size)
        if not bool(resolved.all()):
            self.uncertain = True



def align(Pa_t: torch.Tensor, pa_row: torch.Tensor | None, Pb_t: torch.Tensor, pb_row: torch.Tensor | None,
          Sa: torch.Tensor, Sb: torch.Tensor, kv: torch.Tensor, index: list[torch.Tensor],
          overwrite: bool = False, Ga: torch.Tensor | None = None, checked: bool = False,
          fitted: bool = True) -> Alignment | None:
    """Align factor pair b to pair a on the column blocks ``index`` (a list of [nb, bs] tensors covering
    the columns compared); None where a block cannot be aligned reliably.

    Pa_t, Pb_t [H, k, m]: the per-head factors transposed (P^h = Pt^hT), each with an optional
    extra row [H, k] (a bias row of P); Sa, Sb [G, n, k]: the per-group factors; kv [H].
    ``overwrite``: Pa_t's memory may take dP^T (saves a factor-sized buffer); it is overwritten
    only when the alignment succeeds. ``Ga`` [H, k, k]: P_a^T P_a if already known (bias row
    included); then P_b^T P_b needs no pass over P_b: with P~ = P_a - dP exactly,
    G3 = P~^T P~ = Ga - G1 - G2 - G2^T and P_b^T P_b = Y G3 Y^T.
    ``checked`` (float32 comparisons): a block that cannot be fitted keeps Y = I instead of failing
    the alignment, and :meth:`Alignment.errors` tests every block's rounding against its change
    (:attr:`Alignment.uncertain`). ``fitted=False``: Y = I on every block (unrelated layers).
    """
    G, _, k = Sa.shape
    limit = ALIGN_MAX_CONDITION_32 if Sa.dtype == torch.float32 else ALIGN_MAX_CONDITION
    Y = Sa.new_zeros(G, k, k)
    Yi = Sa.new_zeros(G, k, k)
    SaSa, SbSb, SbSa = Sa.transpose(1, 2) @ Sa, Sb.transpose(1, 2) @ Sb, Sb.transpose(1, 2) @ Sa
    for idx in index:
        if fitted:
            fit = _fit(blocks(SbSb, idx), blocks(SbSa, idx), blocks(SaSa, idx), limit, checked)
            if fit is None:
                return None
        else:
            fit = (torch.eye(idx.shape[1], dtype=Y.dtype).expand(G, idx.shape[0], -1, -1),) * 2
        put_blocks(Y, idx, fit[0])
        put_blocks(Yi, idx, fit[1])
    dS = torch.baddbmm(Sa, Sb, Y, alpha=-1)                                  # S_a - S_b Y
    Yi_h = Yi[kv]
    dP_t = Pa_t if overwrite else Pa_t.clone()                               # P_a^T - Y^-1 P_b^T, in P_a's
    dP_t.baddbmm_(Yi_h, Pb_t, alpha=-1)                                      # layout (no transposing copy)
    d_row = _row_change(pa_row, pb_row, Yi_h)
    Gx = dP_t @ Pb_t.transpose(1, 2)                                         # dP^T P_b
    if d_row is not None and pb_row is not None:
        Gx = Gx + d_row[:, :, None] * pb_row[:, None, :]
    G1, G2 = gram(dP_t, d_row), Gx @ Yi_h.transpose(1, 2)
    if Ga is None:
        Gb = gram(Pb_t, pb_row)
        G3 = Yi_h @ Gb @ Yi_h.transpose(1, 2)
    else:
        G3 = Ga - G1 - G2 - G2.transpose(1, 2)
        Gb = Y[kv] @ G3 @ Y[kv].transpose(1, 2)
    dSt = dS.transpose(1, 2)
    gamma = max(Pa_t.shape[-1] + 1, Sa.shape[1]) ** 0.5 * torch.finfo(Sa.dtype).eps / 2 if checked else 0.0
    return Alignment(G1=G1, G2=G2, G3=G3, Gb=Gb, Y=Y, SaSa=SaSa, SbSb=SbSb, SbSa=SbSa, dSSa=dSt @ Sa,
                     dSSb=dSt @ Sb, dSdS=dSt @ dS, kv=kv, gamma=gamma)


def _fit(SbSb: torch.Tensor, SbSa: torch.Tensor, SaSa: torch.Tensor, limit: float = ALIGN_MAX_CONDITION,
         identity_fallback: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(Y, Y^-1) [..., bs, bs] solving min ||S_b Y - S_a|| per block from its Gram matrices.

    Blocks where either factor is exactly zero take Y = I (one side's invariant is zero, nothing
    can cancel); None if another block is too ill-conditioned to fit or invert, or with
    ``identity_fallback`` Y = I there.
    """
    bs = SbSb.shape[-1]
    eye = torch.eye(bs, dtype=SbSb.dtype, device=SbSb.device).expand_as(SbSb)
    zero = (SbSb.diagonal(dim1=-2, dim2=-1).sum(-1) == 0) | (SaSa.diagonal(dim1=-2, dim2=-1).sum(-1) == 0)
    L, info = torch.linalg.cholesky_ex(torch.where(zero[..., None, None], eye, SbSb))
    Y = torch.where(zero[..., None, None], eye, torch.cholesky_solve(SbSa, L))
    sv = torch.linalg.svdvals(Y)
    ok = zero | ((info == 0) & torch.isfinite(sv).all(-1) & (sv[..., -1] * limit > sv[..., 0]))
    if identity_fallback:
        Y = torch.where(ok[..., None, None], Y, eye)
        return Y, torch.linalg.inv(Y)
    if not bool(ok.all()):
        return None
    return Y, torch.linalg.inv(Y)


def _row_change(pa_row: torch.Tensor | None, pb_row: torch.Tensor | None, Yi: torch.Tensor) -> torch.Tensor | None:
    """pa_row - pb_row Y^-T [H, k] (a missing row is zero)."""
    if pb_row is None:
        return pa_row
    aligned = (pb_row[:, None, :] @ Yi.transpose(1, 2))[:, 0]
    return -aligned if pa_row is None else pa_row - aligned
