"""Per-head invariants of the attention gauge, for comparing two models.

For every query head h (kv head g = g(h)), with the input norm's gain g_n folded into the
projections (Q = diag(g_n) W_Q^h, K = diag(g_n) W_K^g, V = diag(g_n) W_V^g, O = W_O^h):

- ``qk`` [d_k]: singular values of W_QK = Q K^T (d x d, rank <= d_k);
- ``ov`` [d_v]: singular values of W_OV = V O;
- ``planes`` [P, 2] (RoPE only): singular values of each rotary plane's form Q_p K_p^T, Q_p = Q[:, (a_p, b_p)].

No gauge move changes them: Q A (A^-1 K^T) = Q K^T for any A in GL(d_k) (with RoPE, A is one
scale times rotation per plane on the rotated columns, which also leaves each Q_p K_p^T alone:
M = s Rot(t) gives M^-T = s^-1 Rot(t) and M M^-1 = I); V B B^-1 O = V O. A residual rotation
x -> x R (R orthogonal, gains folded first) maps Q K^T -> R^T Q K^T R and V O -> R^T V O R, which
keep their singular values. A permutation of heads permutes the rows, which matching undoes.

They are computed as :func:`idinspect.forms.per_head.spectra.head_spectra` computes them for
``inspect``: R factors of thin QRs (Gram/Cholesky where well conditioned) and small cores, never a
d x d matrix.

Rounding radius. A model stored in a dtype of unit roundoff u holds W (1 + delta) with
|delta| <= u entrywise, so ||dW||_2 <= ||dW||_F <= u ||W||_F; a folded factor diag(g) W carries
eps = u_g + u_W + u_g u_W. By Weyl's inequality each singular value of Q K^T moves by at most

    r = eps_Q ||Q||_F ||K||_2 + eps_K ||Q||_2 ||K||_F + eps_Q eps_K ||Q||_F ||K||_F  (+ 1e-9 ||Q||_F ||K||_F)

(||.||_2 replaced by the cheaper upper bound min(||.||_F, sqrt(||.||_1 ||.||_inf)) of the R factor,
exact for a RoPE plane's two columns)

where the last term bounds the float64 computation (R factors exact to ~cond^2 eps64 with cond < 1e3).
Each model's r is computed from its own stored factors (the rounding happened there), and two
models' invariants agree up to rounding when |s_A - s_B| <= r_A + r_B for every value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..analysis.analyzer import layer_bytes_in_flight
from ..forms import require
from ..forms.per_head.analysis import for_analysis
from ..forms.per_head.spectra import head_spectra
from ..layer.attention_layer import AttentionLayer
from ..layer.buffers import Float64Buffers
from ..numerics.parallel import SplitLayer

#: Relative accuracy of the float64 singular values themselves (see the module docstring).
COMPUTE_RTOL = 1e-9


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = eps / 2 of a float dtype (round to nearest): bf16 2^-8, fp16 2^-11, fp32 2^-24, fp64 2^-53."""
    return torch.finfo(dtype).eps / 2


@dataclass
class LayerInvariants:
    """The invariants of one layer's heads, float64 on the CPU, descending per head.

    ``qk`` [H, d_k], ``ov`` [H, d_v], ``planes`` [H, P, 2] or None; ``radius_*`` the rounding
    radius of each form ([H], [H], [H, P]); ``finite`` [H]: False where a factor holds NaN/Inf.
    """

    index: int
    qk: torch.Tensor
    ov: torch.Tensor
    planes: torch.Tensor | None
    radius_qk: torch.Tensor
    radius_ov: torch.Tensor
    radius_planes: torch.Tensor | None
    finite: torch.Tensor
    structure: dict = field(default_factory=dict)
    #: Whether an input gain was folded in (not recorded in fingerprints).
    gain_folded: bool = False

    @property
    def n_heads(self) -> int:
        return self.qk.shape[0]

    def head_shape(self) -> tuple[int, int, int]:
        """(d_k, d_v, planes): heads are comparable only when these agree."""
        return (self.qk.shape[1], self.ov.shape[1], 0 if self.planes is None else self.planes.shape[1])


@dataclass
class ModelInvariants:
    """Every layer's invariants and what they were computed from.

    ``value_rtol``: relative rounding of the stored invariants themselves (0 when computed from
    weights, 2^-24 when read from a float32 fingerprint).
    """

    source: str
    model: dict
    dtype: str
    unit_roundoff: float
    gains_folded: bool
    layers: list[LayerInvariants]
    value_rtol: float = 0.0
    origin: str = "weights"
    revision: str | None = None
    #: Fingerprint files: "verified" (its integrity digest matched) or "absent" (written before the field).
    integrity: str | None = None
    #: ``--whole-model``: per-layer MLP unit invariants (:mod:`.mlp_invariants`), or None; ``mlp_note``
    #: says why there are none where they were asked for.
    mlp: list | None = None
    mlp_note: str | None = None
    mlp_dtypes: list[str] = field(default_factory=list)
    #: A compact fingerprint's values kept per head and form (the largest singular values; no planes); None: all.
    compact_values: int | None = None


