"""Function-preserving disguises of a model in the working form of :mod:`bench.disguise_models`.

Each attack takes (work, meta, generator) and returns (work', meta', T): the disguised weights, the
possibly changed Meta (a tied head untied), and T [d, d], the map of the residual stream that the
model's exposed hidden states undergo (None: outputs unchanged; BERT's last hidden state is the
residual stream itself). An attack that the architecture does not allow raises :class:`NotApplicable`
with the reason. Conventions: nn.Linear layout, y = x W^T + b; a residual map x -> x T.

- ``mlp_perm``: a permutation of each layer's MLP units (rows of gate/up, columns of down).
- ``head_perm``: a permutation of each layer's kv groups and of the query heads within each group.
- ``resid_perm_sign``: x -> x P S (P a permutation, S random signs; signs only with RMSNorm: LayerNorm's
  centring commutes with permutations, not with sign flips). Gains and LayerNorm biases follow P.
- ``resid_rotation``: every norm gain (and LayerNorm bias) folded into the linears that read it, then
  x -> x R with R Haar-orthogonal (RMSNorm) or orthogonal with R 1 = 1 (LayerNorm: rotations inside
  the centred subspace commute with centring). A tied head is untied (the final gain lives in it).
  Not for a post-norm BERT (its gain sits on the residual stream).
- ``head_gl``: per kv group, QK gauge Q -> Q A, K -> K A^-T with A in GL(d_k) (not a symmetry under
  RoPE: there only the VO part applies, the QK part is ``rope_plane``) and VO gauge V -> V B, O -> B^-1 O.
- ``rope_plane``: per kv group and rotary plane (i, i + d_k/2) a scale x rotation M = s Rot(t):
  Q_p -> Q_p M, K_p -> K_p M^-T (M commutes with the position rotation).
- ``gain_rescale``: every pre-norm's gain g -> g * c (c > 0 random, non-uniform; LayerNorm bias too),
  undone in the readers W -> W diag(1/c) (a tied head untied). Not for a post-norm BERT.
- ``mlp_scale``: gated MLPs (SwiGLU/GeGLU): up row i * a_i (any sign), down column i / a_i. The gate
  cannot be rescaled (SiLU/GELU are not homogeneous); for ungated GELU MLPs nothing applies.
- ``bf16``: no change of the weights, stored in bfloat16 (see :data:`STORED_BF16`).
- ``all``: every applicable attack above in sequence, stored in bfloat16.
"""

from __future__ import annotations

import math

import torch

from .disguise_models import Meta, copy_meta


class NotApplicable(Exception):
    """The architecture does not allow this disguise (the message says why)."""


def _layers(meta: Meta) -> range:
    return range(meta.layers)


def mlp_perm(w, meta: Meta, gen):
    w = dict(w)
    for i in _layers(meta):
        f = w[f"{i}.up"].shape[0]
        p = torch.randperm(f, generator=gen)
        for n in ("gate", "up"):
            if f"{i}.{n}" in w:
                w[f"{i}.{n}"] = w[f"{i}.{n}"][p]
            if f"{i}.{n}.b" in w:
                w[f"{i}.{n}.b"] = w[f"{i}.{n}.b"][p]
        w[f"{i}.down"] = w[f"{i}.down"][:, p]
    return w, meta, None


def head_perm(w, meta: Meta, gen):
    w = dict(w)
    H, G, r, dk = meta.heads, meta.kv_heads, meta.group, meta.d_k
    for i in _layers(meta):
        groups = torch.randperm(G, generator=gen)
        order = torch.cat([g * r + torch.randperm(r, generator=gen) for g in groups.tolist()])
        for n, idx, count in (("q", order, H), ("k", groups, G), ("v", groups, G)):
            W = w[f"{i}.{n}"]
            w[f"{i}.{n}"] = W.view(count, dk, -1)[idx].reshape(W.shape)
            if f"{i}.{n}.b" in w:
                w[f"{i}.{n}.b"] = w[f"{i}.{n}.b"].view(count, dk)[idx].reshape(-1)
        O = w[f"{i}.o"]
        w[f"{i}.o"] = O.view(O.shape[0], H, dk)[:, order].reshape(O.shape)
    return w, meta, None


