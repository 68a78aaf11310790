"""The balanced gauge on canonical layers: invariants, function, orbit invariance, idempotence,
the defining conditions, non-uniqueness reports and refusals. Float64, tiny, no files needed
beyond the tiny checkpoints.

``random_gauge`` and ``synthetic_layer`` are reused by the export and verify tests.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import idinspect
from idinspect.errors import UnsupportedLayerError
from idinspect.forms import is_gauge_fixed, reference_attention
from idinspect.forms.per_head import (
    canonicalize,
    invariant_errors,
    structure,
)
from idinspect.forms.per_head.qk_centring import centres
from idinspect.forms.per_head.structure import (
    noop_key_bias_columns,
    unrotated_columns,
    value_bias_absorbable,
)
from idinspect.layer.attention_layer import AttentionLayer, Positional, RotarySpec
from tests.support import tiny

VARIANTS = tiny.variants()


# helpers ---------------------------------------------------------------------------------------

def _well_conditioned(n: int, g: torch.Generator) -> torch.Tensor:
    """A random GL(n) element with condition number of a few."""
    return torch.eye(n, dtype=torch.float64) + 0.4 * torch.randn(n, n, generator=g, dtype=torch.float64) / n ** 0.5


def qk_gauge_matrix(layer: AttentionLayer, g: torch.Generator) -> torch.Tensor:
    """A random element of the QK gauge group of one kv group: GL(d_k) without RoPE; with RoPE a
    complex scalar (scale times rotation) on each plane plus GL on the unrotated dims. Under a q/k
    norm W_Q and W_K carry no GL gauge (the gain trades move the norm gains): the identity."""
    dk = layer.d_k
    if layer.qk_norm is not None:
        return torch.eye(dk, dtype=torch.float64)
    A = torch.zeros(dk, dk, dtype=torch.float64)
    cols = list(unrotated_columns(layer))
    if cols:
        A[cols[0]:, cols[0]:] = _well_conditioned(len(cols), g)
    if layer.positional.kind == "rope":
        for i, j in layer.positional.rotary.plane_columns():
            s = 0.5 + torch.rand((), generator=g, dtype=torch.float64) * 1.5
            t = torch.rand((), generator=g, dtype=torch.float64) * 6.283
            A[i, i], A[i, j], A[j, i], A[j, j] = s * t.cos(), s * t.sin(), -s * t.sin(), s * t.cos()
    return A


def random_gauge(layer: AttentionLayer, seed: int = 0, generic_qk: bool = False) -> AttentionLayer:
    """``layer`` (float64) moved along its gauge orbit: a QK gauge A_g and a VO gauge B_g per kv group,
    plus the no-op key-bias and absorbable value-bias directions. ``generic_qk`` uses a generic
    GL(d_k) for QK instead, which is NOT a gauge under RoPE (the negative control)."""
    g = torch.Generator().manual_seed(seed)
    L = layer.to(torch.float64)
    G, r = L.n_kv_heads, L.group_size
    W_Q, W_K, W_V, W_O = L.W_Q.clone(), L.W_K.clone(), L.W_V.clone(), L.W_O.clone()
    b_Q = None if L.b_Q is None else L.b_Q.clone()
    b_K = None if L.b_K is None else L.b_K.clone()
    b_V = None if L.b_V is None else L.b_V.clone()
    b_O = None if L.b_O is None else L.b_O.clone()
    for k in range(G):
        A = _well_conditioned(L.d_k, g) if generic_qk else qk_gauge_matrix(L, g)
        A_inv_T = torch.linalg.inv(A).T
        B = _well_conditioned(L.d_v, g)
        B_inv = torch.linalg.inv(B)
        heads = range(k * r, (k + 1) * r)
        for h in heads:
            W_Q[h] = W_Q[h] @ A
            if b_Q is not None:
                b_Q[h] = b_Q[h] @ A
            W_O[h] = B_inv @ W_O[h]
        W_K[k] = W_K[k] @ A_inv_T
        W_V[k] = W_V[k] @ B
        if b_K is not None:
            b_K[k] = b_K[k] @ A_inv_T
        if b_V is not None:
            b_V[k] = b_V[k] @ B
    cols = list(noop_key_bias_columns(L))                  # none under a q/k norm, soft-capping or sinks
    if b_K is not None and cols and not generic_qk:
        b_K[:, cols] += torch.randn(G, len(cols), generator=g, dtype=torch.float64)
    if value_bias_absorbable(L):
        delta = torch.randn(G, L.d_v, generator=g, dtype=torch.float64)
        kv = torch.arange(L.n_heads) // r
        b_V = b_V + delta
        b_O = b_O - torch.einsum("hv,hvd->d", delta[kv], W_O)
    if centres(L) and not generic_qk:                      # LayerNorm q/k norm: W^h + w 1^T, b^h + s 1
        for W, b in ((W_Q, b_Q), (W_K, b_K)):
            W += torch.randn(W.shape[0], W.shape[1], 1, generator=g, dtype=torch.float64)
            if b is not None:
                b += torch.randn(b.shape[0], 1, generator=g, dtype=torch.float64)
    moved = L.replace(W_Q=W_Q, W_K=W_K, W_V=W_V, W_O=W_O, b_Q=b_Q, b_K=b_K, b_V=b_V, b_O=b_O)
    if L.qk_norm is None or L.qk_norm.q_gain is None or generic_qk:
        return moved
    moved = gain_trade(moved, g)
    norm, cols = moved.qk_norm, list(unrotated_columns(L))
    if norm.k_bias is not None and cols and structure.shift_invariant(L):   # Phi: the no-op part of the norm's key bias
        k_bias = norm.k_bias.clone().reshape(-1, L.d_k)
        k_bias[:, cols] += torch.randn(k_bias.shape[0], len(cols), generator=g, dtype=torch.float64)
        moved = moved.replace(qk_norm=dataclasses.replace(norm, k_bias=k_bias.reshape(norm.k_bias.shape)))
    return moved


def _gain_orbits(layer: AttentionLayer) -> list[list[int]]:
    orbits = [list(p) for p in layer.positional.rotary.plane_columns()] if layer.positional.kind == "rope" else []
    return orbits + [[u] for u in unrotated_columns(layer)]


def gain_norms(layer: AttentionLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """(query, key) multiplier norms [classes, orbits] over the stored entries each gain trade moves:
    the shared vectors' (one class), else per kv group its r query heads' and its key head's."""
    norm, dk, r = layer.qk_norm, layer.d_k, layer.group_size
    q = norm.q_gain.to(torch.float64).reshape(-1, dk) + norm.gain_offset
    k = norm.k_gain.to(torch.float64).reshape(-1, dk) + norm.gain_offset
    if q.shape[0] > 1:
        q = q.reshape(layer.n_kv_heads, r * dk)
        cols = lambda o: [h * dk + c for h in range(r) for c in o]  # noqa: E731
    else:
        cols = lambda o: o  # noqa: E731
    orbits = _gain_orbits(layer)
    nq = torch.stack([q[:, cols(o)].norm(dim=1) for o in orbits], 1)
    nk = torch.stack([k[:, o].norm(dim=1) for o in orbits], 1)
    return nq, nk


