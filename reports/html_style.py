"""The stylesheet and the (optional) script inlined into the HTML report.

Kept as Python strings so the report needs no package data and no external file. System fonts
only, light and dark themes (prefers-color-scheme), a print style, reduced motion respected.
"""

CSS = """
:root {
  color-scheme: light dark;
  --bg: #ffffff; --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --panel: #f6f8fa; --accent: #0b5cad;
  --qk: #0b5cad; --vo: #c2410c; --noop: #7c3aed; --abs: #0f766e; --id: #d8dee4; --meas: #0b5cad;
  --closed: #b91c1c; --free: #f59e0b; --error: #b91c1c; --warning: #8a5a00; --note: #0b5cad; --ok: #1a7f37;
  --extra: #be185d;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0d1117; --fg: #e6edf3; --muted: #9da7b3; --line: #30363d; --panel: #161b22; --accent: #58a6ff;
    --qk: #58a6ff; --vo: #f0883e; --noop: #bc8cff; --abs: #3fb950; --id: #30363d; --meas: #58a6ff;
    --closed: #ff7b72; --free: #f2cc60; --error: #ff7b72; --warning: #d29922; --note: #58a6ff; --ok: #3fb950;
    --extra: #f778ba;
  }
}
* { box-sizing: border-box; }
html { font-size: 15px; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif;
  line-height: 1.45; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace;
  font-size: 0.92em; overflow-wrap: anywhere; }
.skip { position: absolute; left: -999px; }
.vh { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
.skip:focus { left: 8px; top: 8px; background: var(--panel); padding: 4px 8px; z-index: 2; }
header, main, footer { max-width: 1180px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 18px; }
h1 { font-size: 1.6rem; margin: 0 0 4px; }
h2 { font-size: 1.25rem; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 1.05rem; margin: 18px 0 6px; }
.sub { color: var(--muted); margin: 0 0 8px; overflow-wrap: anywhere; }
nav ul { list-style: none; display: flex; flex-wrap: wrap; gap: 14px; padding: 0; margin: 8px 0 0; }
a { color: var(--accent); }
a:focus-visible, button:focus-visible, summary:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 200px; }
.card .big { font-size: 1.6rem; font-weight: 650; display: block; }
.card .small { color: var(--muted); font-size: 0.9rem; }
table { border-collapse: collapse; margin: 8px 0 14px; font-variant-numeric: tabular-nums; }
caption { text-align: left; color: var(--muted); padding: 4px 0; caption-side: top; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
thead th { background: var(--panel); }
td.num, th.num { text-align: right; white-space: nowrap; }
table.kv th { white-space: nowrap; }
table.kv td { overflow-wrap: anywhere; }
.scroll { overflow-x: auto; max-width: 100%; }
table.findings { width: 100%; }
table.findings td { overflow-wrap: normal; }
code.tensor, code.rule, code.digest { overflow-wrap: normal; word-break: normal; white-space: nowrap; }
h3 code.rule { font-size: 1em; }
p.explain { color: var(--muted); margin: 2px 0 4px; max-width: 75em; }
.warn { color: var(--warning); }
p.small { color: var(--muted); font-size: 0.9rem; }
ul.spectra-summary { margin: 6px 0; padding-left: 1.2em; }
math { font-size: 1.08em; }
@media (max-width: 800px) { code.tensor { white-space: normal; } }
.sev { font-weight: 600; white-space: nowrap; }
.sev-zero { color: var(--muted); font-weight: 400; }
.sev-error { color: var(--error); } .sev-warning { color: var(--warning); } .sev-note { color: var(--note); }
.ok { color: var(--ok); font-weight: 600; }
.spectra-grid { display: flex; flex-wrap: wrap; gap: 8px 40px; align-items: flex-start; }
figure { margin: 10px 0 18px; }
figcaption { color: var(--muted); font-size: 0.92rem; margin-top: 4px; }
svg.chart { max-width: 100%; height: auto; display: block; }
svg .lbl { fill: var(--fg); font-size: 11px; font-family: inherit; }
svg .num { font-variant-numeric: tabular-nums; }
svg .axis, svg .grid { stroke: var(--line); stroke-width: 1; }
svg .c-qk { fill: var(--qk); } svg .c-vo { fill: var(--vo); } svg .c-noop { fill: var(--noop); }
svg .c-extra { fill: var(--extra); }
svg .c-abs { fill: var(--abs); } svg .c-id { fill: var(--id); } svg .c-meas { fill: var(--meas); }
svg .c-free { fill: var(--free); stroke: var(--bg); stroke-width: 1; }
svg .closed { stroke: var(--closed); stroke-width: 2.5; stroke-dasharray: 5 3; }
svg .cell { stroke: var(--bg); stroke-width: 1; }
svg .cell.missing { fill: none; stroke: var(--line); }
svg .cell.deficient { stroke: var(--error); stroke-width: 2.5; }
svg .cell-txt { font-size: 10px; font-family: inherit; }
svg .ink-light { fill: #ffffff; } svg .ink-dark { fill: #111111; } svg .ink-plain { fill: var(--fg); }
svg g.row:hover rect, svg g:hover > rect.cell { opacity: 0.85; }
.metric-toggle { display: none; gap: 6px; margin: 4px 0; }
.js .metric-toggle { display: flex; }
.metric-toggle button { font: inherit; padding: 3px 10px; border: 1px solid var(--line); border-radius: 6px;
  background: var(--panel); color: var(--fg); cursor: pointer; }
.metric-toggle button[aria-pressed="true"] { background: var(--accent); color: var(--bg); border-color: var(--accent); }
.js .metric[hidden] { display: none; }
details { margin: 8px 0; } summary { cursor: pointer; color: var(--accent); }
footer { color: var(--muted); font-size: 0.9rem; padding-bottom: 24px; margin-top: 24px; }
@media (prefers-reduced-motion: reduce) { * { transition: none !important; animation: none !important; } }
@media print {
  :root { --bg: #ffffff; --fg: #000000; --muted: #333333; --line: #999999; --panel: #f2f2f2; --id: #dddddd; }
  body { font-size: 11pt; }
  nav, .metric-toggle, .skip { display: none !important; }
  .metric[hidden] { display: block !important; }
  header, main, footer { max-width: none; padding: 0; }
  figure, table, .card { break-inside: avoid; }
  h2 { break-after: avoid; }
  a { color: inherit; text-decoration: none; }
  .scroll { overflow: visible; }
}
"""

#: Progressive enhancement only: a metric toggle for the heatmaps, and open every <details> to print.
SCRIPT = """
(function () {
  document.documentElement.classList.add("js");
  document.querySelectorAll("[data-metric-group]").forEach(function (group) {
    var figures = group.querySelectorAll(".metric");
    var bar = group.querySelector(".metric-toggle");
    if (!bar || figures.length < 2) { return; }
    function show(name) {
      figures.forEach(function (f) { f.hidden = f.getAttribute("data-metric") !== name; });
      bar.querySelectorAll("button").forEach(function (b) {
        b.setAttribute("aria-pressed", String(b.getAttribute("data-show") === name));
      });
    }
    bar.querySelectorAll("button").forEach(function (b) {
      b.addEventListener("click", function () { show(b.getAttribute("data-show")); });
    });
    show(figures[0].getAttribute("data-metric"));
  });
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
})();
"""
