"""Published model-provenance scores, reimplemented for the disguise benchmark (not part of idinspect).

Each takes two models in the working form of :mod:`bench.disguise_models` (float64, nn.Linear layout,
y = x W^T + b) and returns a score; ``detected`` says whether the method, at the threshold given
here, still calls the pair related.

- :func:`pcs`: parameter cosine similarity, PCS = <theta_A, theta_B> / (||theta_A|| ||theta_B||) over
  the flattened weight matrices both models have with equal shapes (the baseline of Zhu et al., 2025,
  "Independence Tests for Language Models", ICML 2025, Sec. 5; also Yu et al.'s model-tracing
  baselines). Detected: >= 0.5 (unrelated same-shape models sit near 0).
- :func:`huref`: HuRef's invariant terms (Zeng et al., 2024, "HuRef: HUman-REadable Fingerprint for
  Large Language Models", NeurIPS 2024, Sec. 3.2, Eq. 4): per layer M_a = E W_Q W_K^T E^T and
  M_b = E W_V W_O E^T with W in the paper's x W convention (here W_Q = q^T, W_O = o^T, kv heads
  repeated for grouped queries; products summed over heads as the full-width matrices do), E the
  embeddings of a fixed set of token ids (the same ids in both: the paper assumes a shared
  vocabulary); score = cosine similarity of the concatenated terms. Detected: >= 0.5.
- :func:`phi_match`: Zhu et al., 2025 (Sec. 3.2, the MLP "matching" statistic phi_MATCH): per layer
  the unit permutations pi_gate = LAP(W_gate^A W_gate^B^T) and pi_up = LAP(W_up^A W_up^B^T) (linear
  assignment maximising the inner products of matched rows); under independence they are independent,
  under shared lineage equal, so the layer's p-value is that of Spearman's rank correlation of
  pi_gate and pi_up; layers combined with Fisher's method. For ungated MLPs (BERT, GPT-2) the two
  matched matrices are the up rows and the down columns. Above 1024 units, the first 1024 units of A
  are matched against all of B (rectangular assignment; a subsample, stated in the results).
  Detected: p < 1e-6 (idinspect's default alpha).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from scipy.stats import combine_pvalues, spearmanr

COSINE_THRESHOLD = 0.5
P_THRESHOLD = 1e-6
HUREF_TOKENS = 256
MATCH_UNITS = 1024


def _cos(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x @ y) / (x.norm() * y.norm()))


def pcs(a: dict, b: dict) -> dict:
    """Parameter cosine similarity over the shared equally shaped weight matrices (2-d tensors: in models
    this small the norm gains, entries near 1, would outweigh every matrix entry, ~0.02, and make any
    two models of one config look alike)."""
    keys = sorted(k for k in a if k in b and a[k].shape == b[k].shape and a[k].dim() == 2)
    dot = sum(float((a[k] * b[k]).sum()) for k in keys)
    na = math.sqrt(sum(float((a[k] * a[k]).sum()) for k in keys))
    nb = math.sqrt(sum(float((b[k] * b[k]).sum()) for k in keys))
    score = dot / (na * nb)
    return {"score": score, "detected": score >= COSINE_THRESHOLD, "tensors": len(keys)}


def _huref_terms(w: dict, heads: int, kv_heads: int, d_k: int, layers: int, ids: torch.Tensor) -> torch.Tensor:
    E = w["emb"][ids]                                                          # [T, d]
    r = heads // kv_heads
    terms = []
    for i in range(layers):
        Q = (E @ w[f"{i}.q"].T).view(len(ids), heads, d_k)                     # E W_Q, per head
        K = (E @ w[f"{i}.k"].T).view(len(ids), kv_heads, d_k).repeat_interleave(r, 1)
        V = (E @ w[f"{i}.v"].T).view(len(ids), kv_heads, d_k).repeat_interleave(r, 1)
        O = w[f"{i}.o"].view(-1, heads, d_k)                                   # W_O^T per head [d, H, d_k]
        Ma = torch.einsum("thk,shk->ts", Q, K)                                 # E W_Q W_K^T E^T
        EO = torch.einsum("sd,dhk->shk", E, O)                                 # (W_O E^T)^T per head
        Mb = torch.einsum("thk,shk->ts", V, EO)                                # E W_V W_O E^T
        terms += [Ma.flatten(), Mb.flatten()]
    return torch.cat(terms)


def huref(a: dict, b: dict, meta) -> dict:
    """Cosine similarity of HuRef's attention invariant terms (same token ids in both models)."""
    V = min(a["emb"].shape[0], b["emb"].shape[0])
    ids = torch.randperm(V, generator=torch.Generator().manual_seed(0))[:HUREF_TOKENS]
    args = (meta.heads, meta.kv_heads, meta.d_k, meta.layers, ids)
    score = _cos(_huref_terms(a, *args), _huref_terms(b, *args))
    return {"score": score, "detected": score >= COSINE_THRESHOLD}


def _lap(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Column of y matched to each row of x, maximising the total inner product."""
    rows, cols = linear_sum_assignment((x @ y.T).numpy(), maximize=True)
    out = np.empty(x.shape[0], dtype=np.int64)
    out[rows] = cols
    return out


def phi_match(a: dict, b: dict, meta) -> dict:
    """Fisher-combined p-value of the per-layer Spearman correlation of the two unit matchings."""
    pvalues, rhos, units = [], [], None
    for i in range(meta.layers):
        if f"{i}.gate" in a and f"{i}.gate" in b:
            xa, xb, ya, yb = a[f"{i}.gate"], b[f"{i}.gate"], a[f"{i}.up"], b[f"{i}.up"]
        else:
            xa, xb, ya, yb = a[f"{i}.up"], b[f"{i}.up"], a[f"{i}.down"].T, b[f"{i}.down"].T
        n = min(MATCH_UNITS, xa.shape[0])
        units = n
        p1, p2 = _lap(xa[:n], xb), _lap(ya[:n], yb)
        if np.array_equal(p1, p2):
            rho, p = 1.0, 0.0
        else:
            rho, p = spearmanr(p1, p2)
            rho, p = float(rho), float(p)
        rhos.append(rho)
        pvalues.append(max(p, 1e-300))
    p = float(combine_pvalues(pvalues, method="fisher").pvalue)
    return {"score": p, "detected": p < P_THRESHOLD, "mean_rho": float(np.mean(rhos)), "units_matched": units}


METHODS = {"PCS": lambda a, b, meta: pcs(a, b), "HuRef": huref, "phi_MATCH": phi_match}
