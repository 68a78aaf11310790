"""The invariants of the attention gauge, and how far two layers' invariants differ.

For each query head h (kv group g = g(h)), with Q~^h = [W_Q^h; b_Q^h] the bias-augmented query:

- ``W_QK``: Q~^h[:, U] W_K^g[:, U]^T on the unrotated dims U (all of d_k without RoPE); the
  no-op key bias there is ignored, it changes nothing (under soft-capping or sinks it is live, and
  the invariant is Q~^h[:, U] K~^g[:, U]^T with K~ = [W_K; b_K]);
- ``plane_QK`` / ``plane_QJK``: for each rotary plane p, Q~_p K~_p^T and Q~_p J K~_p^T with
  K~ = [W_K; b_K] (the key bias is live under RoPE) and J = [[0, 1], [-1, 0]];
- ``W_OV``: W_V^g W_O^h (with sinks: V~^g W_O^h, V~ = [W_V; b_V], since each head's b_V^g W_O^h
  acts on its own);
- ``output_bias``: b_O + sum_h b_V^{g(h)} W_O^h (with sinks: b_O);
- ``sinks``: the sink logits [H] as one vector, where the layers have them.
- ``W_OV``: W_V^g W_O^h;
- ``output_bias``: b_O + sum_h b_V^{g(h)} W_O^h;
- ``qk_factors`` (instead of the three QK kinds, for a layer with a q/k norm): Q~^h and
  K~^g = [W_K^g; b_K^g] themselves, per query head the worse of its own and its kv head's. The
  norm leaves no GL gauge on them;
- ``qk_gains`` (a q/k norm with gains): what the gain trade leaves alone, per query head h and trade
  orbit o (a rotary plane, or an unrotated dim) the outer product [a^h[o]; beta_Q^h[o]] (x)
  [b^g[o]; beta_K^g[o]] of the multipliers a = offset + w_Q, b = offset + w_K and the biases after
  them (:func:`~idinspect.forms.per_head.qk_gain_trade.gain_product_errors`), per head the worst orbit.

Each is compared as ||X_a - X_b||_F / max(||X_a||_F, ||X_b||_F) through k x k Gram matrices of
the factors after aligning b's gauge to a's (:mod:`.aligned`: exact for any alignment, and free of
cancellation), never forming a d x d product; layers whose small factors are too ill-conditioned
to align go through thin-QR cores instead (:func:`~idinspect.gauge.linalg.product_norms`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ...gauge.linalg import product_norms, relative
from ...layer.attention_layer import AttentionLayer
from ...layer.buffers import Float64Buffers, head_blocked_strides
from .aligned import align
from .biases import effective_output_bias
from .factors import augment
from .qk_centring import centred, centres
from .qk_gain_trade import gain_product_errors
from .qk_plane_rotation import rotate_planes, rotates
from .structure import noop_key_bias_columns, unrotated_columns

INVARIANTS = ("W_QK", "plane_QK", "plane_QJK", "W_OV", "output_bias", "sinks", "qk_factors", "qk_gains")
_J = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)


@dataclass(frozen=True)
class InvariantError:
    """Largest relative change of one invariant kind over a layer, and where (head, plane)."""

    invariant: str
    error: float
    head: int | None = None
    plane: int | None = None

    def where(self, layer: int) -> str:
        parts = [f"layer {layer}"]
        if self.head is not None:
            parts.append(f"head {self.head}")
        if self.plane is not None:
            parts.append(f"plane {self.plane}")
        return " ".join(parts) + f" {self.invariant}"


def invariant_errors(a: AttentionLayer, b: AttentionLayer, *, overwrite_a: bool = False,
                     grams_a: tuple[torch.Tensor, torch.Tensor] | None = None,
                     precision: torch.dtype = torch.float64,
                     workspace: Float64Buffers | None = None) -> dict[str, InvariantError]:
    """Largest relative change of every invariant between layers ``a`` and ``b``, with its head and
    plane: :func:`invariant_error_tensors` reduced to its worst entry per kind."""
    return {kind: worst_entry(kind, err) for kind, err in
            invariant_error_tensors(a, b, overwrite_a=overwrite_a, grams_a=grams_a, precision=precision,
                                    workspace=workspace).items()}


class _NotAligned(Exception):
    """A float32 attempt met a block it cannot align; the caller redoes the layer in float64."""


def invariant_error_tensors(a: AttentionLayer, b: AttentionLayer, *, overwrite_a: bool = False,
                            grams_a: tuple[torch.Tensor, torch.Tensor] | None = None,
                            precision: torch.dtype = torch.float64,
                            workspace: Float64Buffers | None = None) -> dict[str, torch.Tensor]:
    """:func:`_error_tensors` computed in ``precision``: float64 (the default, and what every proof
    uses), or float32 for a comparison whose layers are stored in bfloat16/float16, where errors of
    interest are ~1e-3 and float32's alignment resolves ~1e-5 (:data:`aligned.ALIGN_MAX_CONDITION_32`);
    a float32 attempt that meets a block it cannot align redoes the layer in float64. The results
    are float64 tensors either way. ``workspace``: the float32 copies of the factors of a layer in
    another dtype go into its reused buffers (a fresh 16 MiB tensor costs more in page faults than
    the conversion that fills it: Llama-1B's W_Q to float32, 8.9 ms fresh, 1.5 ms reused)."""
    if precision == torch.float32:
        grams32 = None if grams_a is None else tuple(g.to(torch.float32) for g in grams_a)
        for fitted in (True, False):        # fitted alignment; else Y = I (unrelated layers: nothing to fit)
            try:
                out = _error_tensors(a, b, overwrite_a=False, grams_a=grams32, dtype=torch.float32, strict=True,
                                     fitted=fitted, workspace=workspace)
                return {kind: err.to(torch.float64) for kind, err in out.items()}
            except _NotAligned:
                pass
    elif precision != torch.float64:
        raise ValueError(f"precision must be torch.float64 or torch.float32, not {precision}")
    if grams_a is not None and grams_a[0].dtype != torch.float64:     # float32 Grams: not for the float64 route
        grams_a = None
    return _error_tensors(a, b, overwrite_a=overwrite_a, grams_a=grams_a, dtype=torch.float64, strict=False)


def _error_tensors(a: AttentionLayer, b: AttentionLayer, *, overwrite_a: bool,
                   grams_a: tuple[torch.Tensor, torch.Tensor] | None, dtype: torch.dtype,
                   strict: bool, fitted: bool = True,
                   workspace: Float64Buffers | None = None) -> dict[str, torch.Tensor]:
    """Relative change of every invariant between layers ``a`` and ``b`` (float64), per head:
    ``W_QK`` and ``W_OV`` [H], ``plane_QK`` and ``plane_QJK`` [H, P], ``output_bias`` [] (one per layer),
    ``sinks`` [] (one per layer, where the layers have sinks); ``qk_factors`` [H] instead of the QK
    kinds for a layer with a q/k norm, and ``qk_gains`` [H] where that norm has gains.

    Kinds that do not apply (planes without RoPE, W_QK under full RoPE) are absent. Raises
    ValueError if the layers do not have the same shapes and positional scheme. Layers already
    in float64 are not copied. ``overwrite_a``: ``a``'s W_Q and W_O may be overwritten (a caller
    that no longer needs them saves two factor-sized buffers); the float64 copies made of a
    layer in another dtype are always reused that way. ``grams_a``: ``a``'s own per-head Gram matrices
    (Q~^hT Q~^h with the query bias row, W_O^h W_O^hT; e.g. :attr:`GaugeReport.head_grams` of
    ``canonicalize(a)``), which save two passes over ``b``'s factors.
    """
    _check_comparable(a, b)
    A, B = _converted(a, dtype, workspace, "a"), _converted(b, dtype, workspace, "b")
    own = {role: overwrite_a or getattr(a, role).dtype != dtype for role in ("W_Q", "W_O")}
    kv = torch.arange(A.n_heads) // A.group_size
    out: dict[str, torch.Tensor] = {}
    sinks = A.sinks is not None
    if sinks:                                                       # b_V is per head, not part of one constant
        ea, eb = _zero_if_none(A.b_O, B.b_O), _zero_if_none(B.b_O, A.b_O)
        ea = A.W_O.new_zeros(A.d_model) if ea is None else ea
        eb = B.W_O.new_zeros(B.d_model) if eb is None else eb
        out["sinks"] = torch.as_tensor(relative((A.sinks - B.sinks).norm(), A.sinks.norm(), B.sinks.norm()),
                                       dtype=torch.float64)
    else:
        ea, eb = effective_output_bias(A), effective_output_bias(B)     # first: W_O may be overwritten below
    bias_err = relative((ea - eb).norm(), ea.norm(), eb.norm())

    if getattr(A, "qk_norm", None) is not None:
        out["qk_factors"] = _qk_factor_errors(A, B, kv)
        if A.qk_norm.q_gain is not None:
            out["qk_gains"] = gain_product_errors(A, B)
    else:
        _qk_error_tensors(A, B, kv, own, grams_a, out, strict, fitted)

    full = torch.arange(A.d_v)[None]
    Va = augment(A.W_V, _zero_if_none(A.b_V, B.b_V)) if sinks else A.W_V
    Vb = augment(B.W_V, _zero_if_none(B.b_V, A.b_V)) if sinks else B.W_V
    ov = align(A.W_O, None, B.W_O, None, Va, Vb, kv, [full], overwrite=own["W_O"],   # P = W_O^hT, S = W_V^g
               Ga=None if grams_a is None else grams_a[1], checked=strict, fitted=fitted)
    if ov is None and strict:
        raise _NotAligned
    if ov is None:
        err = _rel(Va[kv], A.W_O.transpose(1, 2), Vb[kv], B.W_O.transpose(1, 2))
    else:
        err = ov.errors(full)[:, 0]
        if ov.uncertain:
            raise _NotAligned
    out["W_OV"] = err
    out["output_bias"] = torch.as_tensor(bias_err, dtype=torch.float64)
    return out


def _qk_error_tensors(A: AttentionLayer, B: AttentionLayer, kv: torch.Tensor, own: dict, grams_a,
                      out: dict[str, torch.Tensor], strict: bool = False, fitted: bool = True) -> None:
    """``W_QK`` [H] and ``plane_QK`` / ``plane_QJK`` [H, P] into ``out`` (layers without a q/k norm)."""
    cols = list(unrotated_columns(A))
    rope = A.positional.kind == "rope"
    U = torch.tensor(cols)[None] if cols else None                                    # [1, n_U]
    planes = torch.tensor(A.positional.rotary.plane_columns()) if rope else None       # [P, 2]
    qa, qb = _query_bias(A, B), _query_bias(B, A)
    noop = list(noop_key_bias_columns(A))
    Ka, Kb = _key(A, B, noop), _key(B, A, noop)
    qk = align(A.W_Q.transpose(1, 2), qa, B.W_Q.transpose(1, 2), qb, Ka, Kb, kv,
               [i for i in (U, planes) if i is not None], overwrite=own["W_Q"],
               Ga=None if grams_a is None else grams_a[0], checked=strict, fitted=fitted)
    if qk is None and strict:
        raise _NotAligned
    if qk is None:                                                  # a block too ill-conditioned to align
        out.update(_qk_errors_by_qr(A, B, kv, cols, Ka, Kb))
    else:
        if U is not None:
            out["W_QK"] = qk.errors(U)[:, 0]
        if planes is not None:
            out["plane_QK"] = qk.errors(planes)
            out["plane_QJK"] = qk.errors(planes, *_plane_j(A.d_k, planes))
        if qk.uncertain:
            raise _NotAligned


def _qk_factor_errors(A: AttentionLayer, B: AttentionLayer, kv: torch.Tensor) -> torch.Tensor:
    """[H]: relative change of [W_Q^h; b_Q^h], or of its kv head's [W_K^g; b_K^g] where larger (q/k-norm layers)."""
    shift = centred if centres(A) else (lambda X: X)        # LayerNorm: the centring shift is no change
    if rotates(A):                                           # no gains: plane rotations are no change either
        A, B = (L.replace(**rotate_planes(L)) for L in (A, B))

    def per_head(W: str, b: str) -> torch.Tensor:
        Xa = shift(augment(getattr(A, W), _zero_if_none(getattr(A, b), getattr(B, b))))
        Xb = shift(augment(getattr(B, W), _zero_if_none(getattr(B, b), getattr(A, b))))
        na, nb = Xa.flatten(1).norm(dim=1), Xb.flatten(1).norm(dim=1)
        err = (Xa - Xb).flatten(1).norm(dim=1) / torch.maximum(na, nb).clamp_min(torch.finfo(torch.float64).tiny)
        return torch.where((na == 0) & (nb == 0), torch.zeros_like(err), err)

    return torch.maximum(per_head("W_Q", "b_Q"), per_head("W_K", "b_K")[kv])


def largest_invariant_error(a: AttentionLayer, b: AttentionLayer, *, overwrite_a: bool = False,
                            grams_a: tuple[torch.Tensor, torch.Tensor] | None = None,
                            precision: torch.dtype = torch.float64,
                            workspace: Float64Buffers | None = None) -> InvariantError:
    """The worst of :func:`invariant_errors` (``overwrite_a``, ``grams_a``, ``precision``, ``workspace`` as there)."""
    return max(invariant_errors(a, b, overwrite_a=overwrite_a, grams_a=grams_a, precision=precision,
                                workspace=workspace).values(), key=lambda e: e.error)


def largest_over_layers(errors: Iterable[tuple[int, InvariantError]]) -> tuple[float, str]:
    """(error, where) of the largest invariant error over ``(layer index, that layer's largest)``
    pairs, the last maximum winning: "largest invariant error" as export and verify both state it,
    the largest relative change ||I_B - I_A|| / ||I_A|| of any invariant of any head, plane or layer."""
    worst, where = 0.0, ""
    for i, e in errors:
        if e.error >= worst:
            worst, where = e.error, e.where(i)
    return worst, where


def describe_largest(error: float, where: str) -> str:
    """The one wording of :func:`largest_over_layers`'s figure (export's summary, verify's invariant line)."""
    return f"largest invariant error: {error:.2e} ({where})"


def _converted(L: AttentionLayer, dtype: torch.dtype, workspace: Float64Buffers | None, side: str) -> AttentionLayer:
    """``L.to(dtype)``, its four factors copied into ``workspace``'s buffers (each head's block
    contiguous, :func:`~idinspect.layer.buffers.head_blocked_strides`) where one is given and they are
    in another dtype; ``L`` itself where already in ``dtype``."""
    if workspace is None or L.W_Q.dtype == dtype:
        return L.to(dtype)
    factors = {role: workspace.empty(("invariants", side, role), tuple(t.shape), head_blocked_strides(t), t.device,
                                     dtype).copy_(t) for role, t in ((r, getattr(L, r)) for r in ("W_Q", "W_K", "W_V", "W_O"))}
    return L.replace(**factors).to(dtype)   # the rest (biases, gains, sinks): small


def _query_bias(L: AttentionLayer, other: AttentionLayer) -> torch.Tensor | None:
    """The query bias row of Q~ [H, d_k]: zeros where only ``other`` has one, None where neither does."""
    return _zero_if_none(L.b_Q, other.b_Q)


def _key(L: AttentionLayer, other: AttentionLayer, noop: list[int]) -> torch.Tensor:
    """K~ [G, d (+1), d_k]: the key bias row, zeroed on the columns ``noop`` where it is a no-op
    (the unrotated ones under a shift-invariant softmax)."""
    b = _zero_if_none(L.b_K, other.b_K)
    if b is not None and noop:
        b = b.clone()
        b[:, noop] = 0
    return augment(L.W_K, b)


def _plane_j(d_k: int, planes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """J^T on each plane's columns as a signed permutation (perm, sign) [d_k]: column j of S J^T is
    sign[j] * column perm[j] of S, so that P (S J^T)^T = P J S^T. For plane (i, j):
    (S J^T)[:, i] = S[:, j] and (S J^T)[:, j] = -S[:, i]."""
    perm, sign = torch.arange(d_k), torch.ones(d_k, dtype=torch.float64)
    perm[planes[:, 0]], perm[planes[:, 1]] = planes[:, 1], planes[:, 0]
    sign[planes[:, 1]] = -1.0
    return perm, sign


def _qk_errors_by_qr(A: AttentionLayer, B: AttentionLayer, kv: torch.Tensor, cols: list[int],
                     Ka: torch.Tensor | None = None, Kb: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The QK kinds through thin QR of the stacked factors (for layers that cannot be aligned);
    ``Ka``, ``Kb``: the keys K~ of :func:`_key` (computed here when not given)."""
    out = {}
    if Ka is None or Kb is None:
        noop = list(noop_key_bias_columns(A))
        Ka, Kb = _key(A, B, noop), _key(B, A, noop)
    Qa, Qb = _query(A), _query(B)
    if cols:
        Ka, Kb = Ka[kv][:, :, cols], Kb[kv][:, :, cols]
        out["W_QK"] = _rel(Qa[:, :, cols], Ka, Qb[:, :, cols], Kb)
    if A.positional.kind == "rope":
        idx = torch.tensor(A.positional.rotary.plane_columns())
        Ka, Kb = augment(A.W_K, _zero_if_none(A.b_K, B.b_K)), augment(B.W_K, _zero_if_none(B.b_K, A.b_K))
        qa, qb = Qa[:, :, idx].permute(0, 2, 1, 3), Qb[:, :, idx].permute(0, 2, 1, 3)   # [H, P, m, 2]
        ka, kb = Ka[kv][:, :, idx].permute(0, 2, 1, 3), Kb[kv][:, :, idx].permute(0, 2, 1, 3)
        out["plane_QK"] = _rel(qa, ka, qb, kb)
        out["plane_QJK"] = _rel(qa @ _J, ka, qb @ _J, kb)
    return out


def _query(L: AttentionLayer) -> torch.Tensor:
    """Q~ [H, d + 1, d_k]: the query bias row is always present (zero when the layer has none)."""
    b = L.b_Q if L.b_Q is not None else L.W_Q.new_zeros(L.n_heads, L.d_k)
    return augment(L.W_Q, b)


def _zero_if_none(b: torch.Tensor | None, other: torch.Tensor | None) -> torch.Tensor | None:
    if b is None and other is not None:
        return torch.zeros_like(other)
    return b


def _rel(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    ab, cd, diff = product_norms(A, B, C, D)
    return relative(diff, ab, cd)


def worst_entry(name: str, err: torch.Tensor) -> InvariantError:
    """err [], [H] or [H, P] -> the largest, with its head (and plane)."""
    if err.dim() == 0:
        return InvariantError(name, float(err))
    flat = int(err.reshape(-1).argmax())
    if err.dim() == 1:
        return InvariantError(name, float(err[flat]), head=flat)
    P = err.shape[1]
    return InvariantError(name, float(err.reshape(-1)[flat]), head=flat // P, plane=flat % P)


def _check_comparable(a: AttentionLayer, b: AttentionLayer) -> None:
    for what in ("W_Q", "W_K", "W_V", "W_O"):
        if getattr(a, what).shape != getattr(b, what).shape:
            raise ValueError(f"layer {a.index}: {what} shapes differ: {tuple(getattr(a, what).shape)} vs "
                             f"{tuple(getattr(b, what).shape)}")
    pa, pb = a.positional, b.positional
    if pa.kind != pb.kind or pa.rotary_dim != pb.rotary_dim or (
            pa.rotary is not None and pb.rotary is not None and pa.rotary.pairing != pb.rotary.pairing):
        raise ValueError(f"layer {a.index}: positional schemes differ "
                         f"({pa.kind}/{pa.rotary_dim} vs {pb.kind}/{pb.rotary_dim})")
    if pa.rotary is not None and pb.rotary is not None and (
            not torch.equal(pa.rotary.inv_freq, pb.rotary.inv_freq)
            or pa.rotary.attention_factor != pb.rotary.attention_factor):
        raise ValueError(f"layer {a.index}: RoPE frequencies differ")
    if abs(a.scale - b.scale) > 1e-12 * abs(a.scale) or a.causal != b.causal or a.sliding_window != b.sliding_window:
        raise ValueError(f"layer {a.index}: score scale, causal mask or sliding window differ")
    if a.logit_softcap != b.logit_softcap or (a.sinks is None) != (b.sinks is None):
        raise ValueError(f"layer {a.index}: logit soft-capping or attention sinks differ")
    na, nb = getattr(a, "qk_norm", None), getattr(b, "qk_norm", None)
    if (na is None) != (nb is None) or na is not None and (na.kind, na.scope, na.eps, na.gain_offset) != (
            nb.kind, nb.scope, nb.eps, nb.gain_offset):
        raise ValueError(f"layer {a.index}: query/key norms differ")
    if (getattr(a, "attention_chunk", None), getattr(a, "query_temperature", None)) != (
            getattr(b, "attention_chunk", None), getattr(b, "query_temperature", None)) or (
            na is not None and na.after_rope != nb.after_rope):
        raise ValueError(f"layer {a.index}: attention chunks, query temperature or the norm's place differ")
    if na is not None and any((getattr(na, r) is None) != (getattr(nb, r) is None) for r in ("q_gain", "k_gain", "q_bias", "k_bias")):
        raise ValueError(f"layer {a.index}: query/key norms differ in which gains and biases they store")
