"""Weight-level findings of one layer: what the actual tensors add to the structural counts.

Every finding is a dict ``{"rule", "severity", "layer", "tensor", "tensors", "parameters", "message",
...}``: ``tensor`` names where it sits for people (``"h.0.attn.c_attn.weight[:, 0:768], ..."``, slices
of fused tensors included), ``tensors`` lists the stored tensors it concerns (``["h.0.attn.c_attn.weight"]``),
which the audit uses to find the file that holds them.

- ``non-finite`` (error): NaN or Inf in an attention tensor; ``parameters`` = entries affected.
- ``overflow`` (error): finite float64 entries so large that a product of two summed over the
  model width overflows float64 (|w| > sqrt(max_float64 / d)); ``parameters`` = entries affected.
- ``noop-bias`` (warning): the key bias (its unrotated dims) cancels in the softmax, since
  <q_i, b_K> is the same for every key j; ``parameters`` = no-op dims, ``max_abs`` its largest |value|.
  Not reported where those dims are stored as zeros (a gauge-fixed export): nothing is left to remove.
- ``absorbable-bias`` (note): with an output bias, b_V adds the constant sum_h b_V^g(h) W_O^h
  (softmax rows sum to one), which b_O can take; ``parameters`` = G d_v. Not reported for a zero b_V.
- ``rank-deficient-head`` (warning): W_QK^h or W_OV^h has numerical rank below d_k (rule in
  :data:`spectra.RANK_RULE`); the structural count assumes full rank, so these factors have more
  freedom than counted, unless a live bias row, RoPE or the group's other heads keep it identified;
  ``group_extra_unidentified`` gives the exact gain of the head's kv group (:mod:`degeneracy`).
  One finding per head and kind (``"qk"``/``"ov"``); ``parameters`` = the entries of the head's
  two factors (2 d d_k).
"""

from __future__ import annotations

import math

import torch

from ...layer.attention_layer import ROLES, AttentionLayer
from ...rules import default_severity
from . import structure
from .spectra import RANK_RULE, HeadSpectra, finite_slices


def _finding(rule: str, layer: AttentionLayer, roles: tuple[str, ...], parameters: int, message: str,
             **extra) -> dict:
    """One finding about the tensors that hold ``roles`` of ``layer``."""
    return {"rule": rule, "severity": default_severity(rule), "layer": layer.index,
            "tensor": ", ".join(_name(layer, r) for r in roles), "tensors": stored_tensors(layer, roles),
            "parameters": int(parameters), "message": message, **extra}


def _name(layer: AttentionLayer, role: str) -> str:
    """Where ``role`` lives, as the adapter names it (a fused tensor's slice included)."""
    return layer.tensor_names.get(role, role)


def stored_tensors(layer: AttentionLayer, roles: tuple[str, ...]) -> list[str]:
    """The stored tensors holding ``roles``, each once, in role order (an adapter's name is the
    stored name, followed by ``[slice]`` when the role is part of a fused tensor)."""
    names = [_name(layer, r).split("[", 1)[0].strip() for r in roles]
    return list(dict.fromkeys(n for n in names if n))


def _max_abs(t: torch.Tensor) -> float | None:
    """Largest |entry|, or None if any entry is NaN/Inf (reported by ``non-finite`` instead)."""
    if t.numel() == 0:
        return 0.0
    if not bool(finite_slices(t).all()):
        return None
    return float(t.abs().max())


