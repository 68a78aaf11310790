"""The rich text report of ``idinspect audit``: a summary per model, its findings, the verdict."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..rules import WORST_FIRST
from .summary import plural

_STYLE = {"error": "bold red", "warning": "yellow", "note": "cyan"}
_VERDICT = {"pass": ("PASS", "bold green"), "fail": ("FAIL", "bold red"), "error": ("ERROR", "bold magenta")}
MAX_FINDINGS = 50


def _verdict(verdict: str) -> Text:
    label, style = _VERDICT.get(verdict, (verdict.upper(), "bold"))
    return Text(label, style=style)


def _counts(counts: dict) -> Text:
    text = Text()
    for i, sev in enumerate(WORST_FIRST):
        if i:
            text.append(", ")
        n = counts.get(sev, 0)
        text.append(f"{n} {sev}{'s' if n != 1 else ''}", style=_STYLE[sev] if n else "dim")
    return text


def _model(console: Console, model: dict, show_all: bool) -> None:
    audit = model.get("audit", {})
    head = Text.assemble(_verdict(audit.get("verdict", "error")), "  ", Text(str(audit.get("source")), style="bold"))
    info = model.get("model", {})
    if info.get("model_type"):
        head.append(f"  ({info.get('model_type')}, {info.get('layers')} layers)", style="dim")
    console.print(head)
    if audit.get("error"):
        console.print(Text("  cannot audit: ", style="bold magenta") + Text(str(audit["error"])))
        return
    line = Text("  ") + _counts(audit.get("counts", {}))
    if audit.get("baselined"):
        line.append(f"; {audit['baselined']} in the baseline", style="dim")
    ratio = (model.get("totals") or {}).get("identification_ratio")
    if isinstance(ratio, (int, float)):
        line.append(f"; unidentified share {ratio:.4f}", style="dim")
    if audit.get("policy", {}).get("overrides"):
        line.append(f"; overrides: {'; '.join(audit['policy']['overrides'])}", style="dim")
    console.print(line)
    findings = audit.get("findings", [])
    if not findings:
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 1), expand=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("layer", justify="right", no_wrap=True)
    table.add_column("message", overflow="fold", ratio=1)
    shown = findings if show_all else findings[:MAX_FINDINGS]
    for f in shown:
        layer = "" if f.get("layer") is None else str(f["layer"])
        table.add_row(Text(f["severity"], style=_STYLE.get(f["severity"], "")), Text(f["rule"]), Text(layer),
                      Text(f["message"]))
    console.print(table)
    if len(shown) < len(findings):
        console.print(Text(f"  … {len(findings) - len(shown)} more (use --format json for all)", style="dim"))


def render_audit(result: dict, console: Console | None = None, show_all: bool = False) -> None:
    """Print the audit report to ``console`` (stdout by default). Strings go in as ``Text``, so
    tensor names such as ``[bold]x`` are shown literally, never as markup."""
    from ..textsafe import visible_tree

    console = console or Console()
    result = visible_tree(result)  # control characters from checkpoints shown as escapes
    summary = result.get("audit", {})
    if summary.get("error"):
        console.print(Text("error: ", style="bold red") + Text(str(summary["error"])))
    for model in result.get("models", []):
        _model(console, model, show_all)
        console.print()
    verdict = Text.assemble("idinspect audit: ", _verdict(summary.get("verdict", "error")),
                            f"  {plural(summary.get('models', 0), 'model')}, ", _counts(summary.get("counts", {})),
                            f"; fail on {summary.get('fail_on')}")
    if summary.get("exit_zero"):
        verdict.append(" (--exit-zero)", style="dim")
    if summary.get("errors"):
        verdict.append(f"; {plural(summary['errors'], 'error')}", style="bold magenta")
    console.print(verdict)


__all__ = ["render_audit"]
