"""Structural facts of one canonical layer: gauge dimensions and which bias dims are inert.

These follow docs/mathematics.md and depend only on shapes, bias pattern and positional scheme,
never on weight values (weight-level facts are findings, in the analyzer).

    QK gauge per kv group:  GL(d_k)                        -> d_k^2          (no RoPE)
                            complex scalar per plane + GL   -> rd + (d_k - rd)^2   (RoPE, rd = rotary_dim)
    VO gauge per kv group:  GL(d_v)                        -> d_v^2
    no-op key bias:         the unrotated dims of b_K (all of them without RoPE), only where the softmax
                            is shift-invariant in the scores (no soft-capping, no sinks)
    absorbable value bias:  all of b_V when b_O exists (softmax rows sum to one: no sinks)
    redundant value bias:   max(0, G d_v - d) of a live b_V (no b_O, no sinks): it acts only through one d-vector
    relative-bias null:     H (1 + unreachable buckets), in the block that holds T5's relative-position
                            bias table: adding a constant to all of head h's buckets adds it to every
                            logit of a row, which the softmax cancels; a bucket no position pair uses
                            (bidirectional bucketing has one) never reaches the output

With a q/k norm (:class:`QKNorm`, docs/mathematics.md "Normalised queries and keys") the QK gauge
shrinks to what commutes with the norm and RoPE, c gain classes (1 for one gain vector all heads
share, G for gains per head or per projection):

    QK gauge, gains:        c (rd/2 + (d_k - rd))        one gain trade per plane / unrotated dim
    QK gauge, no gains (L2): G (rd/2 + (d_k - rd)(d_k - rd - 1)/2)   SO(2) per plane x O(d_k - rd)
    LayerNorm's centring:   H (d + [b_Q]) + G (d + [b_K]) a column shift w 1^T of each head's W
    key bias:               live (the norm is not shift-invariant): no no-op dims
    nearly unidentified:    H + G per-head (2 per-projection) scales of W_Q, W_K: the norm removes
                            them only up to eps (exact, and counted as unidentified, when eps = 0)

A norm without gains after RoPE (Llama 4) has the same counts as before it: RoPE is a rotation per
plane times one attention factor, so the rotated vector's RMS is the unrotated one's times that
factor, which the norm divides out; the gauge must commute with RoPE and keep each head's norm
either way. (With gains after RoPE the gains would not commute with the rotation: refused.)
A position-dependent query scale (Llama 4's temperature tuning) and chunked attention (a mask, like
a sliding window of at least 2) change no count either.
"""

from __future__ import annotations

import math

import torch

from ...errors import UnsupportedLayerError
from ...layer.attention_layer import AttentionLayer, RotarySpec
from ...layer.relative import unreachable_buckets

#: Flags under which the score is not shift-invariant over keys / rows do not sum to one, or the
#: map from weights to scores is not bilinear: none of the counts below would hold.
UNMODELLED_FLAGS = {
    "qk_norm": "a norm between the projection and the score breaks the GL(d_k) gauge",
    "qkv_clip": "clipping q/k/v is a nonlinearity between the weights and the score",
}


def qk_norm_gain_classes(layer: AttentionLayer) -> int:
    """c: 1 where one gain vector serves every head, G where gains are per head or per projection."""
    norm = layer.qk_norm
    return 1 if norm is not None and norm.shared_gain else layer.n_kv_heads


def qk_norm_scales(layer: AttentionLayer) -> int:
    """Independent scales of W_Q / W_K that the q/k norm divides out: H + G per head, 2 per projection."""
    norm = layer.qk_norm
    if norm is None:
        return 0
    return 2 if norm.scope == "projection" else layer.n_heads + layer.n_kv_heads


def qk_norm_centring_dims(layer: AttentionLayer) -> int:
    """LayerNorm subtracts each head's mean: W^h -> W^h + w 1^T (and b^h -> b^h + c 1) is exact."""
    norm = layer.qk_norm
    if norm is None or norm.kind != "layer":
        return 0
    d = layer.d_model
    return layer.n_heads * (d + (layer.b_Q is not None)) + layer.n_kv_heads * (d + (layer.b_K is not None))


def qk_norm_bias_shifts(layer: AttentionLayer) -> int:
    """The part of :func:`qk_norm_centring_dims` carried by biases (H [b_Q] + G [b_K])."""
    norm = layer.qk_norm
    if norm is None or norm.kind != "layer":
        return 0
    return layer.n_heads * (layer.b_Q is not None) + layer.n_kv_heads * (layer.b_K is not None)


def near_unidentified_dims(layer: AttentionLayer) -> int:
    """Directions the q/k norm removes only up to its eps (each normalised scale of W_Q, W_K); 0
    where eps = 0 (they are exact then and counted in :func:`qk_gauge_dim`)."""
    norm = layer.qk_norm
    return qk_norm_scales(layer) if norm is not None and norm.eps > 0 else 0


