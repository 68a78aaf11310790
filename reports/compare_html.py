"""Single-file HTML report of a ``compare`` result: summary, similarity-by-layer chart, evidence.

Inline CSS and SVG only (the stylesheet of the inspect report); nothing is loaded from the network.
"""

from __future__ import annotations

import math

from .atomic import write_text_atomic
from .html import embed_json
from .html_style import CSS
from .svg_charts import _open_svg, esc

_EXTRA_CSS = """
svg .c-sim { fill: var(--meas); } svg .c-min { fill: var(--closed); }
.verdict-same-function { color: var(--ok); } .verdict-same-lineage { color: var(--warning); }
.verdict-unrelated { color: var(--error); }
"""


def write_compare_html(result: dict, path) -> None:
    write_text_atomic(path, render_compare_html(result))


def similarity_chart(layers: list[dict], chart_id: str = "chart-similarity") -> str:
    """Bars of 1 - similarity per layer on a log axis (a fine-tune shows as taller bars where it
    changed the model); a dot marks the least similar matched head of each layer."""
    n = max(len(layers), 1)
    left, width, height, top, bottom = 70, 860, 280, 32, 36
    plot_w, plot_h = width - left - 16, height - top - bottom
    floor = 1e-12
    vals = [max(floor, 1.0 - v) for L in layers for v in (L["similarity"], L["min_similarity"])]
    lo = 10.0 ** math.floor(math.log10(min(vals))) if vals else floor
    hi = 10.0 ** math.ceil(math.log10(max(max(vals), lo * 10))) if vals else 1.0
    span = math.log10(hi) - math.log10(lo)

    def y(v: float) -> float:
        return top + plot_h - plot_h * (math.log10(max(v, lo)) - math.log10(lo)) / span

    desc = "; ".join(f"layer {L['index']}: similarity {L['similarity']:.6f}, least similar head {L['min_similarity']:.6f}"
                     for L in layers[:60])
    out = _open_svg(chart_id, width, height, "Dissimilarity (1 - similarity) of matched heads per layer", desc, "ratio")
    out.append(f'<rect class="c-sim" x="{left}" y="8" width="12" height="12"/>'
               f'<text class="lbl" x="{left + 16}" y="18">1 - mean similarity</text>'
               f'<circle class="c-min" cx="{left + 186}" cy="14" r="4"/>'
               f'<text class="lbl" x="{left + 194}" y="18">1 - least similar head</text>')
    for k in range(round(span) + 1):
        v = lo * 10.0 ** k
        yy = y(v)
        out.append(f'<line class="grid" x1="{left}" y1="{yy:.1f}" x2="{left + plot_w}" y2="{yy:.1f}"/>'
                   f'<text class="lbl" x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:.0e}</text>')
    slot = plot_w / n
    every = max(1, math.ceil(n / 32))
    for i, L in enumerate(layers):
        x0 = left + i * slot
        mean_d, min_d = max(floor, 1.0 - L["similarity"]), max(floor, 1.0 - L["min_similarity"])
        yb = y(mean_d)
        out.append(f'<g class="slot"><title>layer {esc(L["index"])}: similarity {L["similarity"]:.6f}, least similar '
                   f'head {L["min_similarity"]:.6f}, {L["nearest_in_layer"]} of {L["heads"][0]} heads nearest in layer'
                   f'</title><rect class="c-sim" x="{x0 + slot * 0.15:.2f}" y="{yb:.2f}" width="{slot * 0.7:.2f}" '
                   f'height="{top + plot_h - yb:.2f}"/><circle class="c-min" cx="{x0 + slot / 2:.2f}" '
                   f'cy="{y(min_d):.2f}" r="{min(4.0, slot / 3):.2f}"/>')
        if i % every == 0:
            out.append(f'<text class="lbl" x="{x0 + slot / 2:.2f}" y="{top + plot_h + 14}" text-anchor="middle">'
                       f'{esc(L["index"])}</text>')
        out.append("</g>")
    out.append(f'<text class="lbl" x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">layer</text></svg>')
    return "".join(out)