READERS = {"n1": ("q", "k", "v"), "n2": ("gate", "up")}
WRITERS = ("o", "down")


def _residual_names(w, meta: Meta):
    """(readers [out, d], writers [d, in] with their bias names, embeddings [rows, d], norms (gain, bias))."""
    readers, writers, norms = [], [], []
    for i in _layers(meta):
        readers += [f"{i}.{n}" for n in ("q", "k", "v", "gate", "up") if f"{i}.{n}" in w]
        writers += [f"{i}.{n}" for n in WRITERS]
        norms += [f"{i}.n1", f"{i}.n2"]
    readers += [n for n in ("head", "pooler") if n in w]
    norms += [n for n in ("nf", "emb_norm") if n in w]
    embeddings = [n for n in ("emb", "pos", "type") if n in w]
    return readers, writers, embeddings, norms


def _apply_residual(w, meta: Meta, T: torch.Tensor, signed_permutation: bool):
    """x -> x T on the residual stream: embeddings E T, readers W T, writers T^T W (bias b T); gains and
    LayerNorm biases follow a signed permutation as |T| (gains) and T (biases); under a rotation they
    must already be ones / zeros (folded)."""
    w = dict(w)
    readers, writers, embeddings, norms = _residual_names(w, meta)
    for n in embeddings:
        w[n] = w[n] @ T
    for n in readers:
        w[n] = w[n] @ T
    for n in writers:
        w[n] = T.T @ w[n]
        if f"{n}.b" in w:
            w[f"{n}.b"] = w[f"{n}.b"] @ T
    P = T.abs()
    for n in norms:
        if signed_permutation:
            w[n] = _gain_of(w[n], meta) @ P
            w[n] = _stored_gain(w[n], meta)
            if f"{n}.b" in w:
                w[f"{n}.b"] = w[f"{n}.b"] @ T            # (LN(x) g + b) T = LN(x T) (g |T|) + b T
        else:
            g = _gain_of(w[n], meta)
            if not torch.equal(g, torch.ones_like(g)) or (f"{n}.b" in w and bool(w[f"{n}.b"].abs().max() > 0)):
                raise ValueError(f"{n}: gains must be folded before a rotation")
    if meta.tied and "head" not in w and not signed_permutation:
        raise ValueError("a rotation of a tied model needs its head untied first")
    return w


def _gain_of(stored: torch.Tensor, meta: Meta) -> torch.Tensor:
    return stored + 1.0 if meta.norm == "gemma" else stored


def _stored_gain(gain: torch.Tensor, meta: Meta) -> torch.Tensor:
    return gain - 1.0 if meta.norm == "gemma" else gain


def resid_perm_sign(w, meta: Meta, gen):
    d = meta.d
    P = torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=gen)]
    if meta.norm in ("rms", "gemma"):
        S = torch.where(torch.rand(d, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
        T = P * S[None, :]
    else:
        T = P            # LayerNorm centres: x -> x S changes the mean, only permutations commute
    return _apply_residual(w, meta, T, True), meta, T if meta.post_ln else None


def _untie(w, meta: Meta):
    meta = copy_meta(meta)
    if meta.tied:
        w = dict(w)
        w["head"] = w["emb"].clone()
        meta.tied = False
        meta.notes.append("head untied")
    return w, meta


def fold_gains(w, meta: Meta):
    """Every pre-norm's gain (and LayerNorm bias) into its readers; gains -> 1, biases -> 0."""
    if meta.post_ln:
        raise NotApplicable("post-norm: the norm's gain sits on the residual stream, there is no linear to fold it into")
    w, meta = _untie(w, meta)
    w = dict(w)
    for i in _layers(meta):
        for n, readers in READERS.items():
            _fold(w, meta, f"{i}.{n}", [f"{i}.{r}" for r in readers if f"{i}.{r}" in w])
    _fold(w, meta, "nf", ["head"])
    return w, meta


def _fold(w, meta: Meta, norm: str, readers: list[str]):
    g = _gain_of(w[norm], meta)
    b = w.get(f"{norm}.b")
    for r in readers:
        if b is not None and bool(b.abs().max() > 0):
            if f"{r}.b" not in w:
                raise NotApplicable(f"{norm}: a LayerNorm bias cannot be folded into {r}, which has no bias")
            w[f"{r}.b"] = w[f"{r}.b"] + w[r] @ b
        w[r] = w[r] * g[None, :]
    w[norm] = _stored_gain(torch.ones_like(g), meta)
    if b is not None:
        w[f"{norm}.b"] = torch.zeros_like(b)


def random_orthogonal(n: int, gen) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))[None, :]