def key_gain_leads(layer: AttentionLayer) -> torch.Tensor:
    """[classes, orbits]: the largest-magnitude key multiplier of each orbit (the rule makes it positive)."""
    norm, dk = layer.qk_norm, layer.d_k
    k = norm.k_gain.to(torch.float64).reshape(-1, dk) + norm.gain_offset
    leads = [k[:, o].gather(1, k[:, o].abs().argmax(dim=1, keepdim=True))[:, 0] for o in _gain_orbits(layer)]
    return torch.stack(leads, 1)


def gain_trade(layer: AttentionLayer, g: torch.Generator, spread: float = 0.5) -> AttentionLayer:
    """``layer`` (float64) with its q/k norm gains traded by random c = +-e^(spread N(0, 1)) on every
    rotary plane and unrotated dim, per gain class (one for a gain vector all heads share, else per kv
    group): query multipliers (offset + w) and the biases after them times c, key ones over c. Written
    from docs/mathematics.md, independently of idinspect.forms.per_head.qk_gain_trade."""
    norm, dk, r = layer.qk_norm, layer.d_k, layer.group_size
    shared = norm.q_gain.numel() == dk
    orbits = _gain_orbits(layer)
    f = torch.ones(1 if shared else layer.n_kv_heads, dk, dtype=torch.float64)
    for cols in orbits:                                  # a scale and a random sign (c < 0 is a trade too)
        sign = torch.randint(0, 2, (f.shape[0], 1), generator=g).to(torch.float64) * 2 - 1
        f[:, cols] = sign * torch.exp(spread * torch.randn(f.shape[0], 1, generator=g, dtype=torch.float64))
    new = {}
    for role in ("q_gain", "k_gain", "q_bias", "k_bias"):
        t = getattr(norm, role)
        if t is None:
            continue
        offset = norm.gain_offset if role.endswith("gain") else 0.0
        rows = t.to(torch.float64).reshape(-1, dk) + offset                  # [1, d_k] shared, else [heads, d_k]
        per_row = f if shared else (f.repeat_interleave(r, 0) if role[0] == "q" else f)
        rows = rows * per_row if role[0] == "q" else rows / per_row
        new[role] = (rows - offset).reshape(t.shape)
    return layer.replace(qk_norm=dataclasses.replace(norm, **new))


