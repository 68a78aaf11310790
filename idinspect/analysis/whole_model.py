"""The continuous exact symmetries of a whole checkpoint, counted per component in closed form.

Mathematics only: the inputs are sizes, the head's tying, the norm's epsilon, the multiplicities of
the stored final-norm gain and today's attention count (:mod:`idinspect.forms.per_head.counts`, summed
over the blocks); no file is read here (:mod:`idinspect.analysis.whole_model_read` builds the
:class:`WholeModelShape` from a checkpoint). Derivations: docs/mathematics.md, "Whole-model
symmetries"; proof: tests/forms/test_whole_model_jacobian.py (the nullity of the Jacobian of the whole
model's outputs with respect to all its parameters equals these counts).

Two forms are derived (L layers, width d, MLP width f, vocabulary V):

``pre_rms_gated`` (Llama, Mistral, Qwen2, Granite, Phi-3 (fused gate_up), Mixtral (E experts of width
f, top k): pre-RMSNorm, gated MLP act(x W_gate) * (x W_up) W_down, no norm biases)::

    N = attention + L (2 d + f)                      dense MLP
                  + L (2 d + E f + d)                Mixtral, k >= 2 (router shift W_r + 1 v^T)
                  + L (2 d + E f + E d)              Mixtral, k = 1 (the router only picks)
        untied head: + d(d-1)/2 + d        residual rotation; final-norm gain into the head
        tied head:   + sum_k m_k(m_k-1)/2  rotations commuting with diag(gamma_final)
        log-probability outputs, untied only: + d   (head += 1 u^T)
        + 1 nearly null (global residual scale, broken by eps; exact when eps = 0)

``pre_ln`` (GPT-2, GPTBigCode: pre-LayerNorm with biases, learned positions P, tied head, MLP
act(x W_fc + b) W_proj + b, every reader of the residual a LayerNorm)::

    N = attention + L (2 d + 2 d + r + f + (w + 1) + (f + 1)) + [ReLU: L f] + P
        + sum_k (m_k-1)(m_k-2)/2   rotations fixing 1 and commuting with diag(gamma_final) (tied)
        log-probability outputs: + d   (wte += 1 u^T, wpe -= 1 u^T)
        + 1 nearly null (global residual scale)

with r = (H + 2G) d_h the width the attention reads into (the centring of its reading weights),
w = H d_h the width its output projection reads (the writers' all-ones direction).

The headline count is for logits (``exact``); the extra directions that exist only where the
outputs are log-probabilities are reported apart (``log_prob_extra``), and so is the nearly-null
direction that the norm's epsilon breaks (``nearly_null``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

PRE_RMS_GATED = "pre_rms_gated"
PRE_LN = "pre_ln"
FORMS = (PRE_RMS_GATED, PRE_LN)


@dataclass(frozen=True)
class WholeModelShape:
    """What the whole-model count depends on.

    ``attention``: today's per-block unidentified count summed over the blocks; ``attention_read``
    r = (H + 2G) d_h and ``attention_written`` w = H d_h (the widths of the attention's reading and
    writing weights, used by the LayerNorm form); ``positions`` learned position rows (0: none); ``head`` "tied" or "untied";
    ``final_gain_multiplicities``: how often each distinct value occurs in the stored final-norm gain;
    ``activation``: the MLP's ("relu" adds the positive scaling of each unit).
    """

    form: str
    layers: int
    width: int
    mlp_width: int
    vocab: int
    head: str
    eps: float
    attention: int
    final_gain_multiplicities: tuple[int, ...]
    positions: int = 0
    attention_read: int = 0
    attention_written: int = 0
    activation: str = ""
    embedding_bytes_per_value: int = 2
    #: Mixture of experts (Mixtral): E experts of MLP width f each, k chosen per token (0: a dense MLP).
    experts: int = 0
    experts_per_token: int = 0


def multiplicities(values: Iterable[float]) -> tuple[int, ...]:
    """How often each distinct value occurs (exact equality of the stored values), largest first."""
    return tuple(sorted(Counter(values).values(), reverse=True))


def _term(name: str, count: int, formula: str) -> dict:
    return {"name": name, "count": int(count), "formula": formula}


def _pre_rms_gated(s: WholeModelShape) -> tuple[list[dict], int, dict | None]:
    L, d, f = s.layers, s.width, s.mlp_width
    terms = [_term("attention", s.attention, "sum over blocks of the attention count"),
             _term("norm_gains", L * 2 * d, "L * 2d (gamma * s, the readers' input columns / s)")]
    if s.experts:
        E = s.experts
        terms.append(_term("mlp_scalings", L * E * f, "L * E * f (each expert's up row i * a_i, down column i / a_i)"))
        if s.experts_per_token >= 2:
            terms.append(_term("router_shift", L * d, "L * d (router W_r + 1 v^T: every expert's logit moves by x.v, "
                                                      "which the softmax and the top-k renormalisation cancel)"))
        else:
            terms.append(_term("router_unused", L * E * d, "L * E * d (top-1: the chosen expert's weight is p / p = 1, "
                                                           "so the router only picks, and locally nothing it holds counts)"))
    else:
        terms.append(_term("mlp_scalings", L * f, "L * f (up row i * a_i, down column i / a_i)"))
    rotation = d * (d - 1) // 2
    if s.head == "untied":
        terms += [_term("residual_rotation", rotation, "d(d-1)/2 (one global rotation of the residual stream)"),
                  _term("final_gain_into_head", d, "d (final-norm gain * s, head columns / s)")]
        return terms, d, None
    survive = sum(m * (m - 1) // 2 for m in s.final_gain_multiplicities)
    terms.append(_term("tie_commutant", survive, "sum_k m_k(m_k-1)/2 over repeated final-gain values"))
    return terms, 0, _tie(s, rotation, survive, rotation + d)


def _pre_ln(s: WholeModelShape) -> tuple[list[dict], int, dict | None]:
    L, d, f = s.layers, s.width, s.mlp_width
    r, w = s.attention_read, s.attention_written
    terms = [_term("attention", s.attention, "sum over blocks of the attention count"),
             _term("norm_gains", L * 2 * d, "L * 2d (gain * s, the readers' input rows / s)"),
             _term("norm_bias_shifts", L * 2 * d, "L * 2d (norm bias + delta, reader bias - delta W)"),
             _term("mean_directions", L * (r + f + (w + 1) + (f + 1)),
                   "L * (r + f + (w + 1) + (f + 1)): readers' centring 1 c^T, writers' weight c 1^T and bias t 1")]
    if s.activation == "relu":
        terms.append(_term("mlp_scalings", L * f, "L * f (positive scaling: fc column i * a_i > 0, proj row i / a_i)"))
    terms.append(_term("position_tables", s.positions, "P (each position row + c_p 1)"))
    rotation = (d - 1) * (d - 2) // 2
    survive = sum((m - 1) * (m - 2) // 2 for m in s.final_gain_multiplicities if m > 2)
    terms.append(_term("tie_commutant", survive, "sum_k (m_k-1)(m_k-2)/2 over repeated final-gain values "
                                                 "(rotations fixing 1 that commute with diag(gamma_final))"))
    return terms, d, _tie(s, rotation, survive, None)


def _tie(s: WholeModelShape, rotation: int, survive: int, untied_gain: int | None) -> dict:
    """The tie diagnostics: the residual rotation the tie blocks, what survives, what untying costs."""
    out = {"residual_rotation_blocked": rotation, "distinct_final_gain_values": len(s.final_gain_multiplicities),
           "repeated_final_gain_values": sum(1 for m in s.final_gain_multiplicities if m > 1),
           "surviving_dimension": survive,
           "untie_bytes": s.vocab * s.width * s.embedding_bytes_per_value}
    if untied_gain is not None:
        out["untie_gain"] = untied_gain - survive
    return out


def whole_model_counts(s: WholeModelShape) -> dict:
    """The ``whole_model`` object: per component its count and closed form, ``exact`` (logits), ``log_prob_extra``,
    ``nearly_null`` (broken by eps > 0; counted in ``exact`` when eps = 0), ``tie`` for tied heads."""
    if s.form not in FORMS:
        raise ValueError(f"unknown whole-model form {s.form!r}")
    if s.head not in ("tied", "untied") or (s.form == PRE_LN and s.head != "tied"):
        raise ValueError(f"the {s.form} form is derived for {'a tied head' if s.form == PRE_LN else 'a head'} only")
    terms, log_prob, tie = (_pre_rms_gated if s.form == PRE_RMS_GATED else _pre_ln)(s)
    exact = sum(t["count"] for t in terms)
    near = {"count": 1, "what": "the global residual scale (every residual writer * c)", "broken_by": "eps",
            "eps": s.eps}
    if s.eps == 0:
        terms.append(_term("global_scale", 1, "1 (every residual writer * c; exact when eps = 0)"))
        exact += 1
        near = {**near, "count": 0}
    out = {"derived": True, "form": s.form, "head": s.head, "components": terms, "exact": exact,
           "convention": "logits", "log_prob_extra": log_prob,
           "log_prob_extra_formula": ("d (head += 1 u^T)" if s.form == PRE_RMS_GATED else
                                      "d (wte += 1 u^T, wpe -= 1 u^T)") if log_prob else "0",
           "exact_log_prob": exact + log_prob, "nearly_null": near}
    if tie is not None:
        out["tie"] = tie
    return out


def not_derived(model_type: str, why: str) -> dict:
    """The ``whole_model`` object of a family whose whole-model form is not derived (never a guess)."""
    return {"derived": False, "model_type": model_type, "reason": why}


__all__ = ["FORMS", "PRE_LN", "PRE_RMS_GATED", "WholeModelShape", "multiplicities", "not_derived",
           "whole_model_counts"]
