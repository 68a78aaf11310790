"""Small inline SVG charts for the diff report and the training example: grouped bars with
reference lines, and line charts. No scripts, no external references; every string escaped; each
mark carries its number in a ``<title>`` tooltip, and each chart a ``<title>``/``<desc>``."""

from __future__ import annotations

import math

from .svg_charts import esc, nice_step

#: Colour-blind-safe series colours (Okabe-Ito).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")


def _open(chart_id: str, width: int, height: int, title: str, desc: str) -> list[str]:
    return [f'<svg class="chart" id="{esc(chart_id)}" role="img" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" aria-labelledby="{esc(chart_id)}-t {esc(chart_id)}-d" '
            f'font-family="system-ui, sans-serif" font-size="11">',
            f'<title id="{esc(chart_id)}-t">{esc(title)}</title><desc id="{esc(chart_id)}-d">{esc(desc)}</desc>']


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _legend(out: list[str], items: list[tuple[str, str, bool]], x: float, y: float) -> None:
    """items: (label, colour, dashed line instead of a box)."""
    for label, colour, dashed in items:
        if dashed:
            out.append(f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 18:.1f}" y2="{y - 4:.1f}" stroke="{colour}" '
                       f'stroke-width="2" stroke-dasharray="4 3"/>')
        else:
            out.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 22:.1f}" y="{y:.1f}" fill="currentColor">{esc(label)}</text>')
        x += 30 + 6.5 * len(label)


def grouped_bars(categories: list[str], series: list[tuple[str, list[float | None]]], *, title: str, ylabel: str,
                 chart_id: str, references: list[tuple[str, float]] = (), width: int = 860, height: int = 260,
                 log: bool | None = None) -> str:
    """One group of bars per category (e.g. layer), one bar per series, dashed horizontal references.
    ``log``: a log10 axis from the decade below the smallest positive value (default: when the
    positive values span more than two decades, so small bars beside large ones stay visible)."""
    left, top, bottom = 64, 30, 40
    plot_w, plot_h = width - left - 16, height - top - bottom
    vals = [v for _, vs in series for v in vs if v is not None and math.isfinite(v)] + [v for _, v in references]
    positive = [v for v in vals if v > 0]
    if log is None:
        log = len(positive) > 1 and max(positive) / min(positive) > 100
    if log and positive:
        lo_dec, hi_dec = math.ceil(math.log10(min(positive))) - 1, math.ceil(math.log10(max(positive)))
        hi_dec = max(hi_dec, lo_dec + 1)

        def frac(v: float) -> float:
            return 0.0 if v <= 0 else min(1.0, max(0.0, (math.log10(v) - lo_dec) / (hi_dec - lo_dec)))
        ticks = [(10.0 ** d, (d - lo_dec) / (hi_dec - lo_dec)) for d in range(lo_dec, hi_dec + 1)]
        ticks = ticks[::max(1, math.ceil(len(ticks) / 6))]
    else:
        step = nice_step(max(max(vals, default=1.0), 1e-300) * 1.1 / 4)
        vmax = step * 4

        def frac(v: float) -> float:
            return max(v, 0) / vmax
        ticks = [(vmax * k / 4, k / 4) for k in range(5)]
    desc = "; ".join(f"{c}: " + ", ".join(f"{name} {_fmt(vs[i]) if vs[i] is not None else 'n/a'}" for name, vs in series)
                     for i, c in enumerate(categories[:60]))
    out = _open(chart_id, width, height, title, desc)
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    _legend(out, [(n, c, False) for (n, _), c in zip(series, colours)] +
            [(n, PALETTE[(len(series) + i) % len(PALETTE)], True) for i, (n, _) in enumerate(references)], left, 16)
    for value, f in ticks:
        y = top + plot_h - plot_h * f
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#8888" stroke-width="0.5"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="currentColor">{_fmt(value)}</text>')
    n = max(len(categories), 1)
    slot = plot_w / n
    bar = slot * 0.8 / max(len(series), 1)
    for i, cat in enumerate(categories):
        x0 = left + i * slot + slot * 0.1
        for j, ((name, vs), colour) in enumerate(zip(series, colours)):
            v = vs[i]
            if v is None or not math.isfinite(v):
                continue
            h = plot_h * frac(v)
            out.append(f'<rect x="{x0 + j * bar:.2f}" y="{top + plot_h - h:.2f}" width="{bar * 0.92:.2f}" '
                       f'height="{h:.2f}" fill="{colour}"><title>{esc(cat)}: {esc(name)} {_fmt(v)}</title></rect>')
        if i % max(1, math.ceil(n / 32)) == 0:
            out.append(f'<text x="{left + i * slot + slot / 2:.2f}" y="{top + plot_h + 14}" text-anchor="middle" '
                       f'fill="currentColor">{esc(cat)}</text>')
    for k, (name, v) in enumerate(references):
        y = top + plot_h - plot_h * frac(v)
        colour = PALETTE[(len(series) + k) % len(PALETTE)]
        out.append(f'<line x1="{left}" y1="{y:.2f}" x2="{left + plot_w}" y2="{y:.2f}" stroke="{colour}" stroke-width="2" '
                   f'stroke-dasharray="4 3"><title>{esc(name)} = {_fmt(v)}</title></line>')
    out.append(f'<text x="14" y="{top + plot_h / 2:.1f}" transform="rotate(-90 14 {top + plot_h / 2:.1f})" '
               f'text-anchor="middle" fill="currentColor">{esc(ylabel + (" (log scale)" if log else ""))}</text></svg>')
    return "".join(out)


