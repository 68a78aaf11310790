"""What the heavy-tail figures say per layer (issue 37): plain values for the terminal and HTML views.

Reads ``layers[].spectra.heavy_tail`` of the JSON contract (see docs/mathematics.md, "Heavy-tailed
spectra of the circuits"): per layer, the power-law exponent alpha of the per-layer sums W_QK and
W_OV, the median over heads, the stable rank, the spectral norm and the trap count; renders nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

#: The one sentence every view prints beside the figures.
MEANING = ("alpha is the power-law exponent of the eigenvalue tail of the layer's W_QK = Σ_h W_Q^h W_K^g(h)T and "
           "W_OV = Σ_h W_V^g(h) W_O^h (the products the output depends on, so a gauge move leaves it unchanged); "
           "2–6 is the range WeightWatcher reports as usual for trained layers. It describes the weights' "
           "spectrum, not the model's accuracy, and an exponent outside the range is a prompt to look, "
           "not evidence of under- or over-training.")


@dataclass(frozen=True)
class LayerTail:
    """One layer's figures: ``alpha`` / ``head_alpha`` / ``stable_rank`` / ``traps`` keyed "qk", "ov"."""

    layer: int
    alpha: dict[str, float | None]
    head_alpha: dict[str, float | None]
    stable_rank: dict[str, float | None]
    traps: dict[str, int | None]
    outside: dict[str, bool]


def _get(row: dict | None, key: str):
    return None if row is None else row.get(key)


def layer_tails(result: dict) -> tuple[list[LayerTail], tuple[float, float]]:
    """(per-layer figures in layer order, the usual alpha range); empty without the section."""
    out: list[LayerTail] = []
    lo, hi = 2.0, 6.0
    for layer in sorted(result.get("layers") or [], key=lambda x: x.get("index", 0)):
        ht = (layer.get("spectra") or {}).get("heavy_tail")
        if not ht:
            continue
        lo, hi = ht.get("alpha_range", (lo, hi))
        alpha, head_alpha, srank, traps, outside = {}, {}, {}, {}, {}
        for form in ("qk", "ov"):
            row = ht[form]["layer"]
            alpha[form] = _get(row, "alpha")
            heads = [h["alpha"] for h in ht[form]["heads"] if h is not None and h.get("alpha") is not None]
            head_alpha[form] = statistics.median(heads) if heads else None
            srank[form] = _get(row, "stable_rank")
            traps[form] = _get(row, "traps")
            outside[form] = alpha[form] is not None and not lo <= alpha[form] <= hi
        out.append(LayerTail(int(layer.get("index", len(out))), alpha, head_alpha, srank, traps, outside))
    return out, (float(lo), float(hi))


__all__ = ["MEANING", "LayerTail", "layer_tails"]