def require_modelled(layer: AttentionLayer) -> None:
    """Refuse a layer carrying a flag the mathematics does not model, naming the flag."""
    for flag in sorted(layer.flags):
        reason = UNMODELLED_FLAGS.get(flag, "not modelled")
        raise UnsupportedLayerError(f"layer {layer.index} has {flag} ({reason}); idinspect refuses rather than miscount")
    capped = [name for name, on in (("logit soft-capping", layer.logit_softcap is not None),
                                    ("attention sinks", layer.sinks is not None)) if on]
    if capped and layer.positional.kind in ("alibi", "relative"):
        raise UnsupportedLayerError(f"layer {layer.index} combines {' and '.join(capped)} with {layer.positional.kind} "
                                    "position biases, which no supported family does; the counts are not derived for it")
    norm = layer.qk_norm
    if norm is not None and (layer.logit_softcap is not None or layer.sinks is not None):
        raise UnsupportedLayerError(f"layer {layer.index}: a q/k norm together with soft-capping or sinks is not "
                                    "derived; idinspect refuses rather than miscount")
    if norm is not None and (norm.kind == "layer" and norm.scope != "head" or norm.kind not in ("rms", "layer", "l2")):
        raise UnsupportedLayerError(f"layer {layer.index}: a {norm.kind} q/k norm over each {norm.scope} is not modelled; "
                                    "idinspect refuses rather than miscount")
    if norm is not None and norm.after_rope and (norm.q_gain is not None or norm.q_bias is not None
                                                 or norm.kind != "l2" or norm.scope != "head"):
        raise UnsupportedLayerError(f"layer {layer.index}: a q/k norm after RoPE is derived only without gains over "
                                    "each head (Llama 4); idinspect refuses rather than miscount")
    if norm is not None and layer.positional.kind in ("alibi", "relative"):
        raise UnsupportedLayerError(f"layer {layer.index}: a q/k norm with {layer.positional.kind} positions is not "
                                    "modelled; idinspect refuses rather than miscount")
    if layer.positional.kind == "rope":
        check_rotary_frequencies(layer.positional.rotary, layer.index)
    if layer.sliding_window is not None and layer.sliding_window < 2:
        raise UnsupportedLayerError(f"layer {layer.index} has sliding window {layer.sliding_window}: each query sees at "
                                    "most itself, the softmax is constant and the QK count does not hold; refusing")
    chunk = getattr(layer, "attention_chunk", None)
    if chunk is not None and chunk < 2:
        raise UnsupportedLayerError(f"layer {layer.index} has attention chunks of {chunk}: each query sees at most "
                                    "itself, the softmax is constant and the QK count does not hold; refusing")
    if max(layer.d_k, layer.d_v) > layer.d_model:
        raise UnsupportedLayerError(f"layer {layer.index}: head width {max(layer.d_k, layer.d_v)} exceeds the model width "
                                    f"{layer.d_model}, so no head can have full rank and the gauge counts do not hold; refusing")


def check_rotary_frequencies(spec: RotarySpec, layer_index: int = 0) -> None:
    """Distinct plane frequencies in (0, pi) keep the RoPE commutant at one complex scalar per plane.

    Positions are integers, so a frequency acts only modulo 2 pi, and planes at f and -f are
    equivalent real representations: frequencies f, f' mix iff f = +-f' (mod 2 pi), and f = 0 or
    pi (mod 2 pi) gives a plane rotated by +-1 only (full GL(2)). Inside (0, pi) none of this can
    happen unless two frequencies are equal, so that range plus distinctness is exact.
    """
    f = spec.inv_freq.to(torch.float64)
    if f.numel() * 2 != spec.rotary_dim:
        raise UnsupportedLayerError(f"layer {layer_index}: RoPE has {f.numel()} frequencies for {spec.rotary_dim} "
                                    "rotary dims; expected one per plane")
    if not torch.isfinite(f).all() or (f >= math.pi).any() or (f < 0).any():
        raise UnsupportedLayerError(f"layer {layer_index}: RoPE ({spec.rope_type}) has frequencies outside [0, pi); at "
                                    "integer positions they alias with each other (mod 2 pi) and the count is not "
                                    "modelled; refusing")
    if (f == 0).any():
        raise UnsupportedLayerError(f"layer {layer_index}: RoPE ({spec.rope_type}) has zero frequencies; those planes are "
                                    "not rotated and the gauge group is larger than counted; refusing")
    if torch.unique(f).numel() != f.numel():
        raise UnsupportedLayerError(f"layer {layer_index}: RoPE ({spec.rope_type}) repeats a frequency; planes sharing it "
                                    "mix under the gauge, so the count would be wrong; refusing")


def rotary_dim(layer: AttentionLayer) -> int:
    return layer.positional.rotary_dim if layer.positional.kind == "rope" else 0


def qk_gauge_dim_per_group(layer: AttentionLayer) -> int:
    rd = rotary_dim(layer)
    return rd + (layer.d_k - rd) ** 2


