"""The single-file HTML report of ``idinspect diff A B``: per-layer rho against 1/(2H), beta of A
and B, and the layer table. Inline CSS and SVG only, no script, no external reference."""

from __future__ import annotations

import html
import json

from .atomic import write_text_atomic
from .diff_svg import grouped_bars
from .diff_text import DIFF_READING
from .svg_charts import esc
from .summary import plural

_CSS = ("body{font-family:system-ui,sans-serif;max-width:1000px;margin:0 auto;padding:1em;line-height:1.4}"
        "table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #8886;padding:2px 6px;text-align:right}"
        "th{background:#8882}svg{max-width:100%;height:auto}.warn{color:#b45309}"
        "@media(prefers-color-scheme:dark){body{background:#0d1117;color:#e6edf3}}")


def _f(v, spec=".4g") -> str:
    return "n/a" if v is None else format(v, spec)


def render_diff_html(doc: dict) -> str:
    layers = doc["layers"]
    cats = [str(L["index"]) for L in layers]
    m = doc["model"]
    rho = grouped_bars(cats, [("QK rho", [L["qk"]["rho"] for L in layers]), ("VO rho", [L["vo"]["rho"] for L in layers])],
                       references=[("1/(2H)", doc["one_over_2H"])] if doc["one_over_2H"] else [],
                       title="Share of the step along the gauge orbit per layer", ylabel="rho", chart_id="chart-rho")
    beta = grouped_bars(cats, [("QK beta A", [L["qk"]["beta_a"] for L in layers]),
                               ("QK beta B", [L["qk"]["beta_b"] for L in layers]),
                               ("VO beta A", [L["vo"]["beta_a"] for L in layers]),
                               ("VO beta B", [L["vo"]["beta_b"] for L in layers])],
                        title="Imbalance beta before (A) and after (B) per layer", ylabel="beta", chart_id="chart-beta")
    rows = "".join(
        f"<tr><td>{L['index']}</td><td>{_f(L['rho'])}</td><td>{_f(L['qk']['rho'])}</td><td>{_f(L['qk']['reference'])}</td>"
        f"<td>{_f(L['vo']['rho'])}</td><td>{_f(L['vo']['reference'])}</td><td>{_f(L['qk']['beta_a'])}</td>"
        f"<td>{_f(L['qk']['beta_b'])}</td><td>{_f(L['qk']['tau_a'])}</td><td>{_f(L['qk']['tau_b'])}</td>"
        f"<td>{_f(L['vo']['beta_a'])}</td><td>{_f(L['vo']['beta_b'])}</td><td>{_f(L['qk']['mu_min'], '.3e')}</td>"
        f"<td>{_f(L['raw_change']['relative'], '.3e')}</td><td>{_f(L['invariant_change_max'], '.3e')}</td></tr>"
        for L in layers)
    ill = doc["totals"]["ill_posed"]
    warn = (f'<p class="warn">Ill-posed projection (mu ~ 0) in {plural(len(ill), "group")}: rho is still the exact '
            f'least-squares share; the tangent coordinate is not unique.</p>') if ill else ""
    data = json.dumps(doc).replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>idinspect diff</title>'
            f'<style>{_CSS}</style></head><body><h1>idinspect diff</h1>'
            f'<p><b>A</b> <code>{esc(doc["a"]["source"])}</code> &rarr; <b>B</b> <code>{esc(doc["b"]["source"])}</code><br>'
            f'{esc(m.get("model_type"))}, {esc(m.get("layers"))} layers, H={esc(m.get("heads"))}, '
            f'G={esc(m.get("kv_heads"))}, d_k={esc(m.get("head_dim"))}, positional {esc(m.get("positional"))}</p>'
            f'<p>rho over the whole model: <b>{_f(doc["totals"]["rho"])}</b> (reference 1/(2H) = {_f(doc["one_over_2H"])}); '
            f'largest relative change of an invariant: {_f(doc["totals"]["invariant_change_max"], ".3e")}.</p>'
            f'<p>{html.escape(" ".join(line.strip() for line in DIFF_READING))}</p>{warn}'
            f'<h2>rho per layer</h2>{rho}<h2>beta per layer</h2>{beta}<h2>Layers</h2><table><thead><tr>'
            + "".join(f'<th scope="col">{h}</th>' for h in ("layer", "rho", "QK rho", "QK ref", "VO rho", "VO ref",
                                                         "QK beta A", "QK beta B", "QK tau A", "QK tau B", "VO beta A",
                                                         "VO beta B", "QK mu", "raw rel", "inv change"))
            + f'</tr></thead><tbody>{rows}</tbody></table>'
            f'<script type="application/json" id="idinspect-diff">{data}</script></body></html>\n')


def write_diff_html(doc: dict, path) -> None:
    write_text_atomic(path, render_diff_html(doc))
