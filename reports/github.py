"""GitHub Actions output for ``idinspect audit --format github``.

Workflow-command annotations (``::error file=...,line=1,title=...::message``), worst first, at
most :data:`LIMIT` per kind (GitHub shows no more per step) followed by one notice counting the
rest; and a markdown job summary that the command appends to ``$GITHUB_STEP_SUMMARY``.
Escaping follows the runner's rules: ``%``, CR and LF in messages; additionally ``:`` and ``,``
in properties. Every other control character (ESC, BEL, OSC 52 and the like, from tensor or folder
names) is then made visible (:func:`~idinspect.textsafe.visible`): the runner echoes annotation text
to the job log, where a raw escape sequence would be interpreted.
"""

from __future__ import annotations

import re

from ..rules import severity_rank
from ..textsafe import visible
from .summary import plural

LIMIT = 10
_KIND = {"error": "error", "warning": "warning", "note": "notice"}


def escape_data(text: str) -> str:
    """Escape a workflow-command message: ``%``, CR and LF as the runner unescapes them, any other
    control character as a visible ``\\xNN``."""
    return visible(str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, **props: str | int | None) -> str:
    """One ``::kind prop=value,...::message`` line; properties with None values are left out."""
    fields = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{kind}{' ' + fields if fields else ''}::{escape_data(message)}"


def annotations(result: dict, limit: int = LIMIT) -> list[str]:
    """Annotation lines: tool errors first, then findings worst first, ``limit`` per kind."""
    lines: list[str] = []
    summary = result.get("audit", {})
    if summary.get("error"):
        lines.append(command("error", summary["error"], title="idinspect audit failed"))
    items: list[tuple[int, str, dict, dict]] = []
    for model in result.get("models", []):
        audit = model.get("audit", {})
        if audit.get("error"):
            lines.append(command("error", audit["error"], title=f"idinspect: cannot audit {audit['source']}"))
        for f in audit.get("findings", []):
            items.append((-severity_rank(f["severity"]), f["rule"], f, audit))
    items.sort(key=lambda t: (t[0], t[1]))
    shown = {kind: 0 for kind in _KIND.values()}
    hidden = {kind: 0 for kind in _KIND.values()}
    overflow = any(sum(1 for t in items if t[2]["severity"] == sev) > limit for sev in _KIND)
    budget = {kind: limit for kind in _KIND.values()}
    if overflow:
        budget["notice"] = max(limit - 1, 0)  # leave room for the counting notice
    for _, _, f, audit in items:
        kind = _KIND[f["severity"]]
        if shown[kind] >= budget[kind]:
            hidden[kind] += 1
            continue
        shown[kind] += 1
        lines.append(command(kind, f"{audit['source']}: {f['message']}", file=f["path"], line=1,
                             title=f"idinspect {f['rule']}"))
    rest = sum(hidden.values())
    if rest:
        parts = ", ".join(plural(n, kind) for kind, n in hidden.items() if n)
        lines.append(command("notice", f"{plural(rest, 'more finding')} not shown as annotations ({parts}); "
                                       "see the job summary or the SARIF report", title="idinspect audit"))
    return lines


def render_github(result: dict) -> str:
    return "".join(line + "\n" for line in annotations(result))


# --- job summary -----------------------------------------------------------------------------------

#: Markdown's active ASCII punctuation (CommonMark lets a backslash escape any of it); ``&<>`` are
#: entities already. ``@`` and ``:`` stop mentions and autolinks (``https\://`` is no URL).
_MD_PUNCTUATION = re.compile(r"[\\`*_{}\[\]()#+\-.!|~@:]")


def md(text) -> str:
    """Escape text for a GitHub-flavoured markdown table cell."""
    s = "" if text is None else str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_PUNCTUATION.sub(lambda m: "\\" + m.group(), s)  # links, images, emphasis, headings: literal
    s = s.replace("\r\n", "<br>").replace("\n", "<br>").replace("\r", "<br>")
    return visible(s)


_ICON = {"pass": "✅ pass", "fail": "❌ fail", "error": "⚠️ error"}
MAX_ROWS = 50


def step_summary(result: dict) -> str:
    """Markdown for the job summary: verdict, one row per model, then each model's findings."""
    summary = result.get("audit", {})
    verdict = summary.get("verdict", "error")
    out = [f"## idinspect audit: {_ICON.get(verdict, verdict)}", "",
           f"Fail on: **{md(summary.get('fail_on'))}**"
           + (" (exit-zero)" if summary.get("exit_zero") else "")
           + (f" · baselined: {summary.get('baselined', 0)}" if summary.get("baseline") else ""), ""]
    if summary.get("error"):
        out += [f"**Error:** {md(summary['error'])}", ""]
    models = result.get("models", [])
    if models:
        out += ["| Model | Verdict | Errors | Warnings | Notes |", "| --- | --- | ---: | ---: | ---: |"]
        for m in models:
            a = m.get("audit", {})
            c = a.get("counts", {})
            out.append(f"| {md(a.get('source'))} | {_ICON.get(a.get('verdict'), a.get('verdict'))} | "
                       f"{c.get('error', 0)} | {c.get('warning', 0)} | {c.get('note', 0)} |")
        out.append("")
    for m in models:
        a = m.get("audit", {})
        if a.get("error"):
            out += [f"### {md(a.get('source'))}", "", f"Cannot audit: {md(a['error'])}", ""]
            continue
        findings = a.get("findings", [])
        if not findings:
            continue
        out += [f"### {md(a.get('source'))}", "", "| Severity | Rule | Tensor | Message |", "| --- | --- | --- | --- |"]
        for f in findings[:MAX_ROWS]:
            out.append(f"| {f['severity']} | {md(f['rule'])} | {md(f.get('tensor') or '')} | {md(f['message'])} |")
        if len(findings) > MAX_ROWS:
            out.append(f"| … | | | {len(findings) - MAX_ROWS} more |")
        out.append("")
    return "\n".join(out) + "\n"


__all__ = ["annotations", "command", "escape_data", "escape_property", "md", "render_github", "step_summary"]