def resid_rotation(w, meta: Meta, gen):
    w, meta = fold_gains(w, meta)
    d = meta.d
    if meta.norm == "ln":
        # R = 1 1^T / d + U Q U^T, U an orthonormal basis of the centred subspace: R 1 = 1, R orthogonal
        ones = torch.full((d, 1), d ** -0.5, dtype=torch.float64)
        U = torch.linalg.qr(torch.cat([ones, torch.randn(d, d - 1, generator=gen, dtype=torch.float64)], 1))[0][:, 1:]
        R = ones @ ones.T + U @ random_orthogonal(d - 1, gen) @ U.T
    else:
        R = random_orthogonal(d, gen)
    return _apply_residual(w, meta, R, False), meta, None


def _gl(k: int, gen) -> torch.Tensor:
    return torch.eye(k, dtype=torch.float64) + 0.5 * torch.randn(k, k, generator=gen, dtype=torch.float64) / math.sqrt(k)


def head_gl(w, meta: Meta, gen):
    """QK GL (no RoPE) and VO GL per kv group."""
    w = dict(w)
    H, G, r, dk = meta.heads, meta.kv_heads, meta.group, meta.d_k
    for i in _layers(meta):
        q, k, v = (w[f"{i}.{n}"].view(-1, dk, meta.d).clone() for n in "qkv")
        bq, bk, bv = (w[f"{i}.{n}.b"].view(-1, dk).clone() if f"{i}.{n}.b" in w else None for n in "qkv")
        O = w[f"{i}.o"].view(meta.d, H, dk).clone()
        for g in range(G):
            heads = range(g * r, (g + 1) * r)
            if not meta.rope:
                A = _gl(dk, gen)
                Ai = torch.linalg.inv(A)
                for h in heads:
                    q[h] = A.T @ q[h]                         # Q -> Q A
                    if bq is not None:
                        bq[h] = A.T @ bq[h]
                k[g] = Ai @ k[g]                               # K -> K A^-T
                if bk is not None:
                    bk[g] = Ai @ bk[g]
            B = _gl(dk, gen)
            v[g] = B.T @ v[g]                                  # V -> V B
            if bv is not None:
                bv[g] = B.T @ bv[g]
            for h in heads:
                O[:, h] = O[:, h] @ torch.linalg.inv(B).T      # O -> B^-1 O
        for n, t in zip("qkv", (q, k, v)):
            w[f"{i}.{n}"] = t.reshape(-1, meta.d)
        for n, t in zip("qkv", (bq, bk, bv)):
            if t is not None:
                w[f"{i}.{n}.b"] = t.reshape(-1)
        w[f"{i}.o"] = O.reshape(meta.d, H * dk)
    if meta.rope:
        meta = copy_meta(meta)
        meta.notes.append("QK GL is not a symmetry under RoPE: VO part only (QK: rope_plane)")
    return w, meta, None


