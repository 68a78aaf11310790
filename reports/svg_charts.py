"""Inline SVG charts for the HTML report: no scripts, no external references, every string escaped.

Each function returns one ``<svg role="img">`` element with a ``<title>`` and ``<desc>`` (its
accessible name and description). Colours come from CSS classes (``c-*``, themed by the page's
stylesheet, light and dark) except the heatmap cells, whose fill encodes the value; every mark
also carries its number as text or as a ``<title>`` tooltip, so colour is never the only carrier.
"""

from __future__ import annotations

import html
import math

from .summary import effective_rank, fmt_float, fmt_int, fmt_ratio

#: Segments of the per-layer bar, in drawing order: (key, label, CSS class).
SEGMENTS = (("qk_gauge", "QK gauge", "c-qk"), ("vo_gauge", "VO gauge", "c-vo"),
            ("noop_bias", "no-op key bias", "c-noop"), ("absorbable_bias", "absorbable value bias", "c-abs"))

#: Viridis stops (colour-blind safe, monotone in lightness).
_VIRIDIS = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)),
            (1.0, (253, 231, 37)))


def esc(text) -> str:
    """Escape for SVG/HTML text and attribute values; control characters a checkpoint may carry in a
    tensor name or config string (ESC, BEL, NUL, bidi overrides...) become visible ``\\xNN`` text."""
    from ..textsafe import visible

    return html.escape(visible(text, newlines=True), quote=True)


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def _open_svg(chart_id: str, width: float, height: float, title: str, desc: str, cls: str) -> list[str]:
    return [f'<svg class="chart {cls}" id="{esc(chart_id)}" role="img" '
            f'viewBox="0 0 {_num(width)} {_num(height)}" width="{_num(width)}" height="{_num(height)}" '
            f'aria-labelledby="{esc(chart_id)}-t {esc(chart_id)}-d">',
            f'<title id="{esc(chart_id)}-t">{esc(title)}</title>', f'<desc id="{esc(chart_id)}-d">{esc(desc)}</desc>']


