"""LayerNorm q/k norms: the centring shift fixed by taking each head's zero-mean representative.

A LayerNorm on queries and keys (``QKNorm.kind == "layer"``: Cohere, StableLM, Phi) subtracts the
mean over each head's d_k dims first, so n(y + s 1) = n(y) and

    W^h -> W^h + w 1^T,    b^h -> b^h + s 1        (w [d], s scalar; each query and key head)

changes nothing: H (d + [b_Q]) + G (d + [b_K]) exact directions (docs/mathematics.md, "Normalised
queries and keys", 3.). The balanced form takes the representative whose rows have zero mean over
the head's d_k columns, W^h (I - 1 1^T / d_k): the orthogonal projection, so also the one of least
norm. Two layers are compared on their centred factors, where the shift has no effect.
"""

from __future__ import annotations

import torch

from ...layer.attention_layer import AttentionLayer

ROLES = ("W_Q", "b_Q", "W_K", "b_K")


def centres(layer: AttentionLayer) -> bool:
    """The layer's q/k norm removes each head's mean (a LayerNorm, per head)."""
    norm = getattr(layer, "qk_norm", None)
    return norm is not None and norm.kind == "layer"


def centred(t: torch.Tensor) -> torch.Tensor:
    """``t`` [..., d_k] minus its mean over the last (head) dim."""
    return t - t.mean(dim=-1, keepdim=True)


def centre_qk(layer: AttentionLayer) -> dict[str, torch.Tensor | None]:
    """W_Q, b_Q, W_K, b_K of ``layer`` with every head's rows centred (new tensors; None stays None)."""
    return {role: None if getattr(layer, role) is None else centred(getattr(layer, role)) for role in ROLES}


def centring_residual(layer: AttentionLayer) -> float:
    """max over Q, K of ||mean part|| / ||factor||: 0 once centred (and where there is no LayerNorm)."""
    if not centres(layer):
        return 0.0
    worst = 0.0
    for W, b in (("W_Q", "b_Q"), ("W_K", "b_K")):
        X = getattr(layer, W).to(torch.float64)
        if getattr(layer, b) is not None:
            X = torch.cat([X, getattr(layer, b).to(torch.float64)[:, None, :]], dim=1)
        whole = float(X.norm())
        if whole > 0:
            worst = max(worst, float((X - centred(X)).norm()) / whole)
    return worst