def qk_gauge_dim(layer: AttentionLayer) -> int:
    """Dimension of the QK gauge group of the layer (summed over kv groups); with a q/k norm, the
    gain trades (or rotations, without gains), the centring shifts and, where eps = 0, the scales."""
    norm = layer.qk_norm
    if norm is None:
        return layer.n_kv_heads * qk_gauge_dim_per_group(layer)
    rd = rotary_dim(layer)
    ku = layer.d_k - rd
    if norm.q_gain is None:
        core = layer.n_kv_heads * (rd // 2 + ku * (ku - 1) // 2)
    else:
        core = qk_norm_gain_classes(layer) * (rd // 2 + ku)
    exact_scales = qk_norm_scales(layer) if norm.eps == 0 else 0
    return core + qk_norm_centring_dims(layer) + exact_scales


def vo_gauge_dim(layer: AttentionLayer) -> int:
    """G d_v^2: GL(d_v) per kv group (RoPE does not touch values)."""
    return layer.n_kv_heads * layer.d_v ** 2


def unrotated_columns(layer: AttentionLayer) -> range:
    """Head columns RoPE leaves alone (HF rotates the first rotary_dim dims)."""
    return range(rotary_dim(layer), layer.d_k)


def shift_invariant(layer: AttentionLayer) -> bool:
    """Does adding the same number to every score of a row leave the attention weights unchanged?

    True for softmax(s); false under soft-capping (c tanh(s / c) is non-linear in s) and under sinks
    (the sink logit does not move with the row).
    """
    return layer.logit_softcap is None and layer.sinks is None


def rows_sum_to_one(layer: AttentionLayer) -> bool:
    """Do each row's attention weights over the keys sum to one? False with sinks (1 - sigma_i^h)."""
    return layer.sinks is None


def noop_key_bias_columns(layer: AttentionLayer) -> range:
    """Head columns of b_K that cancel in the softmax: the unrotated ones where the softmax is
    shift-invariant (:func:`shift_invariant`), none otherwise."""
    return unrotated_columns(layer) if shift_invariant(layer) and layer.qk_norm is None else range(0)


def noop_key_bias_dims(layer: AttentionLayer) -> int:
    """Dims of b_K that cancel in the softmax: the unrotated part per kv head, under a shift-invariant
    softmax (live under soft-capping or sinks). Under a q/k norm b_K is live (the norm is not
    shift-invariant); a bias the norm adds after its gain (Phi) is the key bias then, and its
    unrotated part cancels the same way (per stored vector: once if shared)."""
    norm = layer.qk_norm
    if norm is not None:
        if norm.k_bias is None or not shift_invariant(layer):
            return 0
        return (norm.k_bias.numel() // layer.d_k) * len(unrotated_columns(layer))
    if layer.b_K is None:
        return 0
    return layer.n_kv_heads * len(noop_key_bias_columns(layer))


def value_bias_absorbable(layer: AttentionLayer) -> bool:
    """b_V adds the constant sum_h b_V W_O^h (rows sum to one), which b_O can take when it exists.
    Not with sinks: the term is sum_h (1 - sigma_i^h) b_V W_O^h, different for every query."""
    return layer.b_V is not None and layer.b_O is not None and rows_sum_to_one(layer)


def absorbable_value_bias_dims(layer: AttentionLayer) -> int:
    return layer.n_kv_heads * layer.d_v if value_bias_absorbable(layer) else 0


def redundant_value_bias_dims(layer: AttentionLayer) -> int:
    """Dims of a live b_V (no b_O) that change nothing: max(0, G d_v - d).

    Softmax rows sum to one, so b_V reaches the output only through the constant
    c = sum_g b_V^g S_g in R^d, with S_g = sum_{h in g} W_O^h [d_v, d]; the map b_V -> c has
    rank min(G d_v, d) for generic weights (measured with the Jacobian: e.g. Qwen2 d=8, H=G=4,
    d_k=4 has 8 more null directions than the gauge and bias counts above).
    With sinks each head's b_V^g W_O^h acts through its own weight 1 - sigma_i^h: none is redundant.
    """
    if layer.b_V is None or layer.b_O is not None or not rows_sum_to_one(layer):
        return 0
    return max(0, layer.n_kv_heads * layer.d_v - layer.d_model)


def relative_bias_shift_dims(layer: AttentionLayer) -> int:
    """H (1 + u) where the block holds a relative-position bias table, else 0: one constant shift per
    head's column of buckets cancels in the softmax, and each of the u buckets that no pair of
    positions ever reaches (:func:`relative.unreachable_buckets`: one in T5's bidirectional encoder
    bucketing, none past-only) is dead. The table adds terms that do not depend on any weight, so
    the QK and VO gauges are unchanged. Measured with the Jacobian of T5's own module."""
    rel = layer.positional.relative
    if layer.positional.kind != "relative" or rel is None or not rel.owned:
        return 0
    return layer.n_heads * (1 + unreachable_buckets(rel.bidirectional, rel.num_buckets, rel.max_distance))


def unidentified_dims(layer: AttentionLayer) -> int:
    """U = QK gauge + VO gauge + no-op key-bias dims + absorbable value-bias dims + redundant value-bias dims
    + relative-bias shift dims."""
    return (qk_gauge_dim(layer) + vo_gauge_dim(layer) + noop_key_bias_dims(layer) + absorbable_value_bias_dims(layer)
            + redundant_value_bias_dims(layer) + relative_bias_shift_dims(layer))