def synthetic_layer(d: int = 12, H: int = 4, G: int = 2, dk: int = 6, rotary_dim: int = 0, pairing: str = "half",
                    biases: str = "qkvo", seed: int = 0, softcap: float | None = None,
                    sinks: bool = False) -> AttentionLayer:
    """A random canonical layer, optionally with (partial) RoPE of the given pairing, soft-capped
    scores and attention sinks."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    pos = Positional("none")
    if rotary_dim:
        inv = 1.0 / (10000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
        pos = Positional("rope", rotary=RotarySpec(pairing=pairing, rotary_dim=rotary_dim, inv_freq=inv))
    return AttentionLayer(index=0, W_Q=rnd(H, d, dk), W_K=rnd(G, d, dk), W_V=rnd(G, d, dk), W_O=rnd(H, dk, d),
                          b_Q=rnd(H, dk) if "q" in biases else None, b_K=rnd(G, dk) if "k" in biases else None,
                          b_V=rnd(G, dk) if "v" in biases else None, b_O=rnd(d) if "o" in biases else None,
                          scale=dk ** -0.5, causal=True, positional=pos, logit_softcap=softcap,
                          sinks=rnd(H) if sinks else None)


SYNTHETIC = {
    "no-rope-gqa": dict(),
    "partial-rope-half": dict(rotary_dim=2, d=12, H=2, G=2, dk=6),
    "partial-rope-interleaved": dict(rotary_dim=4, pairing="interleaved"),
    "full-rope-interleaved": dict(rotary_dim=6, pairing="interleaved", biases="qkv"),
    "full-rope-half-qwen2-biases": dict(rotary_dim=6, biases="qkv"),
    "mqa-no-bias": dict(G=1, biases=""),
    # live key bias (softcap, sinks) and value bias (sinks): nothing of them may be zeroed or folded
    "no-rope-softcap": dict(softcap=5.0),
    "no-rope-sinks": dict(sinks=True),
    "partial-rope-softcap-sinks": dict(rotary_dim=2, softcap=5.0, sinks=True),
    "no-rope-sinks-no-output-bias": dict(sinks=True, biases="qkv"),
}


def _layers():
    """(name, layer) for the synthetic layers and the first layer of every tiny HF variant."""
    out = [(name, synthetic_layer(**kw)) for name, kw in SYNTHETIC.items()]
    for v in VARIANTS:
        if "latent" in tiny.VARIANTS[v].tags:
            out.append(pytest.param(v, None, id=v, marks=pytest.mark.skip(
                reason="multi-head latent attention has its own gauge-fixed form (tests/forms/test_latent.py)")))
            continue
        model = idinspect.load(tiny.build(v))
        out.append((v, model.layer(min(1, model.num_layers - 1))))
    return out


LAYERS = _layers()
IDS = [entry.id if hasattr(entry, "id") else entry[0] for entry in LAYERS]


def _max_rel(a: AttentionLayer, b: AttentionLayer) -> float:
    """Largest relative change of any tensor, the q/k norm's gains and biases included."""
    worst = 0.0
    pairs = [(t, getattr(b, role)) for role, t in a.tensors().items()]
    if a.qk_norm is not None:
        pairs += [(getattr(a.qk_norm, r).to(torch.float64), getattr(b.qk_norm, r).to(torch.float64))
                  for r in ("q_gain", "k_gain", "q_bias", "k_bias") if getattr(a.qk_norm, r) is not None]
    for t, u in pairs:
        scale = max(float(t.norm()), float(u.norm()))
        worst = max(worst, float((t - u).norm()) / scale if scale else 0.0)
    return worst


