"""The whole-model gauge-fixed form "whole-balanced" v1 of the pre-LayerNorm form (GPT-2, GPTBigCode).

Mathematics only, every matrix in the ``x W`` orientation (W of shape (in, out): GPT-2's Conv1D as
stored; the exporter transposes nn.Linear weights). Derivation: docs/mathematics.md, "Whole-model
symmetries" and "The whole-model gauge-fixed form". Every reader of the residual stream is a
LayerNorm, whose output y = g * n + beta has a centred n (n . 1 = 0). Fixed, in this order:

1. **Gain and bias folded** (:func:`fold_layer_norm`; convention g = 1, beta = 0): a reader (W, c)
   of the norm becomes (diag(g) W, c + beta W). Fixes the gain (g * s) and the bias shift
   (beta + delta, c - delta W) of every block norm; the final norm of a tied head is kept (its
   reader is the embedding).
2. **Readers centred** (:func:`~.whole_model_fix.centre_columns`): with g = 1, beta = 0 the reader sees n with n . 1 = 0,
   so W + 1 c^T is exact; the representative has 1^T W = 0.
3. **Writers centred** (:func:`centre_outputs`): every reader removes the stream's mean, so a writer's
   W + c 1^T and b + t 1 are exact; the representative has W 1 = 0 and mean(b) = 0. Position rows
   likewise (wpe_p + c_p 1): each row centred. (Token rows are not: a tied head reads them, and
   wte_v + c_v 1 moves logit v by c_v LN_f(h) . 1.)
4. **ReLU units balanced** (:func:`relu_unit_scalings`; ReLU MLPs only): act(x W_fc + b) W_proj is
   unchanged by fc column i and b_i * a_i > 0, proj row i / a_i; the representative has
   ||(fc column i, b_i)|| = ||proj row i||.

Left unfixed: the global residual scale (eps breaks it), the tie commutant (rotations fixing 1 that
commute with diag(g_f)), and the log-probability shift (wte += 1 u^T, wpe -= 1 u^T: not a symmetry
of the logits).
"""

from __future__ import annotations

import torch

from .whole_model_fix import centre_columns


def fold_layer_norm(weight: torch.Tensor, bias: torch.Tensor | None, gain: torch.Tensor,
                    shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(diag(g) W, c + beta W) for a reader W (in, out) with bias c (out,) or None of a LayerNorm with gain
    g and bias beta (in,), in float64."""
    w = weight.to(torch.float64)
    c = torch.zeros(w.shape[1], dtype=torch.float64) if bias is None else bias.to(torch.float64)
    return gain.to(torch.float64)[:, None] * w, c + shift.to(torch.float64) @ w


def centre_outputs(weight: torch.Tensor) -> torch.Tensor:
    """W - (W 1) 1^T / d for W (in, d) (a writer, or position rows P (positions, d)): each row sums to zero."""
    return weight - weight.mean(1, keepdim=True)


def centre_vector(bias: torch.Tensor) -> torch.Tensor:
    """b - mean(b) 1: a writer's bias (d,) without its all-ones component."""
    return bias - bias.mean()


def relu_unit_scalings(fc: torch.Tensor, fc_bias: torch.Tensor, proj: torch.Tensor) -> torch.Tensor:
    """a (f,) > 0 with ||a_i (fc[:, i], b_i)|| = ||proj[i] / a_i||, for fc (d, f), fc_bias (f,), proj (f, d); a unit
    with a zero side keeps a_i = 1."""
    nu = torch.sqrt((fc * fc).sum(0) + fc_bias * fc_bias)
    nw = torch.linalg.vector_norm(proj, dim=1)
    alive = (nu > 0) & (nw > 0)
    return torch.where(alive, (nw / torch.where(alive, nu, 1.0)).sqrt(), torch.ones_like(nu))


__all__ = ["centre_columns", "centre_outputs", "centre_vector", "fold_layer_norm", "relu_unit_scalings"]