def non_finite_findings(layer: AttentionLayer, finite_by_role: dict[str, torch.Tensor] | None = None) -> list[dict]:
    """One ``non-finite`` finding per attention tensor holding NaN or Inf."""
    out = []
    for role in ROLES:
        t = getattr(layer, role)
        if t is None:
            continue
        ok = finite_by_role[role] if finite_by_role is not None else finite_slices(t)
        if bool(ok.all()):
            continue
        bad = ~torch.isfinite(t)
        n_bad = int(bad.sum())
        if not n_bad:
            continue
        n_nan = int(torch.isnan(t).sum())
        extra = {"role": role, "nan": n_nan, "inf": n_bad - n_nan}
        if role != "b_O":
            extra["heads"] = bad.reshape(t.shape[0], -1).any(dim=1).nonzero().flatten().tolist()
            extra["head_kind"] = "query" if role in ("W_Q", "b_Q", "W_O") else "kv"
        out.append(_finding("non-finite", layer, (role,), n_bad,
                            f"{_name(layer, role)} holds {n_nan} NaN and {n_bad - n_nan} Inf values; the attention "
                            "output is not defined there, and spectra of the affected heads are skipped", **extra))
    return out


def overflow_limit(width: int) -> float:
    """The largest |w| whose products, summed over ``width`` terms, stay below float64's maximum."""
    return math.sqrt(torch.finfo(torch.float64).max / max(width, 1))


def overflow_findings(layer: AttentionLayer) -> list[dict]:
    """One ``overflow`` finding per float64 attention tensor with finite entries above
    :func:`overflow_limit` (float32 and narrower values can never get there: (3.4e38)^2 d < 1.8e308)."""
    out = []
    limit = overflow_limit(max(layer.d_model, layer.d_k))
    for role in ROLES:
        t = getattr(layer, role)
        if t is None or t.dtype != torch.float64 or t.numel() == 0:
            continue
        lo, hi = torch.aminmax(t)
        if not (float(hi) > limit or float(lo) < -limit):
            continue
        big = torch.isfinite(t) & (t.abs() > limit)
        n = int(big.sum())
        if not n:
            continue
        name = _name(layer, role)
        out.append(_finding("overflow", layer, name, n,
                            f"{name} holds {n} finite values above {limit:.3g} in magnitude (largest "
                            f"{float(t[big].abs().max()):.3g}); products of such weights overflow float64, so "
                            "the attention output and every spectrum of the affected heads are unreliable",
                            role=role, max_abs=float(t[big].abs().max()), limit=limit))
    return out


def noop_bias_findings(layer: AttentionLayer) -> list[dict]:
    """``noop-bias`` for a key bias whose unrotated dims cancel in the softmax."""
    dims = structure.noop_key_bias_dims(layer)
    if not dims or getattr(layer, "qk_norm", None) is not None:   # a q/k norm's own bias: counted, not a stored b_K finding
        return []
    cols = structure.unrotated_columns(layer)
    part = layer.b_K[:, cols.start:cols.stop]
    if not bool(part.any()):  # stored as zeros (a gauge-fixed export): nothing to remove
        return []
    name = _name(layer, "b_K")
    where = "" if cols.start == 0 else f" (its unrotated dims {cols.start}..{cols.stop - 1} of each head)"
    max_abs = _max_abs(part)
    size = "" if max_abs is None else f", largest |value| {max_abs:.3g}"
    return [_finding("noop-bias", layer, ("b_K",), dims,
                     f"{name}{where} is a no-op: <q_i, b_K> is the same for every key j and cancels in the softmax, "
                     f"so these {dims} parameters can be zeroed without changing any output{size}",
                     max_abs=max_abs, columns=[cols.start, cols.stop])]


def absorbable_bias_findings(layer: AttentionLayer) -> list[dict]:
    """``absorbable-bias`` for a value bias that the output bias can take."""
    dims = structure.absorbable_value_bias_dims(layer)
    if not dims:
        return []
    if not bool(layer.b_V.any()):  # already folded (a gauge-fixed export stores zeros)
        return []
    name, into = _name(layer, "b_V"), _name(layer, "b_O")
    max_abs = _max_abs(layer.b_V)
    size = "" if max_abs is None else f", largest |value| {max_abs:.3g}"
    return [_finding("absorbable-bias", layer, ("b_V",), dims,
                     f"{name} can be folded into {into} (b_O += sum_h b_V^g(h) W_O^h, then b_V = 0) without changing "
                     f"any output, because softmax rows sum to one ({dims} parameters{size})",
                     max_abs=max_abs, into=into)]


