"""The whole-model gauge-fixed form "whole-balanced" v1 of the pre-RMSNorm gated form (Llama, Mistral, Qwen2, Granite).

Mathematics only: tensors in, tensors out (Hugging Face ``nn.Linear`` orientation, ``W`` of shape
(out, in), ``y = x W^T``); which stored tensor plays which role is :mod:`idinspect.exporting.whole_model`.
Derivation and the proof of the counts: docs/mathematics.md, "Whole-model symmetries" and
"The whole-model gauge-fixed form".

Three exact symmetries are fixed, in this order (each rule reads only quantities the earlier
steps made canonical, so a disguised copy reaches the same representative):

1. **Norm gains folded** (:func:`fold_norm_gain`): RMSNorm(x) * gamma read by W equals RMSNorm(x)
   read by ``W diag(gamma)``: every block norm's gain becomes 1 (convention: gains all ones); the
   final gain too where the head is untied (folded into the head).
2. **Residual rotation** (untied heads only, :func:`residual_rotation`): with unit gains every reader of
   the residual stream is RMSNorm, which commutes with any orthogonal Q (||x Q|| = ||x||); the
   representative rotates the stream onto the eigenvectors of the embedding's Gram matrix E^T E
   (d x d), eigenvalues descending, each eigenvector's sign making the third moment of its
   embedding column positive. Then ``E -> E Q``, readers ``W -> W Q``, writers ``W -> Q^T W``,
   writer biases ``b -> b Q``. Unique where the eigenvalues are distinct and the third moments nonzero.
3. **Gated-unit scalings** (:func:`gated_unit_scalings`): act(x W_gate) * (x W_up) W_down is unchanged by
   ``up row i * a_i, down column i / a_i`` for any a_i != 0; the representative has
   ||up row i|| = ||down column i|| and the up row's third moment positive (a_i's sign).

4. **Router shift** (Mixtral, :func:`centre_columns`): the router W_r (E, d) + 1 v^T moves every expert's
   logit by x.v, which the softmax over the experts cancels; the representative has each column of
   W_r summing to zero over the experts.

Left unfixed by this form: the global residual scale (broken by eps; not an exact symmetry), the
tie commutant of a tied head (rotations inside blocks of equal final-gain values; the final gain
of a tied head is kept, and the residual rotation is blocked by the tie), and the head shift
that exists only for log-probability outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

WHOLE_GAUGE_NAME = "whole-balanced"
WHOLE_GAUGE_VERSION = 1
#: Relative eigenvalue gap of E^T E (|l_i - l_j| / l_max) below which the rotation is reported as not unique.
ROTATION_GAP_RTOL = 1e-10


def fold_norm_gain(weight: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """``W diag(gamma)``: a reader (out, d) of a norm with gain ``gamma`` (d,), the gain folded in (float64)."""
    return weight.to(torch.float64) * gain.to(torch.float64)


@dataclass(frozen=True)
class ResidualRotation:
    """Q (d, d), orthogonal: the residual stream's representative basis, and how well it is determined.

    ``min_gap``: the smallest relative gap between consecutive eigenvalues of E^T E (0: a repeated
    value, the rotation inside it is not fixed); ``min_moment``: the smallest |third moment| relative to
    its scale (0: a sign not fixed).
    """

    q: torch.Tensor
    min_gap: float
    min_moment: float

    @property
    def unique(self) -> bool:
        return self.min_gap > ROTATION_GAP_RTOL and self.min_moment > ROTATION_GAP_RTOL


def _third_moment_signs(columns: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Per column of ``columns`` (n, k): the sign making sum_v c_v^3 positive, and the smallest |moment|
    relative to sum_v |c_v|^3 (the scale a rounding error in it would have)."""
    cubes = columns.pow(3)
    moment, scale = cubes.sum(0), cubes.abs().sum(0)
    signs = torch.where(moment < 0, -1.0, 1.0).to(columns.dtype)
    relative = (moment.abs() / scale.clamp_min(torch.finfo(columns.dtype).tiny))
    return signs, float(relative.min()) if relative.numel() else 1.0


def residual_rotation(embedding: torch.Tensor) -> ResidualRotation:
    """The rotation Q (d, d) of rule 2 from the token embedding E (V, d): eigenvectors of E^T E, eigenvalues
    descending, signs by the third moment of E Q's columns. Equivariant: E R gives R^T Q, so E R R^T Q = E Q."""
    e = embedding.to(torch.float64)
    values, vectors = torch.linalg.eigh(e.T @ e)
    values, vectors = values.flip(0), vectors.flip(1)
    top = float(values[0]) if values.numel() else 0.0
    gaps = (values[:-1] - values[1:]).abs() / top if top > 0 else torch.zeros(0, dtype=torch.float64)
    signs, moment = _third_moment_signs(e @ vectors)
    return ResidualRotation(vectors * signs, float(gaps.min()) if gaps.numel() else 1.0, moment)


def gated_unit_scalings(up: torch.Tensor, down: torch.Tensor) -> tuple[torch.Tensor, float]:
    """a (f,) of rule 3 for up (f, d) (gain folded, rotated) and down (d, f) (rotated): |a_i| =
    sqrt(||down[:, i]|| / ||up[i]||), sign(a_i) = sign of sum_j up[i, j]^3. Returns a and the smallest
    |third moment| relative to its scale (0: a sign not fixed). A zero row or column keeps a_i = 1."""
    u, w = up.to(torch.float64), down.to(torch.float64)
    nu, nw = torch.linalg.vector_norm(u, dim=1), torch.linalg.vector_norm(w, dim=0)
    alive = (nu > 0) & (nw > 0)
    size = torch.where(alive, (nw / torch.where(alive, nu, 1.0)).sqrt(), torch.ones_like(nu))
    signs, moment = _third_moment_signs(u.T)
    return size * signs, moment


def centre_columns(weight: torch.Tensor) -> torch.Tensor:
    """W - 1 (1^T W) / n for W (n, m): every column sums to zero. Mixtral's router (E, d), over the experts
    (its shift W + 1 v^T moves every expert's logit by x.v, which the softmax cancels); a LayerNorm's reader
    (in, out), over its inputs (:mod:`.whole_model_ln_fix`)."""
    return weight - weight.mean(0, keepdim=True)


def scale_rows(weight: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``diag(a) W`` for W (f, d): the up projection's rows (or its bias, shape (f,)) scaled."""
    return weight.to(torch.float64) * (a if weight.dim() == 1 else a[:, None])


def divide_columns(weight: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``W diag(1/a)`` for W (d, f): the down projection's columns divided."""
    return weight.to(torch.float64) / a


__all__ = ["ROTATION_GAP_RTOL", "WHOLE_GAUGE_NAME", "WHOLE_GAUGE_VERSION", "ResidualRotation", "centre_columns",
           "divide_columns",
           "fold_norm_gain", "gated_unit_scalings", "residual_rotation", "scale_rows"]
