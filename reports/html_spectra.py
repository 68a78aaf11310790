"""The HTML report's per-head spectra: what stands out (the same summary as the terminal's), the
W_QK and W_OV heatmaps on one shared colour scale with the scale drawn, and the per-head table."""

from __future__ import annotations

from . import svg_charts
from .spectra import NEAR_DEAD, STANDOUT, spectra_summary
from .summary import fmt_float, head_rows
from .svg_charts import esc


def _summary_list(layers: list[dict]) -> str:
    s = spectra_summary({"layers": layers})
    if not s:
        return ""
    items = []
    for form, heads in s.lowest_effective_rank.items():
        full = s.full_rank.get(form)
        items.append(f"<li><strong>Lowest effective rank, {esc(form)}</strong>{esc(f' (of {full})' if full else '')}: "
                     + esc(", ".join(f"{x.where} {fmt_float(x.effective_rank)}" for x in heads))
                     + esc(f"; median head {fmt_float(s.median_effective_rank[form])}") + "</li>")
    if s.worst_conditioned:
        items.append("<li><strong>Worst conditioned</strong>: " + esc("; ".join(
            f"{x.form} {x.where} " + (f"∞ (rank {x.rank} of {x.full})" if x.deficient else fmt_float(x.condition))
            for x in s.worst_conditioned)) + "</li>")
    items.append("<li><strong>Dead heads</strong>: " + (esc(", ".join(f"layer {a} head {b}" for a, b in s.dead))
                                                         + " (W_OV = 0)" if s.dead else "none") + "</li>")
    items.append("<li><strong>Near-dead heads</strong>: " + (esc("; ".join(
        f"{x.where} (largest W_OV σ {fmt_float(x.sigma_max)}, median head {fmt_float(ref)})" for x, ref in s.near_dead))
        if s.near_dead else "none") + "</li>")
    items.append("<li><strong>Layers that stand out</strong>: " + (esc("; ".join(
        f"layer {x.layer}: {x.why}" for x in s.standouts)) if s.standouts else "none") + "</li>")
    return (f'<ul class="spectra-summary">{"".join(items)}</ul><p class="small">Near-dead: largest W_OV singular '
            f"value below {NEAR_DEAD:g} × the median head's; a layer stands out when its heads' mean effective rank "
            f"is below {STANDOUT:g} × the median layer's, or when its weights add unidentified parameters.</p>")


def spectra_section(layers: list[dict]) -> str:
    if not any(layer.get("spectra") for layer in layers):
        return ('<section id="spectra" aria-labelledby="h-spectra"><h2 id="h-spectra">Per-head spectra</h2>'
                "<p>The result carries no spectra.</p></section>")
    parts = ['<section id="spectra" aria-labelledby="h-spectra"><h2 id="h-spectra">Per-head spectra</h2>',
             _summary_list(layers),
             "<p>Effective rank is exp(entropy) of the normalised singular values (1 = one direction, "
             "d_k = all equal). Both heatmaps of a metric share one colour scale (drawn above each), so W_QK and "
             "W_OV compare cell by cell. A <strong>!</strong> and a red outline mark a head whose numerical rank "
             "is below its width: it has more freedom than the structure says. Hover a cell for its numbers; "
             "the table below lists them all.</p>"]
    scales = {m: svg_charts.heatmap_scale(layers, m) for m in ("effective_rank", "top_sigma")}
    parts.append('<div class="spectra-grid">')
    for side, label in (("qk", "W_QK (query-key)"), ("ov", "W_OV (value-output)")):
        parts.append(f'<div class="metric-group" data-metric-group="{side}"><h3>{esc(label)}</h3>'
                     '<div class="metric-toggle" role="group" aria-label="Heatmap metric">'
                     '<button type="button" data-show="effective_rank" aria-pressed="true">Effective rank</button>'
                     '<button type="button" data-show="top_sigma" aria-pressed="false">Largest singular value'
                     "</button></div>")
        for metric, mlabel in (("effective_rank", "effective rank"), ("top_sigma", "largest singular value")):
            lo, hi = scales[metric]
            chart = svg_charts.heatmap(layers, side, metric, f"heat-{side}-{metric}", scale=scales[metric])
            parts.append(f'<figure class="metric" data-metric="{metric}">{chart}<figcaption>{esc(label)}: '
                         f"{esc(mlabel)} per layer (rows) and query head (columns); colour scale "
                         f"{esc(fmt_float(lo))} to {esc(fmt_float(hi))}, shared with the other heatmap."
                         "</figcaption></figure>")
        parts.append("</div>")
    parts.append("</div>")
    parts.append(f"<details><summary>Per-head table</summary>{_head_table(layers)}</details></section>")
    return "".join(parts)


def _head_table(layers: list[dict]) -> str:
    cols = ("Layer", "Head", "KV head", "QK rank", "QK eff. rank", "QK condition", "QK σ1", "QK σ2", "QK σ3",
            "OV rank", "OV eff. rank", "OV condition", "OV σ1", "OV σ2", "OV σ3")
    head = "".join(f'<th scope="col"{" class=num" if i > 1 else ""}>{esc(c)}</th>' for i, c in enumerate(cols))
    body = []
    for layer in layers:
        for r in head_rows(layer):
            top = [(r.qk_top + [None] * 3)[:3], (r.ov_top + [None] * 3)[:3]]
            cells = [r.kv_head, _rank(r.qk_rank, layer.get("d_k")), fmt_float(r.qk_effective_rank),
                     fmt_float(r.qk_condition), *[fmt_float(v) if v is not None else "" for v in top[0]],
                     _rank(r.ov_rank, layer.get("d_v")), fmt_float(r.ov_effective_rank),
                     fmt_float(r.ov_condition), *[fmt_float(v) if v is not None else "" for v in top[1]]]
            body.append(f'<tr><th scope="row">{esc(layer.get("index"))}</th><th scope="row">{r.head}</th>'
                        + "".join(f'<td class="num">{esc(c)}</td>' for c in cells) + "</tr>")
    return (f'<div class="scroll"><table class="heads"><caption>Per-head spectra (top three singular values)'
            f"</caption><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _rank(rank, full) -> str:
    if rank is None:
        return "–"
    return f"{rank} (below {full}!)" if full is not None and rank < full else str(rank)


__all__ = ["spectra_section"]
