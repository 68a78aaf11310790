"""The rich terminal report of ``idinspect inspect``."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def render_report(result: dict, console: Console | None = None) -> None:
    """Print the model summary (and later the counts and findings) to ``console`` (stdout)."""
    console = console or Console()
    m = result["model"]
    table = Table(title=f"idinspect {escape(result['tool']['version'])}: {escape(str(m['source']))}",
                  show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key in ("revision", "model_type", "architecture", "layers", "hidden_size", "heads", "kv_heads",
                "head_dim", "positional", "rotary_dim"):
        table.add_row(key, escape(str(m[key])))
    console.print(table)
