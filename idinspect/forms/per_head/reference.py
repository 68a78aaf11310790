"""A float64 reference attention over the canonical form, for tests and verification.

    out_i = sum_h sum_j softmax_j(scale * <R_i q_i^h, R_j k_j^g(h)> + alibi + rel) v_j^g(h) W_O^h + b_O

(``rel`` = T5's relative-position bias table[bucket(j - i), h]). With ``logit_softcap`` c the score s
becomes c tanh(s / c) before the mask (Gemma 2); with ``sinks`` [H] head h's row is a softmax over
the visible scores and the extra logit sinks[h], whose probability is dropped (gpt-oss):

    p_ij = exp(s_ij) / (exp(sinks[h]) + sum_{j' visible} exp(s_ij'))

A q/k norm (:class:`QKNorm`) normalises q and k (biases included) before RoPE, or after it where
``after_rope`` (Llama 4): :func:`normalise`. A :class:`QueryTemperature` then multiplies query i by
tau(t_i); ``attention_chunk`` c hides key j from query i unless i // c == j // c.

Queries come from ``x``; keys and values from ``x_kv`` (the encoder's output for a cross-attention
block, ``x`` itself otherwise). A cross-attention block sees every key: no causal mask, no window.
"""

from __future__ import annotations

import torch

from ...errors import UnsupportedLayerError
from ...layer.attention_layer import AttentionLayer, QKNorm
from ...layer.relative import relative_logit_bias
from ...layer.rotary import apply_rotary, rotary_cos_sin


def reference_attention(layer: AttentionLayer, x: torch.Tensor, positions: torch.Tensor | None = None,
                        causal: bool | None = None, x_kv: torch.Tensor | None = None) -> torch.Tensor:
    """Attention output [B, T, d] for hidden states ``x`` [B, T, d], computed in float64.

    ``x_kv`` [B, S, d]: the states keys and values are computed from; required for a cross-attention
    block (``layer.kind == "cross"``: the encoder's output), ``x`` otherwise. ``positions`` [T]
    default to 0..T-1; ``causal`` defaults to the layer's own setting (always off for cross
    blocks). Sliding windows follow Hugging Face: key j is visible from query i iff |i - j| < w (and j <= i when
    causal).
    """
    if layer.flags:   # the qk_norm flag without QKNorm data: a norm the adapter could not describe
        raise UnsupportedLayerError(f"layer {layer.index}: the reference attention does not model {sorted(layer.flags)}")
    cross = layer.kind == "cross"
    if cross and x_kv is None:
        raise ValueError(f"layer {layer.index} is a cross-attention block: pass the encoder states as x_kv")
    L = layer.to(torch.float64)
    x = x.to(torch.float64)
    x_kv = x if x_kv is None else x_kv.to(torch.float64)
    B, T, _ = x.shape
    S = x_kv.shape[1]
    causal = (L.causal if causal is None else causal) and not cross
    positions = torch.arange(T) if positions is None else positions
    key_positions = positions if x_kv is x else torch.arange(S)

    q = torch.einsum("btd,hdk->bhtk", x, L.W_Q)
    k = torch.einsum("bsd,gdk->bgsk", x_kv, L.W_K)
    v = torch.einsum("bsd,gdk->bgsk", x_kv, L.W_V)
    if L.b_Q is not None:
        q = q + L.b_Q[None, :, None, :]
    if L.b_K is not None:
        k = k + L.b_K[None, :, None, :]
    if L.b_V is not None:
        v = v + L.b_V[None, :, None, :]

    norm = L.qk_norm
    if norm is not None and not norm.after_rope:
        q, k = normalise(q, norm, "q"), normalise(k, norm, "k")

    pos = L.positional
    if pos.kind == "rope":
        cos, sin = rotary_cos_sin(pos.rotary, positions, torch.float64)
        q = apply_rotary(q, pos.rotary, cos, sin)
        cos_k, sin_k = rotary_cos_sin(pos.rotary, key_positions, torch.float64)
        k = apply_rotary(k, pos.rotary, cos_k, sin_k)
    if norm is not None and norm.after_rope:
        q, k = normalise(q, norm, "q"), normalise(k, norm, "k")
    if L.query_temperature is not None:
        q = q * L.query_temperature.scales(positions).to(torch.float64)[None, None, :, None]

    r = L.group_size
    k = k.repeat_interleave(r, dim=1)
    v = v.repeat_interleave(r, dim=1)
    scores = L.scale * q @ k.transpose(-1, -2)
    if L.logit_softcap is not None:
        scores = L.logit_softcap * torch.tanh(scores / L.logit_softcap)
    if pos.kind == "alibi":
        scores = scores + pos.alibi_slopes.to(torch.float64)[None, :, None, None] * key_positions.to(torch.float64)[None, None, None, :]
    if pos.kind == "relative":
        scores = scores + relative_logit_bias(pos.relative, positions, key_positions)[None]

    i = positions[:, None]
    j = key_positions[None, :]
    visible = torch.ones(T, S, dtype=torch.bool)
    if causal:
        visible &= j <= i
    if L.sliding_window is not None and not cross:   # |i - j| < w: i - w < j <= i when causal, both sides otherwise
        visible &= (i - j).abs() < L.sliding_window
    if L.attention_chunk is not None and not cross:
        visible &= torch.div(i, L.attention_chunk, rounding_mode="floor") == torch.div(j, L.attention_chunk,
                                                                                      rounding_mode="floor")
    scores = scores.masked_fill(~visible, float("-inf"))
    if L.sinks is None:
        probs = torch.softmax(scores, dim=-1)
    else:
        sink = L.sinks.to(torch.float64)[None, :, None, None].expand(B, -1, T, 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    z = probs @ v
    out = torch.einsum("bhtv,hvd->btd", z, L.W_O)
    if L.b_O is not None:
        out = out + L.b_O
    return out


def normalise(y: torch.Tensor, norm: QKNorm, which: str) -> torch.Tensor:
    """q [B, H, T, d_k] or k [B, G, S, d_k] through the q/k norm ``which`` ("q" or "k"), float64:
    y -> n(y) (gain_offset + gain) + bias, n over each head's dims or over all heads' dims at once."""
    B, n, T, dk = y.shape
    flat = y.transpose(1, 2).reshape(B, T, n * dk) if norm.scope == "projection" else y
    if norm.kind == "layer":
        flat = flat - flat.mean(-1, keepdim=True)
    flat = flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + norm.eps)
    out = flat.reshape(B, T, n, dk).transpose(1, 2) if norm.scope == "projection" else flat
    gains = norm.gains(n, dk, which)
    if gains is not None:
        out = out * gains.to(torch.float64)[None, :, None, :]
    bias = norm.biases(n, dk, which)
    if bias is not None:
        out = out + bias.to(torch.float64)[None, :, None, :]
    return out