def line_chart(series: list[tuple[str, list[float], list[float]]], *, title: str, xlabel: str, ylabel: str,
               chart_id: str, log_y: bool = False, width: int = 860, height: int = 280,
               references: list[tuple[str, float]] = ()) -> str:
    """Lines through (x, y) points per series; ``log_y`` plots log10(y) (non-positive values dropped)."""
    left, top, bottom = 70, 30, 40
    plot_w, plot_h = width - left - 16, height - top - bottom
    tr = (lambda v: math.log10(v)) if log_y else (lambda v: v)
    pts = [(x, tr(y)) for _, xs, ys in series for x, y in zip(xs, ys)
           if y is not None and math.isfinite(y) and (y > 0 or not log_y)]
    pts += [(None, tr(v)) for _, v in references if v > 0 or not log_y]
    xs_all = [p[0] for p in pts if p[0] is not None] or [0.0, 1.0]
    ys_all = [p[1] for p in pts] or [0.0, 1.0]
    x0, x1 = min(xs_all), max(xs_all)
    y0, y1 = min(ys_all), max(ys_all)
    if y1 - y0 < 1e-12 * max(1.0, abs(y1)):
        y0, y1 = y0 - 0.5 * max(abs(y0), 1e-12), y1 + 0.5 * max(abs(y1), 1e-12)
    pad = 0.05 * (y1 - y0)
    y0, y1 = y0 - pad, y1 + pad
    x1 = x1 if x1 > x0 else x0 + 1
    sx = lambda x: left + plot_w * (x - x0) / (x1 - x0)   # noqa: E731
    sy = lambda y: top + plot_h - plot_h * (y - y0) / (y1 - y0)   # noqa: E731
    desc = "; ".join(f"{name}: {len(xs)} points, last {_fmt(ys[-1]) if ys else 'n/a'}" for name, xs, ys in series)
    out = _open(chart_id, width, height, title, desc)
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    _legend(out, [(n, c, False) for (n, _, _), c in zip(series, colours)] +
            [(n, "#888888", True) for n, _ in references], left, 16)
    for k in range(5):
        yv = y0 + (y1 - y0) * k / 4
        label = _fmt(10 ** yv) if log_y else _fmt(yv)
        out.append(f'<line x1="{left}" y1="{sy(yv):.1f}" x2="{left + plot_w}" y2="{sy(yv):.1f}" stroke="#8888" '
                   f'stroke-width="0.5"/><text x="{left - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end" '
                   f'fill="currentColor">{label}</text>')
        xv = x0 + (x1 - x0) * k / 4
        out.append(f'<text x="{sx(xv):.1f}" y="{top + plot_h + 14}" text-anchor="middle" fill="currentColor">'
                   f'{_fmt(xv)}</text>')
    for (name, xs, ys), colour in zip(series, colours):
        path = [(sx(x), sy(tr(y))) for x, y in zip(xs, ys)
                if y is not None and math.isfinite(y) and (y > 0 or not log_y)]
        if path:
            d = "M" + " L".join(f"{a:.1f},{b:.1f}" for a, b in path)
            out.append(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.6">'
                       f'<title>{esc(name)}</title></path>')
    for name, v in references:
        if v > 0 or not log_y:
            y = sy(tr(v))
            out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#888888" '
                       f'stroke-dasharray="4 3"><title>{esc(name)} = {_fmt(v)}</title></line>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle" fill="currentColor">'
               f'{esc(xlabel)}</text><text x="14" y="{top + plot_h / 2:.1f}" '
               f'transform="rotate(-90 14 {top + plot_h / 2:.1f})" text-anchor="middle" fill="currentColor">'
               f'{esc(ylabel)}</text></svg>')
    return "".join(out)