def rank_findings(layer: AttentionLayer, spectra: HeadSpectra, extra: dict | None = None) -> list[dict]:
    """One ``rank-deficient-head`` per head whose W_QK (W_OV) has numerical rank below d_k (d_v).

    ``extra`` (from :func:`degeneracy.extra_unidentified`) says how much freedom the head's kv group
    really gains: a live bias row or RoPE can keep a rank-deficient W_QK identified.
    """
    out = []
    d, dk, dv = layer.d_model, layer.d_k, layer.d_v
    for kind, values, ok, full, roles in (("qk", spectra.qk, spectra.qk_ok, dk, ("W_Q", "W_K")),
                                          ("ov", spectra.ov, spectra.ov_ok, dv, ("W_V", "W_O"))):
        ranks = spectra.ranks(values)
        form = "W_QK = W_Q^h W_K^gT" if kind == "qk" else "W_OV = W_V^g W_O^h"
        for h in (ok & (ranks < full)).nonzero().flatten().tolist():
            g, rank = layer.kv_head(h), int(ranks[h])
            gained = None if extra is None else int(extra["qk" if kind == "qk" else "vo"][g])
            dead = extra is not None and kind == "ov" and h in extra["dead_heads"]
            effect = _rank_effect(kind, g, gained, extra, dead)
            more = {}
            if dead:
                more = {"dead": True, "group_extra_unidentified_qk": int(extra["qk"][g])}
            out.append(_finding(
                "rank-deficient-head", layer, roles, 2 * d * full,
                f"head {h} (kv head {g}): {form} has numerical rank {rank} < {full} (tolerance {RANK_RULE}, "
                f"rtol = {spectra.rtol:.3g}; smallest singular value {float(values[h, -1]):.3g} of "
                f"{float(values[h, 0]):.3g}); {effect}",
                kind=kind, head=h, heads=[h], kv_head=g, rank=rank, full_rank=full,
                tolerance=spectra.rtol, rank_rule=RANK_RULE, singular_values=values[h].tolist(),
                group_extra_unidentified=gained,
                layer_extra_unidentified=None if extra is None else int(extra["total"]), **more))
    return out


def _rank_effect(kind: str, g: int, gained: int | None, extra: dict | None, dead: bool) -> str:
    """What the deficiency does to the count, in words."""
    if gained is None:
        return "the structural count assumes full rank, so these factors may have more freedom than counted"
    parts = []
    if dead:
        parts.append(f"the head passes nothing to the output, so its query factor is unidentified "
                     f"(kv group {g}: {int(extra['qk'][g])} more QK parameters)")
    if gained:
        parts.append(f"kv group {g} has {gained} more unidentified {'QK' if kind == 'qk' else 'VO'} parameters "
                     "than the structural count")
    if not parts:
        parts.append("this adds no freedom: the group's stacked factors keep full rank "
                     "(a live bias row, RoPE planes or the group's other heads identify them)")
    if extra["value_bias"]:
        parts.append(f"the live value bias changes the layer's count by {extra['value_bias']:+d}")
    return "; ".join(parts) + f" (layer total beyond the structure: {extra['total']})"


def layer_findings(layer: AttentionLayer, spectra: HeadSpectra | None, extra: dict | None = None,
                   finite_by_role: dict[str, torch.Tensor] | None = None) -> list[dict]:
    """All findings of one float64 layer, in rule order (non-finite first)."""
    found = (non_finite_findings(layer, finite_by_role) + overflow_findings(layer) + noop_bias_findings(layer)
             + absorbable_bias_findings(layer))
    if spectra is not None:
        found += rank_findings(layer, spectra, extra)
    return found