#: Largest relative rounding of a folded offset gain's head (else the layer's gain is not folded: strict, never loose).
MAX_FOLDED_GAIN_ROUNDOFF = 2.0 ** -4


def layer_invariants(layer: AttentionLayer, gain: torch.Tensor | None, *, device: torch.device | str = "cpu",
                     scratch: Float64Buffers | None = None, gain_rounding: torch.Tensor | None = None,
                     split: SplitLayer | None = None) -> LayerInvariants:
    """The invariants of one canonical layer, with the input gain ``gain`` [d] (or None) folded in.

    ``gain_rounding`` [d]: a bound on each gain entry's rounding |d g_j| where it is not relative to the
    gain (an offset gain 1 + w: u |w_j|). Each folded head's eps is then
    u_W + (1 + u_W) ||diag(|dg|) W^h||_F / ||diag(g) W^h||_F (per RoPE plane on its two columns), which
    bounds ||d(diag(g) W^h)||_F / ||diag(g) W^h||_F as the scalar u_W + u_g + u_W u_g does for a stored gain."""
    L = for_analysis(layer, torch.device(device))
    u_w = {role: unit_roundoff(getattr(L, role).dtype) for role in ("W_Q", "W_K", "W_V", "W_O")}
    eps: dict = dict(u_w)
    plane_eps: dict = {}
    g = None
    if gain is not None:
        g = gain.to(device=L.W_Q.device, dtype=torch.float64)    # folded inside the float64 Gram chunks
        if gain_rounding is None:
            u_g = unit_roundoff(gain.dtype) if gain.is_floating_point() else 0.0
            for role in ("W_Q", "W_K", "W_V"):
                eps[role] = u_w[role] + u_g + u_w[role] * u_g
        else:
            cols = L.positional.rotary.plane_columns() if L.positional.rotary is not None else None
            dg = gain_rounding.to(device=g.device, dtype=torch.float64)
            for role in ("W_Q", "W_K", "W_V"):
                eps[role], plane_eps[role] = _offset_gain_eps(getattr(L, role), g, dg, u_w[role],
                                                              cols if role != "W_V" else None)
            if max(float(eps[r].max()) for r in ("W_Q", "W_K", "W_V")) > MAX_FOLDED_GAIN_ROUNDOFF:
                g, eps, plane_eps = None, dict(u_w), {}
    s = head_spectra(L, scratch, input_gain=g, split=split)
    R = s.factors
    kv = torch.arange(L.n_heads, device=R["R_Q"].device) // L.group_size
    by_head = {role: (e[kv] if role != "W_Q" and torch.is_tensor(e) else e) for role, e in eps.items()}
    radius_qk = _radius(R["R_Q"], R["R_K"][kv], by_head["W_Q"], by_head["W_K"])
    radius_ov = _radius(R["R_V"][kv], R["R_O"], by_head["W_V"], by_head["W_O"])
    radius_planes = None
    if s.qk_planes is not None:
        cols = torch.tensor(L.positional.rotary.plane_columns(), device=R["R_Q"].device)   # [P, 2]
        Qp = R["R_Q"][:, :, cols].permute(0, 2, 1, 3)                                      # [H, P, d_k, 2]
        Kp = R["R_K"][kv][:, :, cols].permute(0, 2, 1, 3)
        if plane_eps:
            radius_planes = _radius(Qp, Kp, plane_eps["W_Q"], plane_eps["W_K"][kv])
        else:
            radius_planes = _radius(Qp, Kp, eps["W_Q"], eps["W_K"])
    finite = (s.qk_ok & s.ov_ok).cpu()
    return LayerInvariants(index=layer.index, qk=s.qk.cpu(), ov=s.ov.cpu(),
                           planes=None if s.qk_planes is None else s.qk_planes.cpu(),
                           radius_qk=radius_qk.cpu(), radius_ov=radius_ov.cpu(),
                           radius_planes=None if radius_planes is None else radius_planes.cpu(),
                           finite=finite, structure=layer_structure(layer), gain_folded=g is not None)