def rope_plane(w, meta: Meta, gen):
    if not meta.rope:
        raise NotApplicable("no RoPE")
    w = dict(w)
    r, dk, half = meta.group, meta.d_k, meta.d_k // 2
    for i in _layers(meta):
        q, k = (w[f"{i}.{n}"].view(-1, dk, meta.d).clone() for n in "qk")
        bq, bk = (w[f"{i}.{n}.b"].view(-1, dk).clone() if f"{i}.{n}.b" in w else None for n in "qk")
        for g in range(meta.kv_heads):
            for plane in range(half):
                rows = [plane, plane + half]
                s = math.exp(float(torch.randn((), generator=gen)))
                t = float(torch.rand((), generator=gen)) * 2 * math.pi
                M = s * torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64)
                Mi = torch.linalg.inv(M)
                for h in range(g * r, (g + 1) * r):
                    q[h, rows] = M.T @ q[h, rows]              # Q_p -> Q_p M
                    if bq is not None:
                        bq[h, rows] = M.T @ bq[h, rows]
                k[g, rows] = Mi @ k[g, rows]                   # K_p -> K_p M^-T
                if bk is not None:
                    bk[g, rows] = Mi @ bk[g, rows]
        w[f"{i}.q"], w[f"{i}.k"] = q.reshape(-1, meta.d), k.reshape(-1, meta.d)
        if bq is not None:
            w[f"{i}.q.b"] = bq.reshape(-1)
        if bk is not None:
            w[f"{i}.k.b"] = bk.reshape(-1)
    return w, meta, None


def gain_rescale(w, meta: Meta, gen):
    if meta.post_ln:
        raise NotApplicable("post-norm: the norm's gain sits on the residual stream, no linear can undo its rescaling")
    w, meta = _untie(w, meta)
    w = dict(w)
    pairs = [(f"{i}.{n}", [f"{i}.{r}" for r in rs if f"{i}.{r}" in w]) for i in _layers(meta) for n, rs in READERS.items()]
    for norm, readers in pairs + [("nf", ["head"])]:
        c = torch.exp(0.7 * torch.randn(meta.d, generator=gen, dtype=torch.float64))
        w[norm] = _stored_gain(_gain_of(w[norm], meta) * c, meta)
        if f"{norm}.b" in w:
            w[f"{norm}.b"] = w[f"{norm}.b"] * c
        for r in readers:
            w[r] = w[r] / c[None, :]
    return w, meta, None


def mlp_scale(w, meta: Meta, gen):
    if not meta.gated:
        raise NotApplicable("ungated GELU MLP: no unit can be rescaled (GELU is not homogeneous)")
    w = dict(w)
    for i in _layers(meta):
        f = w[f"{i}.up"].shape[0]
        a = torch.exp(torch.randn(f, generator=gen, dtype=torch.float64))
        a = a * torch.where(torch.rand(f, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
        w[f"{i}.up"] = w[f"{i}.up"] * a[:, None]
        if f"{i}.up.b" in w:
            w[f"{i}.up.b"] = w[f"{i}.up.b"] * a
        w[f"{i}.down"] = w[f"{i}.down"] / a[None, :]
    return w, meta, None


def bf16(w, meta: Meta, gen):
    return w, meta, None


def combined(w, meta: Meta, gen):
    T_total, applied = None, []
    for name, attack in ATTACKS.items():
        if name in ("bf16", "all"):
            continue
        try:
            w, meta, T = attack(w, meta, gen)
        except NotApplicable:
            continue
        applied.append(name)
        if T is not None:
            T_total = T if T_total is None else T_total @ T
    meta = copy_meta(meta)
    meta.notes.append("applied: " + ", ".join(applied))
    return w, meta, T_total


ATTACKS = {"mlp_perm": mlp_perm, "head_perm": head_perm, "resid_perm_sign": resid_perm_sign,
           "resid_rotation": resid_rotation, "head_gl": head_gl, "rope_plane": rope_plane,
           "gain_rescale": gain_rescale, "mlp_scale": mlp_scale, "bf16": bf16, "all": combined}
#: Attacks whose disguised checkpoint is stored in bfloat16 (the others in the original's dtype).
STORED_BF16 = ("bf16", "all")
