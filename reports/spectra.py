"""What the per-head spectra say, in a few lines: the view behind the default report's "Head spectra".

Reads the JSON contract's ``layers[].spectra`` (each head's W_QK and W_OV singular values, numerical
ranks and condition numbers) and ``layers[].dead_heads``; returns plain values, renders nothing.

Definitions (stated in the reports too):

- effective rank of a head's form: exp(H(p)) with p = σ / Σσ (Roy and Vetterli 2007), between 1
  (one direction) and the numerical rank;
- dead head: W_OV = W_V^g W_O^h is exactly zero (numerical rank 0): it passes nothing to the output;
- near-dead head: not dead, but its largest W_OV singular value is below :data:`NEAR_DEAD` times the
  median largest W_OV singular value over the model's heads;
- a layer stands out when the mean effective rank of its heads' W_QK (or W_OV) is below
  :data:`STANDOUT` times the median of that mean over the model's layers, or when its actual weights
  add unidentified parameters beyond the structural count.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .summary import effective_rank

#: Largest W_OV singular value below this share of the model's median: a near-dead head.
NEAR_DEAD = 0.01
#: A layer's mean effective rank below this share of the median layer's: the layer stands out.
STANDOUT = 0.75
#: How many heads each "lowest" / "worst" list names.
TOP = 3

FORMS = (("qk", "W_QK", "d_k"), ("ov", "W_OV", "d_v"))


@dataclass(frozen=True)
class HeadForm:
    """One head's W_QK or W_OV: ``form`` is ``"W_QK"`` / ``"W_OV"``; ``full`` its possible rank."""

    layer: int
    head: int
    kv_head: int
    form: str
    rank: int | None
    full: int | None
    effective_rank: float | None
    condition: float | None
    sigma_max: float | None

    @property
    def deficient(self) -> bool:
        return self.rank is not None and self.full is not None and 0 < self.rank < self.full

    @property
    def where(self) -> str:
        return f"layer {self.layer} head {self.head}"


@dataclass(frozen=True)
class Standout:
    """A layer whose heads differ from the rest: ``why`` says how, in words."""

    layer: int
    why: str


@dataclass(frozen=True)
class SpectraSummary:
    heads: list[HeadForm]
    lowest_effective_rank: dict[str, list[HeadForm]] = field(default_factory=dict)
    median_effective_rank: dict[str, float] = field(default_factory=dict)
    full_rank: dict[str, int | None] = field(default_factory=dict)
    worst_conditioned: list[HeadForm] = field(default_factory=list)
    dead: list[tuple[int, int]] = field(default_factory=list)
    near_dead: list[tuple[HeadForm, float]] = field(default_factory=list)
    standouts: list[Standout] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.heads)


def head_forms(layer: dict) -> list[HeadForm]:
    """Every head's W_QK and W_OV of one ``layers[]`` entry (empty without ``spectra``)."""
    spectra = layer.get("spectra") or {}
    index = int(layer.get("index", 0))
    h, g = layer.get("heads"), layer.get("kv_heads")
    r = max(1, h // g) if h and g else 1
    out = []
    for key, form, dim in FORMS:
        values = spectra.get(key) or []
        for i, sigma in enumerate(values):
            sigma = [float(v) for v in (sigma or []) if v is not None]
            finite = [v for v in sigma if math.isfinite(v)]
            out.append(HeadForm(index, i, i // r, form, _pick(spectra.get(f"{key}_rank"), i), layer.get(dim),
                                effective_rank(sigma), _pick(spectra.get(f"{key}_condition"), i),
                                max(finite) if finite else None))
    return out


def _pick(values, i: int):
    return values[i] if isinstance(values, list) and i < len(values) else None


def spectra_summary(result: dict, top: int = TOP) -> SpectraSummary:
    """The lowest effective ranks, worst conditioning, dead / near-dead heads and standout layers."""
    layers = sorted(result.get("layers") or [], key=lambda x: x.get("index", 0))
    heads = [hf for layer in layers for hf in head_forms(layer)]
    if not heads:
        return SpectraSummary([])
    lowest, medians, full = {}, {}, {}
    for _, form, _dim in FORMS:
        ranked = [x for x in heads if x.form == form and x.effective_rank is not None]
        if not ranked:
            continue
        lowest[form] = sorted(ranked, key=lambda x: (x.effective_rank, x.layer, x.head))[:top]
        medians[form] = statistics.median(x.effective_rank for x in ranked)
        fulls = {x.full for x in ranked}
        full[form] = fulls.pop() if len(fulls) == 1 else None

    def badness(x: HeadForm) -> tuple:
        # rank-deficient (condition infinite) first, then the largest finite condition number
        return (0, -(x.full - x.rank), x.layer, x.head) if x.deficient else (1, -(x.condition or 0), x.layer, x.head)

    conditioned = [x for x in heads if x.deficient or (x.condition is not None and math.isfinite(x.condition))]
    worst = sorted(conditioned, key=badness)[:top]

    dead = sorted({(int(layer.get("index", 0)), int(h)) for layer in layers for h in (layer.get("dead_heads") or [])}
                  | {(x.layer, x.head) for x in heads if x.form == "W_OV" and x.rank == 0})
    ov_top = [x.sigma_max for x in heads if x.form == "W_OV" and x.sigma_max]
    near = []
    if ov_top:
        reference = statistics.median(ov_top)
        near = [(x, reference) for x in heads
                if x.form == "W_OV" and (x.layer, x.head) not in dead and x.sigma_max is not None
                and x.sigma_max < NEAR_DEAD * reference]
    return SpectraSummary(heads, lowest, medians, full, worst, dead, near, _standouts(layers, heads))


def _standouts(layers: list[dict], heads: list[HeadForm]) -> list[Standout]:
    out: dict[int, list[str]] = {}
    for _, form, _dim in FORMS:
        means: dict[int, float] = {}
        for layer in layers:
            index = int(layer.get("index", 0))
            ranks = [x.effective_rank for x in heads if x.layer == index and x.form == form and x.effective_rank]
            if ranks:
                means[index] = sum(ranks) / len(ranks)
        if len(means) < 3:
            continue  # "the rest" needs a few layers to mean anything
        reference = statistics.median(means.values())
        for index, mean in means.items():
            if mean < STANDOUT * reference:
                out.setdefault(index, []).append(f"{form} mean effective rank {mean:.3g} against {reference:.3g} "
                                                 "in the median layer")
    for layer in layers:
        extra = layer.get("extra_unidentified") or 0
        if extra:
            out.setdefault(int(layer.get("index", 0)), []).append(
                f"its weights add {extra:,} unidentified parameter{'s' * (extra != 1)} beyond the structure")
    return [Standout(i, "; ".join(why)) for i, why in sorted(out.items())]


__all__ = ["HeadForm", "Standout", "SpectraSummary", "head_forms", "spectra_summary", "NEAR_DEAD", "STANDOUT"]