def _offset_gain_eps(W: torch.Tensor, g: torch.Tensor, dg: torch.Tensor, u_w: float,
                     cols: list | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per head [H'] (and per RoPE plane [H', P]) relative rounding of diag(g) W^h for W [H', d, k] stored
    with unit roundoff u_w and a gain whose entries are rounded by at most dg [d] (absolute)."""
    W64 = W.to(torch.float64)
    n_g = (g[None, :, None] * W64).square().sum(1)              # [H', k] squared column norms of diag(g) W
    n_d = (dg[None, :, None] * W64).square().sum(1)             # of diag(|dg|) W
    del W64

    def ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
        return torch.where(den > 0, torch.sqrt(num / torch.where(den > 0, den, 1.0)),
                           torch.where(num > 0, torch.full_like(num, float("inf")), torch.zeros_like(num)))

    head = u_w + (1 + u_w) * ratio(n_d.sum(-1), n_g.sum(-1))
    planes = None
    if cols is not None:
        c = torch.tensor(cols, device=W.device)                   # [P, 2]
        planes = u_w + (1 + u_w) * ratio(n_d[:, c].sum(-1), n_g[:, c].sum(-1))
    return head, planes


def _radius(A: torch.Tensor, B: torch.Tensor, eps_a: float, eps_b: float) -> torch.Tensor:
    """Weyl bound on how far the singular values of A B^T move when A, B are rounded (see module doc).

    A, B [..., k, m]: factors with the norms of the stored ones (R factors share them)."""
    Fa, Fb = torch.linalg.matrix_norm(A), torch.linalg.matrix_norm(B)
    Sa, Sb = _spectral_norm(A), _spectral_norm(B)
    return eps_a * Fa * Sb + eps_b * Sa * Fb + (eps_a * eps_b + COMPUTE_RTOL) * Fa * Fb


def _spectral_norm(A: torch.Tensor) -> torch.Tensor:
    """An upper bound on ||A||_2 [...] for A [..., k, m] (a bound keeps the radius a bound).

    Two columns: exact, from the 2 x 2 Gram matrix [[a, b], [b, c]]:
    lambda_max = (a + c) / 2 + sqrt(((a - c) / 2)^2 + b^2). Otherwise the smaller of ||A||_F and
    sqrt(||A||_1 ||A||_inf) (Hoelder), with no SVD.
    """
    if A.shape[-1] == 2:
        x, y = A[..., 0], A[..., 1]
        a, b, c = (x * x).sum(-1), (x * y).sum(-1), (y * y).sum(-1)
        return torch.sqrt((a + c) / 2 + torch.sqrt(((a - c) / 2) ** 2 + b * b))
    absA = A.abs()
    holder = torch.sqrt(absA.sum(-2).amax(-1) * absA.sum(-1).amax(-1))
    return torch.minimum(holder, torch.linalg.matrix_norm(A))


def layer_structure(layer: AttentionLayer) -> dict:
    """What must agree for two layers to be the same function beyond the invariants."""
    pos = layer.positional
    out = {"heads": layer.n_heads, "kv_heads": layer.n_kv_heads, "d_model": layer.d_model, "d_k": layer.d_k,
           "d_v": layer.d_v, "positional": pos.kind, "rotary_dim": pos.rotary_dim, "scale": float(layer.scale),
           "causal": bool(layer.causal)}
    if pos.rotary is not None:
        out["pairing"] = pos.rotary.pairing
        out["inv_freq"] = [float(x) for x in pos.rotary.inv_freq.tolist()]
        out["attention_factor"] = float(pos.rotary.attention_factor)
    return out


def model_invariants(model, *, device: str | torch.device = "cpu", workers: int | None = None,
                     on_layer=None) -> ModelInvariants:
    """The invariants of every layer of an open :class:`idinspect.Model` (layers analysed in
    parallel as ``inspect`` does; results in layer order)."""
    from ..numerics.parallel import STREAM_BYTES, layer_plan, ordered_map
    from .gains import attention_input_gain_and_rounding

    require(model, "compare/fingerprint")
    dev = torch.device(device)
    n = model.num_layers
    gains_found: list[bool] = []
    layers = []
    layer_bytes = layer_bytes_in_flight(model)
    with layer_plan(layer_bytes, n, dev, Float64Buffers, workers) as (k, split):
        model.read_ahead(STREAM_BYTES - k * layer_bytes)      # the pass's budget left by its layers
        def one(i: int, scratch: Float64Buffers) -> LayerInvariants:
            layer = model.layer(i)
            found = attention_input_gain_and_rounding(model, i)
            gain, dg = found if found is not None else (None, None)
            if gain is not None and gain.shape[0] != layer.d_model:     # e.g. ELECTRA's embedding-size norm
                gain = None
            inv = layer_invariants(layer, gain, device=dev, scratch=scratch, gain_rounding=dg, split=split)
            gains_found.append(inv.gain_folded)
            return inv

        for i, inv in enumerate(ordered_map(one, n, k, Float64Buffers)):
            layers.append(inv)
            if on_layer is not None:
                on_layer(i, n)
    dtype = model.reader.dtype(model.adapter.attention_keys(0)[0]) if n else torch.float32
    return ModelInvariants(source=str(model.provenance.source), model=model.summary(), dtype=str(dtype).replace("torch.", ""),
                           unit_roundoff=unit_roundoff(dtype), gains_folded=bool(gains_found) and all(gains_found),
                           layers=layers)


def head_vectors(layers: list[LayerInvariants]) -> dict[str, torch.Tensor]:
    """Kind -> [N, k] rows of every head of every layer in order (planes flattened)."""
    out = {"qk": torch.cat([L.qk for L in layers]), "ov": torch.cat([L.ov for L in layers])}
    if layers and all(L.planes is not None for L in layers):
        out["planes"] = torch.cat([L.planes.flatten(1) for L in layers])
    return out