def render_compare_html(r: dict) -> str:
    a, b = r["a"], r["b"]
    t = r.get("lineage")
    sf = r["same_function"]
    w = sf.get("worst") or {}
    cards = [("verdict", r["verdict"], f"alpha {r['alpha']:.0e}"),
             ("mean similarity", "n/a" if r["similarity"] is None else f"{r['similarity']:.6f}", "matched heads"),
             ("lineage p-value", "n/a" if t is None else f"{t['p_value']:.3g}",
              "" if t is None else f"{t['statistic']} of {t['heads']} heads in layer (chance {t['null_mean']:.2f})"),
             ("same function", "yes" if sf["holds"] else "no",
              f"largest error / tolerance {w['ratio']:.3g}" if w else esc(sf.get("reason", "")))]
    card_html = "".join(f'<div class="card"><span class="small">{esc(k)}</span><span class="big'
                        f'{" verdict-" + esc(v) if k == "verdict" else ""}">{esc(v)}</span>'
                        f'<span class="small">{esc(s)}</span></div>' for k, v, s in cards)
    rows = "".join(f"<tr><th>{tag}</th><td><code>{esc(s['source'])}</code></td><td>{esc(s['origin'])}</td>"
                   f"<td>{esc(s['dtype'])}</td><td>{s['unit_roundoff']:.1e}</td><td>{s['layers']}</td>"
                   f"<td>{'yes' if s['gains_folded'] else 'no'}</td></tr>" for tag, s in (("A", a), ("B", b)))
    sides = ('<table><caption>Models</caption><thead><tr><th></th><th>source</th><th>read from</th><th>dtype</th>'
             f'<th>unit roundoff</th><th>layers</th><th>gains folded</th></tr></thead><tbody>{rows}</tbody></table>')
    layer_rows = "".join(
        f"<tr><td>{L['index']}</td><td>{L['heads'][0]}/{L['heads'][1]}</td><td>{L['similarity']:.6f}</td>"
        f"<td>{L['min_similarity']:.6f}</td><td>{L['nearest_in_layer']}</td><td>{_ratio(L)}</td></tr>"
        for L in r["layers"])
    layers = ""
    if r["layers"]:
        layers = ('<section id="layers"><h2>Similarity by layer</h2>' + similarity_chart(r["layers"]) +
                  '<table><caption>Per layer: heads matched by least total distance of their invariants</caption>'
                  '<thead><tr><th>layer</th><th>heads A/B</th><th>similarity</th><th>least similar head</th>'
                  '<th>nearest in layer</th><th>max error / tolerance</th></tr></thead><tbody>'
                  f'{layer_rows}</tbody></table></section>')
    notes = "".join(f"<li>{esc(n)}</li>" for n in r["structure_notes"])
    evidence = [f"<p>Same function: {'yes' if sf['holds'] else 'no'}. {esc(sf.get('bound', ''))}.</p>"]
    if w:
        evidence.append(f"<p>Largest |s_A - s_B| = {w['error']:.3g} against tolerance {w['tolerance']:.3g} at layer "
                        f"{w['layer']}, heads {w['head_a']}/{w['head_b']}, {esc(w['kind'])}.</p>")
    al = r.get("alignment")
    if t is not None and al:
        evidence.append(f"<p>Depth change: B's layers come from A's layers {esc(str(al['b_from_a']))} (A layers unused "
                        f"{esc(str(al['a_layers_unused']))}, repeated {esc(str(al['a_layers_repeated']))}). Lineage: "
                        f"{t['statistic']} of {t['heads']} heads of B have their nearest head of A in the A layer their "
                        f"layer is aligned to (at most {t['null_mean']:.0f} by chance in the mean); p-value "
                        f"{t['p_value']:.3g} = Chatterjee bound {t['chatterjee_bound']:.3g} times the {esc(al['maps'])} "
                        "alignments.</p>")
    elif t is not None:
        evidence.append(f"<p>Lineage: {t['statistic']} of {t['heads']} heads of B are the nearest counterpart of a head "
                        f"of A in the same layer; under random re-pairing the mean is {t['null_mean']:.2f}. p-value "
                        f"{t['p_value']:.3g} = min(1, 2 min(Chatterjee bound {t['chatterjee_bound']:.3g}, Monte Carlo "
                        f"{_mc(t)} over {t['permutations']} permutations)).</p>")
    if notes:
        evidence.append(f"<ul>{notes}</ul>")
    return "".join([
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>idinspect compare: {esc(a['source'])} vs {esc(b['source'])}</title>\n<style>{CSS}{_EXTRA_CSS}</style>\n",
        "</head>\n<body>\n<header>\n<h1>Model comparison</h1>\n",
        f'<p class="sub"><code>{esc(a["source"])}</code> vs <code>{esc(b["source"])}</code></p>\n</header>\n',
        f'<main id="main">\n<section id="summary"><h2>Summary</h2><div class="cards">{card_html}</div>{sides}</section>\n',
        layers, f'\n<section id="evidence"><h2>Evidence</h2>{"".join(evidence)}</section>\n</main>\n',
        "<footer>Generated by idinspect compare. This page is self-contained: it loads nothing from the network.</footer>\n",
        f'<script type="application/json" id="idinspect-data">{embed_json(r)}</script>\n</body>\n</html>\n',
    ])


def _mc(t: dict) -> str:
    return "skipped (bound below its resolution)" if t["p_monte_carlo"] is None else f"{t['p_monte_carlo']:.3g}"


def _ratio(L: dict) -> str:
    """The layer's tolerance ratio, or the A layer it was aligned to (depth changes: no ratio)."""
    if L.get("tolerance_ratio") is None:
        return f"from A layer {L['aligned_a']}" if "aligned_a" in L else "-"
    return f"{L['tolerance_ratio']:.3g}"
