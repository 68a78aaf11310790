"""A float64 reference of multi-head latent attention over :class:`LatentAttentionLayer` (formulas in
:mod:`.latent_layer`), for tests and the Jacobian checks. Self-attention only (MLA has no cross blocks)."""

from __future__ import annotations

import torch

from ...errors import UnsupportedLayerError
from ...layer.latent_layer import LatentAttentionLayer
from ...layer.rotary import apply_rotary, rotary_cos_sin


def rms_norm(z: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """z / sqrt(mean(z^2, last dim) + eps) * gain, in z's dtype (as the DeepSeek RMSNorm, minus its float32 cast)."""
    return gain * (z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps))


def latent_queries(L: LatentAttentionLayer, x: torch.Tensor) -> torch.Tensor:
    """q [B, H, T, n + e] (before RoPE)."""
    if L.W_Q is not None:
        return torch.einsum("btd,hdk->bhtk", x, L.W_Q)
    a = x @ L.W_QA
    if L.b_QA is not None:
        a = a + L.b_QA
    return torch.einsum("btr,hrk->bhtk", rms_norm(a, L.g_Q, L.eps_Q), L.W_QB)


def latent_keys_values(L: LatentAttentionLayer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(no-position keys [B, H, T, n], shared rotary key [B, T, e] before RoPE, values [B, H, T, v])."""
    z = x @ L.W_KVA
    if L.b_KVA is not None:
        z = z + L.b_KVA
    c = rms_norm(z, L.g_KV, L.eps_KV)
    k_rope = x @ L.W_KR
    if L.b_KR is not None:
        k_rope = k_rope + L.b_KR
    return torch.einsum("btr,hrn->bhtn", c, L.W_KB), k_rope, torch.einsum("btr,hrv->bhtv", c, L.W_VB)


def latent_reference_attention(layer: LatentAttentionLayer, x: torch.Tensor, positions: torch.Tensor | None = None,
                               causal: bool | None = None) -> torch.Tensor:
    """Attention output [B, T, d] of the MLA block for hidden states ``x`` [B, T, d], in float64.

    ``positions`` [T] default to 0..T-1; ``causal`` to the layer's own setting.
    """
    if layer.flags:
        raise UnsupportedLayerError(f"layer {layer.index}: the reference attention does not model {sorted(layer.flags)}")
    L = layer.to(torch.float64)
    x = x.to(torch.float64)
    T = x.shape[1]
    positions = torch.arange(T) if positions is None else positions
    causal = L.causal if causal is None else causal
    n = L.d_nope

    q = latent_queries(L, x)
    k_nope, k_rope, v = latent_keys_values(L, x)
    spec = L.positional.rotary
    cos, sin = rotary_cos_sin(spec, positions, torch.float64)
    q_rope = apply_rotary(q[..., n:], spec, cos, sin)
    k_rope = apply_rotary(k_rope, spec, cos, sin)
    scores = L.scale * (q[..., :n] @ k_nope.transpose(-1, -2) + q_rope @ k_rope[:, None].transpose(-1, -2))
    i, j = positions[:, None], positions[None, :]
    visible = torch.ones(T, T, dtype=torch.bool)
    if causal:
        visible &= j <= i
    if L.sliding_window is not None:
        visible &= (i - j).abs() < L.sliding_window
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    out = torch.einsum("bhtv,hvd->btd", probs @ v, L.W_O)
    return out + L.b_O if L.b_O is not None else out
