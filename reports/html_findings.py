"""The HTML report's findings: one table per rule, worst rule first, laid out for a 1280 px page.

The rule, its severity and its explanation head each table once (never a narrow cell per row); rows
hold the layer, the tensors (one per line, breakable only after a dot, so a name never wraps letter
by letter), the parameter count and the details in words. Each row's full message is its tooltip
and stays in the embedded JSON.
"""

from __future__ import annotations

from .finding_words import finding_phrases, finding_tensors
from .summary import findings_by_rule, fmt_int, plural
from .svg_charts import esc

SEVERITY_MARK = {"error": "✖", "warning": "▲", "note": "●"}


def sev_badge(severity: str, count: int | None = None) -> str:
    mark = SEVERITY_MARK.get(severity, "·")
    text = plural(count, severity) if count is not None else severity
    cls = "sev-zero" if count == 0 else f"sev-{esc(severity)}"
    return f'<span class="sev {cls}"><span aria-hidden="true">{mark}</span> {esc(text)}</span>'


def tensor_name(name: str) -> str:
    """``<code>`` with a break opportunity after every dot and underscore run (``<wbr>``), nowhere else."""
    return "<code class=\"tensor\">" + "<wbr>".join(esc(part) for part in _split_after_dots(name)) + "</code>"


def _split_after_dots(name: str) -> list[str]:
    parts, start = [], 0
    for i, ch in enumerate(name):
        if ch == "." and i + 1 < len(name):
            parts.append(name[start:i + 1])
            start = i + 1
    parts.append(name[start:])
    return parts


def findings_section(findings: list[dict]) -> str:
    head = '<section id="findings" aria-labelledby="h-findings"><h2 id="h-findings">Findings</h2>'
    if not findings:
        return head + '<p class="ok">✔ No findings.</p></section>'
    parts = [head, f"<p>{esc(plural(len(findings), 'finding'))}, worst rule first.</p>"]
    for rule, worst, items in findings_by_rule(findings):
        total = sum(f.get("parameters") or 0 for f in items)
        rid = f"rule-{esc(rule)}"
        parts.append(f'<h3 id="{rid}">{sev_badge(worst)} <code class="rule">{esc(rule)}</code>: '
                     f"{esc(plural(len(items), 'finding'))}, {esc(plural(total, 'parameter'))}</h3>")
        message = str(items[0].get("message", ""))
        if message:
            parts.append(f'<p class="explain">{"e.g. " if len(items) > 1 else ""}{esc(message)}</p>')
        rows = []
        for f in items:
            tensors = "<br>".join(tensor_name(t) for t in finding_tensors(f)) or "–"
            details = esc(", ".join(finding_phrases(f)))
            if f.get("severity") != worst:
                details = sev_badge(str(f.get("severity"))) + " " + details
            rows.append(f'<tr title="{esc(f.get("message", ""))}"><td class="num">{esc(f.get("layer", "–"))}</td>'
                        f"<td>{tensors}</td><td class=\"num\">{esc(fmt_int(f.get('parameters')))}</td>"
                        f"<td>{details}</td></tr>")
        parts.append(f'<div class="scroll"><table class="findings" aria-labelledby="{rid}">'
                     f'<caption class="vh">{esc(rule)}: one row per finding</caption><thead><tr>'
                     '<th scope="col" class="num">Layer</th><th scope="col">Tensors</th>'
                     '<th scope="col" class="num">Parameters</th><th scope="col">Details</th></tr></thead>'
                     f"<tbody>{''.join(rows)}</tbody></table></div>")
    parts.append("</section>")
    return "".join(parts)


__all__ = ["findings_section", "sev_badge", "tensor_name"]