def _x(layer: AttentionLayer, seed: int = 3) -> torch.Tensor:
    return torch.randn(2, 7, layer.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _out(layer: AttentionLayer, seed: int = 3) -> torch.Tensor:
    """The reference attention on N(0, 1) states (and N(0, 1) encoder states of 5 positions for a cross block)."""
    kv = torch.randn(2, 5, layer.d_model, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return reference_attention(layer, _x(layer, seed), x_kv=kv if layer.kind == "cross" else None)


# properties ------------------------------------------------------------------------------------


def test_balanced_factors_by_hand():
    """Step 2 without RoPE: equal diagonal Gram matrices, descending, key columns lead positive."""
    fixed, _ = canonicalize(synthetic_layer())
    r = fixed.group_size
    for g in range(fixed.n_kv_heads):
        Q = torch.cat([torch.cat([fixed.W_Q[h], fixed.b_Q[h][None]]) for h in range(g * r, (g + 1) * r)])
        K = fixed.W_K[g]
        Gq, Gk = Q.T @ Q, K.T @ K
        assert torch.allclose(Gq, Gk, atol=1e-10) and torch.allclose(Gq, torch.diag(torch.diagonal(Gq)), atol=1e-10)
        assert bool((torch.diagonal(Gq)[:-1] >= torch.diagonal(Gq)[1:]).all())
        lead = K[K.abs().argmax(dim=0), torch.arange(K.shape[1])]
        assert bool((lead > 0).all())
    assert torch.count_nonzero(fixed.b_K) == 0 and torch.count_nonzero(fixed.b_V) == 0


def test_plane_step_by_hand():
    """Step 3: equal plane norms, diagonal M with the larger entry first, proper rotation only."""
    layer = synthetic_layer(rotary_dim=6, biases="qkv")
    fixed, _ = canonicalize(layer)
    r = fixed.group_size
    for g in range(fixed.n_kv_heads):
        Q = torch.cat([torch.cat([fixed.W_Q[h], fixed.b_Q[h][None]]) for h in range(g * r, (g + 1) * r)])
        K = torch.cat([fixed.W_K[g], fixed.b_K[g][None]])
        for i, j in fixed.positional.rotary.plane_columns():
            Qp, Kp = Q[:, [i, j]], K[:, [i, j]]
            assert abs(float(Qp.norm() - Kp.norm())) <= 1e-12 * float(Qp.norm())
            M = Qp.T @ Qp + Kp.T @ Kp
            assert abs(float(M[0, 1])) <= 1e-12 * float(M.trace()) and float(M[0, 0]) >= float(M[1, 1])
            assert float(Kp[Kp[:, 0].abs().argmax(), 0]) > 0
    # the key bias is live under full RoPE: kept (moved by the gauge), not zeroed
    assert torch.count_nonzero(fixed.b_K) == fixed.b_K.numel()


def test_no_op_key_bias_zeroed_only_on_unrotated_dims():
    layer = synthetic_layer(rotary_dim=2, d=12, H=2, G=2, dk=6)
    fixed, report = canonicalize(layer)
    assert torch.count_nonzero(fixed.b_K[:, 2:]) == 0 and torch.count_nonzero(fixed.b_K[:, :2]) == 4
    assert report.zeroed_key_bias_dims == 2 * 4 and report.folded_value_bias


def test_value_bias_kept_without_output_bias():
    layer = synthetic_layer(rotary_dim=6, biases="qkv")
    fixed, report = canonicalize(layer)
    assert not report.folded_value_bias and fixed.b_O is None
    assert torch.count_nonzero(fixed.b_V) == fixed.b_V.numel()


def test_generic_qk_transform_under_rope_changes_invariants():
    """The negative control at layer level: GL(d_k) outside the RoPE commutant is caught."""
    layer = synthetic_layer(rotary_dim=6, biases="qkv")
    moved = random_gauge(layer, seed=5, generic_qk=True)
    errors = invariant_errors(layer, moved)
    assert errors["plane_QK"].error > 1e-2 and errors["W_OV"].error <= 1e-12
    y0, y1 = _out(layer), _out(moved)
    assert float((y0 - y1).norm() / y0.norm()) > 1e-3


def test_no_op_key_bias_is_ignored_by_invariants():
    layer = synthetic_layer()
    shifted = layer.replace(b_K=layer.b_K + 5.0)
    assert max(e.error for e in invariant_errors(layer, shifted).values()) <= 1e-14
    changed = layer.replace(b_Q=layer.b_Q + 0.5)
    assert invariant_errors(layer, changed)["W_QK"].error > 1e-2


def test_tied_singular_values_are_reported():
    """Orthonormal, equal-norm factors: every QK and VO singular value ties, and the planes too."""
    d, dk = 8, 4
    basis = torch.linalg.qr(torch.randn(d, dk, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[0]
    W = basis[None]
    layer = AttentionLayer(index=3, W_Q=W.clone(), W_K=W.clone(), W_V=W.clone(), W_O=W.transpose(1, 2).clone(),
                           scale=0.5)
    fixed, report = canonicalize(layer)
    blocks = {(dg.block, dg.index) for dg in report.degeneracies}
    assert {("qk", 0), ("qk", 1), ("qk", 2), ("vo", 0), ("vo", 2)} <= blocks
    assert all(dg.layer == 3 and dg.heads == (0,) and dg.relative_gap < 1e-6 for dg in report.degeneracies)
    assert "not unique" in report.degeneracies[0].describe()
    rope = layer.replace(positional=Positional("rope", rotary=RotarySpec("half", dk, torch.tensor([1.0, 0.1]))))
    _, report = canonicalize(rope)
    assert {dg.index for dg in report.degeneracies if dg.block == "plane"} == {0, 1}


def test_distinct_values_are_not_reported():
    _, report = canonicalize(synthetic_layer(rotary_dim=6))
    assert report.degeneracies == []


@pytest.mark.parametrize("flag", sorted(structure.UNMODELLED_FLAGS))
def test_unmodelled_layers_are_refused(flag):
    layer = synthetic_layer().replace(flags=frozenset({flag}))
    with pytest.raises(UnsupportedLayerError, match=flag):
        canonicalize(layer)


def test_rounded_gauge_fixed_form_still_counts_as_fixed():
    """is_gauge_fixed judges by the defining conditions, which survive rounding to bf16/fp32."""
    fixed, _ = canonicalize(idinspect.load(tiny.build("llama-gqa")).layer(0))
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        ok, worst, _ = is_gauge_fixed(fixed.to(dtype))
        assert ok, (dtype, worst)
        assert not is_gauge_fixed(random_gauge(fixed, 1).to(dtype))[0]


def test_invariant_errors_refuse_different_shapes():
    with pytest.raises(ValueError, match="shapes differ"):
        invariant_errors(synthetic_layer(), synthetic_layer(dk=4))


def test_the_mathematics_takes_open_models_and_never_opens_sources(tiny_dir):
    """analyze and is_gauge_fixed read what the caller opened; a path is refused, not loaded."""
    folder = tiny_dir("llama-gqa")
    for fn in (idinspect.analyze, idinspect.is_gauge_fixed):
        with pytest.raises(TypeError, match="idinspect.load"):
            fn(str(folder))
        with pytest.raises(TypeError, match="idinspect.load"):
            fn(folder)
    with idinspect.load(folder) as model:
        assert idinspect.analyze(model)["totals"]["layers"] == model.num_layers
        assert idinspect.is_gauge_fixed(model)[0] is False


def test_plane_rotations_under_a_gainless_norm_are_fixed_and_verified(tiny_dir):
    """Llama 4's RoPE layer (L2 norm after RoPE, no gains): rotating one plane of a kv group's query
    heads and key by the same random angle is no change (invariants <= 1e-12), both layers
    canonicalise to the same factors, and the balanced form passes its own check; rotating the
    queries alone is caught."""
    with idinspect.load(tiny_dir("llama4-text")) as m:
        layer = m.layer(0).to(torch.float64)
    assert layer.qk_norm is not None and layer.qk_norm.after_rope
    g = torch.Generator().manual_seed(11)
    (i, j), r = layer.positional.rotary.plane_columns()[1], layer.group_size
    W_Q, W_K = layer.W_Q.clone(), layer.W_K.clone()
    for grp in range(layer.n_kv_heads):
        t = float(torch.rand((), generator=g, dtype=torch.float64)) * 6.0
        R = torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64)
        W_K[grp][:, [i, j]] = W_K[grp][:, [i, j]] @ R
        for h in range(grp * r, (grp + 1) * r):
            W_Q[h][:, [i, j]] = W_Q[h][:, [i, j]] @ R
    moved = layer.replace(W_Q=W_Q, W_K=W_K)
    assert max(e.error for e in invariant_errors(layer, moved).values()) <= 1e-12
    a, _ = canonicalize(layer)
    b, _ = canonicalize(moved)
    assert torch.allclose(a.W_Q, b.W_Q, atol=1e-12) and torch.allclose(a.W_K, b.W_K, atol=1e-12)
    assert is_gauge_fixed(a).fixed and not is_gauge_fixed(moved).fixed
    queries_only = layer.replace(W_Q=W_Q)
    assert max(e.error for e in invariant_errors(layer, queries_only).values()) > 1e-3