def viridis(t: float) -> str:
    """The viridis colour at ``t`` in [0, 1] as ``#rrggbb``."""
    t = min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in zip(_VIRIDIS, _VIRIDIS[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
            return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(c0, c1))
    return "#fde725"


def _ink_for(t: float) -> str:
    """Text class readable on viridis(t): light ink on the dark half, dark ink on the light half."""
    return "ink-dark" if t > 0.55 else "ink-light"


#: The unidentified parts the weights add beyond the structure (dead or rank-deficient heads).
EXTRA_SEGMENT = ("extra_unidentified", "added by the weights", "c-extra")


def parameter_bars(layers: list[dict], chart_id: str = "chart-params") -> str:
    """The composition of each layer's unidentified parameters, on a scale where it is visible.

    Runs of identical consecutive layers share one bar (labelled ``layers 0-29``). Each bar is
    split into QK gauge, VO gauge, no-op and absorbable bias dimensions and what dead or
    rank-deficient heads add; the axis runs from 0 to a round share just above the largest layer's
    (e.g. 0-10 % of the layer's attention parameters), so the small parts stay readable. The
    identified remainder is off the scale and said in the numbers at the right.
    """
    from .summary import layer_groups

    groups = layer_groups(layers, collapse=True)
    n = len(groups)
    row, gap = (18, 6) if n <= 40 else (10, 3)
    left, right, width = 150, 230, 900
    bar_w = width - left - right
    top = 34
    height = top + n * (row + gap) + 42
    segments = (*SEGMENTS, EXTRA_SEGMENT)

    def share(layer: dict) -> float:
        params = layer.get("attention_parameters") or 0
        un = (layer.get("unidentified_parameters") or 0) + (layer.get("extra_unidentified") or 0)
        return un / params if params else 0.0

    biggest = max((share(g.row) for g in groups), default=0.0)
    step = nice_step(max(biggest, 1e-9) * 1.05 / 4)
    vmax = min(step * 4, 1.0) if biggest <= 1.0 else biggest
    desc = (f"Unidentified attention parameters per layer, axis 0 to {fmt_ratio(vmax)} of the layer's "
            "parameters; " + "; ".join(f"{g.label}: {fmt_int(g.row.get('unidentified_parameters'))} of "
                                      f"{fmt_int(g.row.get('attention_parameters'))} unidentified"
                                      for g in groups[:50]) + ("; ..." if n > 50 else ""))
    out = _open_svg(chart_id, width, height, "Composition of the unidentified attention parameters per layer",
                    desc, "bars")
    x = left
    for key, label, cls in segments:
        out.append(f'<rect class="{cls}" x="{x}" y="8" width="12" height="12"/>'
                   f'<text class="lbl" x="{x + 16}" y="18">{esc(label)}</text>')
        x += 28 + 6.2 * len(label)
    for i, g in enumerate(groups):
        layer, y = g.row, top + i * (row + gap)
        params = layer.get("attention_parameters") or 0
        un = (layer.get("unidentified_parameters") or 0) + (layer.get("extra_unidentified") or 0)
        out.append(f'<g class="row"><title>{esc(_bar_tooltip(layer, g.label))}</title>')
        label = g.label if g.count == 1 else g.label.split(" (")[0]
        out.append(f'<text class="lbl" x="{left - 6}" y="{y + row * 0.75:.1f}" text-anchor="end">{esc(label)}</text>')
        x = float(left)
        for key, _label, cls in segments:
            v = layer.get(key) or 0
            if params and v:
                w = bar_w * (v / params) / vmax
                out.append(f'<rect class="{cls}" x="{x:.2f}" y="{y}" width="{max(w, 1.0):.2f}" height="{row}"/>')
                x += w
        out.append(f'<text class="lbl num" x="{left + bar_w + 6}" y="{y + row * 0.75:.1f}">'
                   f'{esc(fmt_int(un))} of {esc(fmt_int(params))} ({esc(fmt_ratio(un / params if params else None))})'
                   f"{esc(f' x{g.count}' if g.count > 1 else '')}</text></g>")
    axis_y = top + n * (row + gap) + 4
    for k in range(5):
        frac = k / 4
        ax = left + bar_w * frac
        out.append(f'<line class="axis" x1="{ax:.1f}" y1="{top - 4}" x2="{ax:.1f}" y2="{axis_y}"/>'
                   f'<text class="lbl" x="{ax:.1f}" y="{axis_y + 14}" text-anchor="middle">'
                   f"{_num(round(vmax * frac * 100, 6))}%</text>")
    out.append(f'<text class="lbl" x="{left + bar_w / 2:.1f}" y="{axis_y + 27}" text-anchor="middle">'
               "share of the layer's attention parameters (the identified rest is off the scale)</text>")
    out.append("</svg>")
    return "".join(out)


def _bar_tooltip(layer: dict, label: str | None = None) -> str:
    parts = [f"{label or 'layer ' + str(layer.get('index'))}: {fmt_int(layer.get('attention_parameters'))} parameters"]
    parts += [f"{label} {fmt_int(layer.get(key))}" for key, label, _ in (*SEGMENTS, EXTRA_SEGMENT)]
    parts.append(f"unidentified {fmt_int(layer.get('unidentified_parameters'))} "
                 f"({fmt_ratio(layer.get('identification_ratio'))})")
    return ", ".join(parts)


def ratio_chart(layers: list[dict], chart_id: str = "chart-ratio") -> str:
    """Measured unidentified share per layer (bars) against the closed form (dashed ticks)."""
    n = max(len(layers), 1)
    left, width, height, top, bottom = 64, 860, 260, 30, 36
    plot_w, plot_h = width - left - 16, height - top - bottom
    values = [v for layer in layers for v in (layer.get("identification_ratio"), layer.get("closed_form_ratio"),
                                              _bias_free(layer))
              if isinstance(v, (int, float)) and math.isfinite(v)]
    step = nice_step((max(values) if values else 1.0) * 1.1 / 4)
    vmax = step * 4
    slot = plot_w / n
    desc = "; ".join(f"layer {layer.get('index')}: measured {fmt_ratio(layer.get('identification_ratio'))}, "
                     f"closed form {fmt_ratio(layer.get('closed_form_ratio'))}" for layer in layers[:50])
    out = _open_svg(chart_id, width, height, "Measured unidentified share per layer against the closed form",
                    desc, "ratio")
    out.append(f'<rect class="c-meas" x="{left}" y="8" width="12" height="12"/>'
               f'<text class="lbl" x="{left + 16}" y="18">measured U / P</text>'
               f'<line class="closed" x1="{left + 150}" y1="14" x2="{left + 176}" y2="14"/>'
               f'<text class="lbl" x="{left + 182}" y="18">closed form (no biases)</text>'
               f'<path class="c-free" d="{_diamond(left + 362, 14, 5)}"/>'
               f'<text class="lbl" x="{left + 372}" y="18">measured, no biases</text>')
    for k in range(5):
        v = vmax * k / 4
        y = top + plot_h - plot_h * k / 4
        out.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}"/>'
                   f'<text class="lbl" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(round(v * 100, 6))}%</text>')
    label_every = max(1, math.ceil(n / 32))
    for i, layer in enumerate(layers):
        x0 = left + i * slot
        meas, closed = layer.get("identification_ratio"), layer.get("closed_form_ratio")
        out.append(f'<g class="slot"><title>layer {esc(layer.get("index"))}: measured {esc(fmt_ratio(meas))}, '
                   f'closed form {esc(fmt_ratio(closed))}</title>')
        free = _bias_free(layer)
        if isinstance(meas, (int, float)) and math.isfinite(meas):
            h = plot_h * meas / vmax
            out.append(f'<rect class="c-meas" x="{x0 + slot * 0.15:.2f}" y="{top + plot_h - h:.2f}" '
                       f'width="{slot * 0.7:.2f}" height="{h:.2f}"/>')
        if isinstance(closed, (int, float)) and math.isfinite(closed):
            y = top + plot_h - plot_h * closed / vmax
            out.append(f'<line class="closed" x1="{x0 + 1:.2f}" y1="{y:.2f}" x2="{x0 + slot - 1:.2f}" y2="{y:.2f}"/>')
        if free is not None:
            marker = _diamond(x0 + slot / 2, top + plot_h - plot_h * free / vmax, min(5.0, slot / 3))
            out.append(f'<path class="c-free" d="{marker}"/>')
        if i % label_every == 0:
            out.append(f'<text class="lbl" x="{x0 + slot / 2:.2f}" y="{top + plot_h + 14}" text-anchor="middle">'
                       f'{esc(layer.get("index"))}</text>')
        out.append("</g>")
    out.append(f'<text class="lbl" x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">layer</text>')
    out.append("</svg>")
    return "".join(out)


