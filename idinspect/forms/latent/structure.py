"""Structural identification counts of multi-head latent attention (docs/mathematics.md, "Multi-head
latent attention"). Shapes only, never weight values; notation of :mod:`.latent_layer`.

    no-position QK gauge   H n^2          q^h[:n] A_h, k^h A_h^-T with A_h in GL(n), per head (W_QB or W_Q
                                          columns, W_KB columns)
    rotary QK gauge        e              one complex scalar per rotary plane, shared by all heads: the
                                          rotary key is one tensor W_KR for every head
    VO gauge               H v^2          W_VB^h B_h, B_h^-1 W_O^h, per head
    latent gauge           r(r+1)/2       per latent (key/value; query too when r_q > 0): N(z O) = N(z) O
                                          for O orthogonal (before the gain), so z -> z O with the
                                          up-projection taking diag(g')^-1 O^T diag(g) W_B is exact:
                                          r(r-1)/2 rotations + r gain trades (g against W_B's rows)
    nearly unidentified    1 per latent   the latent's overall scale (W_A, b_A -> s W_A, s b_A) is divided
                                          out by the norm only up to eps: N(s z) - N(z) ~ eps / mean(z^2);
                                          exact (and counted in the latent gauge) when eps = 0

Biases: b_QA and b_KVA move with their latent's rotation (no extra freedom); the rotary key bias
b_KR is rotated and therefore live; there is no value bias (W_VB has none), so b_O is live.
Every rotary plane must have its own frequency in (0, pi) (:func:`structure.check_rotary_frequencies`)
and the widths must allow full-rank factors (:func:`require_modelled_latent`), else the counts do
not hold and the layer is refused.
"""

from __future__ import annotations

from ...errors import UnsupportedLayerError
from ...layer.latent_layer import LatentAttentionLayer
from ..per_head.structure import UNMODELLED_FLAGS, check_rotary_frequencies


def require_modelled_latent(layer: LatentAttentionLayer) -> None:
    """Refuse an MLA block whose counts would not hold, naming why."""
    for flag in sorted(layer.flags):
        reason = UNMODELLED_FLAGS.get(flag, "not modelled")
        raise UnsupportedLayerError(f"layer {layer.index} has {flag} ({reason}); idinspect refuses rather than miscount")
    if layer.positional.kind != "rope" or layer.positional.rotary is None:
        raise UnsupportedLayerError(f"layer {layer.index}: multi-head latent attention without RoPE is not modelled")
    if layer.positional.rotary_dim != layer.d_rope:
        raise UnsupportedLayerError(f"layer {layer.index}: RoPE rotates {layer.positional.rotary_dim} dims but the "
                                    f"rotary key has {layer.d_rope}; refusing")
    check_rotary_frequencies(layer.positional.rotary, layer.index)
    d, r, rq, n, v = layer.d_model, layer.kv_rank, layer.q_rank, layer.d_nope, layer.d_v
    limits = [("kv_lora_rank", r, d), ("qk_nope_head_dim", n, r), ("v_head_dim", v, min(r, d)),
              ("qk_rope_head_dim", layer.d_rope, d)]
    if rq:
        limits += [("q_lora_rank", rq, d), ("qk_nope_head_dim", n, rq), ("qk_rope_head_dim", layer.d_rope, rq)]
    for name, value, bound in limits:
        if value > bound:
            raise UnsupportedLayerError(f"layer {layer.index}: {name} {value} exceeds {bound}, so the factors cannot "
                                        "have full rank and the latent-attention counts do not hold; refusing")
    if layer.sliding_window is not None and layer.sliding_window < 2:
        raise UnsupportedLayerError(f"layer {layer.index} has sliding window {layer.sliding_window}; refusing")


def nope_gauge_dim(layer: LatentAttentionLayer) -> int:
    """H n^2: GL(n) per head on the no-position query/key part."""
    return layer.n_heads * layer.d_nope ** 2


def rope_gauge_dim(layer: LatentAttentionLayer) -> int:
    """e: a complex scalar per rotary plane, one for all heads (the rotary key is shared)."""
    return layer.d_rope


def qk_gauge_dim(layer: LatentAttentionLayer) -> int:
    return nope_gauge_dim(layer) + rope_gauge_dim(layer)


def vo_gauge_dim(layer: LatentAttentionLayer) -> int:
    """H v^2: GL(v) per head between W_VB and W_O."""
    return layer.n_heads * layer.d_v ** 2


def latent_ranks(layer: LatentAttentionLayer) -> list[tuple[str, int, float]]:
    """(name, rank, eps) of each normalised latent: the query latent (where r_q > 0), then the key/value one."""
    out = [("q", layer.q_rank, layer.eps_Q)] if layer.q_rank else []
    return out + [("kv", layer.kv_rank, layer.eps_KV)]


def latent_gauge_dim(layer: LatentAttentionLayer) -> int:
    """sum over latents of r(r+1)/2 (rotations and gain trades), plus each latent's scale where its eps is 0."""
    return sum(r * (r + 1) // 2 + (eps == 0) for _, r, eps in latent_ranks(layer))


def near_unidentified_dims(layer: LatentAttentionLayer) -> int:
    """One per latent whose norm has eps > 0: its overall scale, removed by the norm only up to eps."""
    return sum(1 for _, _, eps in latent_ranks(layer) if eps > 0)


def unidentified_dims(layer: LatentAttentionLayer) -> int:
    """Exact U = H n^2 + e + H v^2 + sum_latents r(r+1)/2 (+ the scales of latents with eps = 0)."""
    return qk_gauge_dim(layer) + vo_gauge_dim(layer) + latent_gauge_dim(layer)


def bias_free_parameters(layer: LatentAttentionLayer) -> int:
    """P without the biases b_QA, b_KVA, b_KR, b_O (norm gains included)."""
    biases = sum(t.numel() for role in ("b_QA", "b_KVA", "b_KR", "b_O") if (t := getattr(layer, role)) is not None)
    return layer.parameter_count() - biases
