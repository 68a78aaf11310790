"""The HTML report's heavy-tail section (issue 37): per-layer exponent alpha of the per-layer sums
W_QK and W_OV on one chart, the usual range shaded, layers outside it marked, and what the figure
means and does not mean. Self-contained styling (SVG attributes), so the page's stylesheet is untouched."""

from __future__ import annotations

import math

from .heavy_tail import MEANING, layer_tails
from .summary import fmt_float
from .svg_charts import _num, _open_svg, esc

#: (form, label, colour) of the two series.
SERIES = (("qk", "W_QK", "#1f77b4"), ("ov", "W_OV", "#d95f02"))
OUTSIDE = "#c00000"


def alpha_chart(result: dict, chart_id: str = "chart-alpha") -> str:
    """SVG: alpha per layer for W_QK (circles) and W_OV (squares); the band lo <= alpha <= hi shaded;
    a point outside it drawn with a red ring and a "!" above. Empty string without figures."""
    rows, (lo, hi) = layer_tails(result)
    values = [v for r in rows for v in r.alpha.values() if v is not None and math.isfinite(v)]
    if not values:
        return ""
    n = len(rows)
    left, width, height, top, bottom = 56, 860, 260, 30, 36
    plot_w, plot_h = width - left - 16, height - top - bottom
    vmin, vmax = min(min(values), lo) - 0.5, max(max(values), hi) + 0.5
    y_of = lambda v: top + plot_h * (vmax - v) / (vmax - vmin)  # noqa: E731
    slot = plot_w / n
    desc = "; ".join(f"layer {r.layer}: W_QK {fmt_float(r.alpha['qk'])}, W_OV {fmt_float(r.alpha['ov'])}"
                     + (" (outside the usual range)" if any(r.outside.values()) else "") for r in rows[:64])
    out = _open_svg(chart_id, width, height, "Power-law exponent alpha per layer (gauge-invariant circuits)",
                    desc, "alpha")
    out.append(f'<rect x="{left}" y="{y_of(hi):.1f}" width="{plot_w}" height="{y_of(lo) - y_of(hi):.1f}" '
               f'fill="#2ca02c" fill-opacity="0.12"/>')
    for v in range(math.ceil(vmin), math.floor(vmax) + 1):
        y = y_of(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ccc" stroke-width="0.5"/>'
                   f'<text class="lbl" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v}</text>')
    x_legend = left
    for form, label, colour in SERIES:
        out.append(f'<circle cx="{x_legend + 6}" cy="14" r="5" fill="{colour}"/>'
                   f'<text class="lbl" x="{x_legend + 14}" y="18">{label} (layer sum)</text>')
        x_legend += 150
    out.append(f'<text class="lbl" x="{x_legend}" y="18">shaded: usual range {_num(lo)} ≤ α ≤ {_num(hi)}; '
               f'<tspan fill="{OUTSIDE}">! outside</tspan></text>')
    label_every = max(1, math.ceil(n / 32))
    for i, r in enumerate(rows):
        cx = left + (i + 0.5) * slot
        out.append(f'<g class="slot"><title>layer {r.layer}: α W_QK {esc(fmt_float(r.alpha["qk"]))}, '
                   f'α W_OV {esc(fmt_float(r.alpha["ov"]))}</title>')
        for k, (form, _, colour) in enumerate(SERIES):
            v = r.alpha[form]
            if v is None or not math.isfinite(v):
                continue
            x, y = cx + (k - 0.5) * min(8.0, slot / 4), y_of(v)
            out.append(f'<circle cx="{x:.2f}" cy="{y:.2f}" r="4" fill="{colour}"/>')
            if r.outside[form]:
                out.append(f'<circle cx="{x:.2f}" cy="{y:.2f}" r="7" fill="none" stroke="{OUTSIDE}" stroke-width="1.5"/>'
                           f'<text x="{x:.2f}" y="{y - 10:.2f}" text-anchor="middle" fill="{OUTSIDE}" '
                           f'font-weight="bold" font-size="12">!</text>')
        if i % label_every == 0:
            out.append(f'<text class="lbl" x="{cx:.2f}" y="{top + plot_h + 14}" text-anchor="middle">{r.layer}</text>')
        out.append("</g>")
    out.append(f'<text class="lbl" x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">layer</text></svg>')
    return "".join(out)


def heavy_tail_section(result: dict) -> str:
    """The section, or an empty string when the result has no heavy-tail figures."""
    chart = alpha_chart(result)
    if not chart:
        return ""
    rows, (lo, hi) = layer_tails(result)
    outside = [f"layer {r.layer} ({', '.join(f.upper() for f, o in r.outside.items() if o)})"
               for r in rows if any(r.outside.values())]
    listed = esc("; ".join(outside)) if outside else "none"
    return ('<section id="heavy-tail" aria-labelledby="h-heavy-tail"><h2 id="h-heavy-tail">Heavy-tailed spectra '
            f"of the circuits</h2><figure>{chart}<figcaption>Power-law exponent α of each layer's W_QK and W_OV "
            f"eigenvalue tail.</figcaption></figure><p>{esc(MEANING)}</p>"
            f"<p><strong>Outside {_num(lo)} ≤ α ≤ {_num(hi)}</strong>: {listed}. Per-head exponents, stable ranks, "
            "spectral norms and correlation-trap counts are in the JSON report (layers[].spectra.heavy_tail).</p>"
            "</section>")


__all__ = ["alpha_chart", "heavy_tail_section"]
