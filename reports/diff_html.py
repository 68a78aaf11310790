"""The single-file HTML report of ``idinspect diff A B``: per-layer rho against 1/(2H), beta of A
and B, and the layer table. Inline CSS and SVG only, no script, no external reference."""

from __future__ import annotations

import html
import json

from .atomic import write_text_atomic
from .html_style import CSS
from .diff_svg import grouped_bars
from .diff_text import DIFF_READING
from .svg_charts import esc
from .summary import plural

#: The other reports' stylesheet (light and dark), plus the diff's few additions.
_CSS = CSS + ("svg.chart { max-width: 100%; height: auto; }\n.warn { color: var(--warning, #b45309); }\n"
              "code.src { overflow-wrap: anywhere; }\nmain { max-width: none; }\n"
              "#layers table { font-size: 13px; }\n")


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
        "<tr>" + "".join(f'<td class="num">{v}</td>' for v in (
            L['index'], _f(L['rho']), _f(L['qk']['rho']), _f(L['qk']['reference']), _f(L['vo']['rho']),
            _f(L['vo']['reference']), _f(L['qk']['beta_a']), _f(L['qk']['beta_b']), _f(L['qk']['tau_a']),
            _f(L['qk']['tau_b']), _f(L['vo']['beta_a']), _f(L['vo']['beta_b']), _f(L['qk']['mu_min'], '.3e'),
            _f(L['raw_change']['relative'], '.3e'), _f(L['invariant_change_max'], '.3e'))) + "</tr>"
        for L in layers)
    ill = doc["totals"]["ill_posed"]
    warn = (f'<p class="warn">Ill-posed projection (mu ~ 0) in {plural(len(ill), "group")}: rho is still the exact '
            f'least-squares share; the tangent coordinate is not unique.</p>') if ill else ""
    data = json.dumps(doc).replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>idinspect diff</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<style>{_CSS}</style></head><body><header><h1>idinspect diff</h1>'
            f'<p class="sub"><b>A</b> <code class="src">{esc(doc["a"]["source"])}</code> &rarr; <b>B</b> '
            f'<code class="src">{esc(doc["b"]["source"])}</code><br>'
            f'{esc(m.get("model_type"))}, {esc(m.get("layers"))} layers, H={esc(m.get("heads"))}, '
            f'G={esc(m.get("kv_heads"))}, d_k={esc(m.get("head_dim"))}, positional {esc(m.get("positional"))}</p></header><main id="main">'
            f'<p>rho over the whole model: <b>{_f(doc["totals"]["rho"])}</b> (reference 1/(2H) = {_f(doc["one_over_2H"])}); '
            f'largest relative change of an invariant: {_f(doc["totals"]["invariant_change_max"], ".3e")}.</p>'
            f'<p>{html.escape(" ".join(line.strip() for line in DIFF_READING))}</p>{warn}'
            f'<h2>rho per layer</h2><figure>{rho}</figure><h2>beta per layer</h2><figure>{beta}</figure>'
            f'<section id="layers"><h2>Layers</h2><div class="scroll"><table><thead><tr>'
            + "".join(f'<th scope="col" class="num">{h}</th>' for h in ("layer", "rho", "QK rho", "QK ref", "VO rho", "VO ref",
                                                         "QK beta A", "QK beta B", "QK tau A", "QK tau B", "VO beta A",
                                                         "VO beta B", "QK mu", "raw rel", "inv change"))
            + f'</tr></thead><tbody>{rows}</tbody></table></div></section></main>'
            f'<script type="application/json" id="idinspect-diff">{data}</script></body></html>\n')


def write_diff_html(doc: dict, path) -> None:
    write_text_atomic(path, render_diff_html(doc))