def _diamond(cx: float, cy: float, r: float) -> str:
    return f"M{cx:.2f} {cy - r:.2f}L{cx + r:.2f} {cy:.2f}L{cx:.2f} {cy + r:.2f}L{cx - r:.2f} {cy:.2f}Z"


def _bias_free(layer: dict) -> float | None:
    params, un = layer.get("bias_free_parameters"), layer.get("bias_free_unidentified")
    return un / params if isinstance(params, int) and params and isinstance(un, int) else None


def nice_step(raw: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= ``raw`` (axis tick spacing)."""
    if not raw or raw <= 0 or not math.isfinite(raw):
        return 0.25
    base = 10 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw * (1 - 1e-12))


def heatmap_values(layers: list[dict], side: str, metric: str) -> list[list[float | None]]:
    """Rows = layers, columns = heads: ``metric`` is "effective_rank" or "top_sigma" of ``side`` (qk/ov)."""
    grid = []
    for layer in layers:
        spectra = (layer.get("spectra") or {}).get(side) or []
        if metric == "top_sigma":
            grid.append([(s[0] if s else None) for s in spectra])
        else:
            grid.append([effective_rank(s) for s in spectra])
    return grid


def heatmap_scale(layers: list[dict], metric: str) -> tuple[float, float]:
    """One colour scale for the W_QK and W_OV heatmaps of ``metric``: effective rank from the smallest
    value over both (rounded down) to the widest head (max of d_k, d_v); the largest singular value
    from the smallest to the largest over both."""
    finite = [v for side in ("qk", "ov") for r in heatmap_values(layers, side, metric) for v in r
              if v is not None and math.isfinite(v)]
    if metric == "effective_rank":
        full = max((layer.get(k) or 1 for layer in layers for k in ("d_k", "d_v")), default=1)
        lo, hi = (float(math.floor(min(finite))) if finite else 1.0), float(full)
        return min(lo, hi - 1.0), hi
    return (min(finite), max(finite)) if finite else (0.0, 1.0)


def cell_number(value) -> str:
    """A heatmap cell's number in at most four characters, never in exponent form: ``3.1``, ``47``,
    ``123``, ``12k`` (Gemma 3's effective ranks of ~120 once read ``1.2e+02``); the tooltip has the full value."""
    if value is None or not math.isfinite(float(value)):
        return fmt_float(value)
    v = float(value)
    if abs(v) < 10:
        return f"{v:.2g}" if abs(v) >= 0.01 or v == 0 else "~0"
    if abs(v) < 1000:
        return f"{v:.0f}"
    return f"{v / 1000:.0f}k" if abs(v) < 999_500 else f"{v / 1e6:.0f}M"


def heatmap(layers: list[dict], side: str, metric: str, chart_id: str,
            scale: tuple[float, float] | None = None) -> str:
    """Layer x head heatmap of one spectral ``metric`` for ``side`` ("qk" or "ov").

    The colour scale is ``scale`` (default :func:`heatmap_scale`, shared by W_QK and W_OV so the two
    charts compare); the legend shows it. Numerically rank-deficient heads carry a "!" mark.
    """
    grid = heatmap_values(layers, side, metric)
    n_rows, n_cols = len(grid), max((len(r) for r in grid), default=0)
    label = {"qk": "W_QK", "ov": "W_OV"}[side]
    metric_label = "effective rank" if metric == "effective_rank" else "largest singular value"
    cell_w = max(6.0, min(46.0, 700.0 / max(n_cols, 1)))
    cell_h = max(6.0, min(26.0, 620.0 / max(n_rows, 1)))
    left, top = 70, 52
    width = max(left + n_cols * cell_w + 20, 430)
    height = top + n_rows * cell_h + 8
    lo, hi = scale or heatmap_scale(layers, metric)
    span = (hi - lo) or 1.0
    desc = (f"{metric_label} of {label} for {n_rows} layers x {n_cols} heads, from {fmt_float(lo)} (dark) "
            f"to {fmt_float(hi)} (light); a ! marks a numerically rank-deficient head")
    out = _open_svg(chart_id, width, height, f"{label} {metric_label} per layer and head", desc, "heat")
    grad = f"{chart_id}-g"
    stops = "".join(f'<stop offset="{t:.2f}" stop-color="{viridis(t)}"/>' for t in (0, 0.25, 0.5, 0.75, 1))
    out.append(f'<defs><linearGradient id="{esc(grad)}">{stops}</linearGradient></defs>')
    out.append(f'<text class="lbl" x="{left}" y="14">{esc(fmt_float(lo))}</text>'
               f'<rect x="{left + 40}" y="4" width="160" height="12" fill="url(#{esc(grad)})"/>'
               f'<text class="lbl" x="{left + 206}" y="14">{esc(fmt_float(hi))} ({esc(metric_label)})</text>')
    show_text = cell_w >= 30 and cell_h >= 16
    col_every = max(1, math.ceil(n_cols / 24))
    for j in range(0, n_cols, col_every):
        out.append(f'<text class="lbl" x="{left + (j + 0.5) * cell_w:.1f}" y="{top - 5}" text-anchor="middle">{j}</text>')
    out.append(f'<text class="lbl" x="{left - 6}" y="{top - 5}" text-anchor="end">head</text>')
    row_every = max(1, math.ceil(n_rows / 40))
    for i, (layer, values) in enumerate(zip(layers, grid)):
        y = top + i * cell_h
        if i % row_every == 0:
            out.append(f'<text class="lbl" x="{left - 6}" y="{y + cell_h * 0.7:.1f}" text-anchor="end">'
                       f'layer {esc(layer.get("index"))}</text>')
        spectra = layer.get("spectra") or {}
        ranks = spectra.get(f"{side}_rank") or []
        conds = spectra.get(f"{side}_condition") or []
        full_rank = layer.get("d_k" if side == "qk" else "d_v")
        for j, v in enumerate(values):
            x = left + j * cell_w
            rank = ranks[j] if j < len(ranks) else None
            deficient = rank is not None and full_rank is not None and rank < full_rank
            t = (v - lo) / span if v is not None and math.isfinite(v) else None
            fill = viridis(t) if t is not None else "none"
            tip = (f"layer {layer.get('index')}, head {j}: {metric_label} {fmt_float(v)}, numerical rank "
                   f"{'–' if rank is None else rank}/{full_rank}, condition {fmt_float(conds[j] if j < len(conds) else None)}")
            cls = "cell deficient" if deficient else ("cell" if t is not None else "cell missing")
            out.append(f'<g><title>{esc(tip)}</title><rect class="{cls}" x="{x:.2f}" y="{y:.2f}" '
                       f'width="{cell_w:.2f}" height="{cell_h:.2f}" fill="{fill}"/>')
            if show_text or deficient:
                text = ("!" if deficient else "") + (cell_number(v) if show_text else "")
                ink = _ink_for(t) if t is not None else "ink-plain"
                out.append(f'<text class="cell-txt {ink}" x="{x + cell_w / 2:.2f}" y="{y + cell_h * 0.68:.2f}" '
                           f'text-anchor="middle">{esc(text)}</text>')
            out.append("</g>")
    out.append("</svg>")
    return "".join(out)
