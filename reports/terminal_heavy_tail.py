"""The terminal's heavy-tail table: one row per layer, alpha of W_QK and W_OV (per-layer sum and
median head), stable rank and correlation traps; layers outside the usual range marked with "!"."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .heavy_tail import MEANING, layer_tails
from .summary import fmt_float


def _alpha(value, outside: bool) -> Text:
    return Text(fmt_float(value) + (" !" if outside else ""), style="bold yellow" if outside else "")


def heavy_tail_panel(result: dict) -> Group | None:
    """The table, or None when the result carries no heavy-tail figures."""
    rows, (lo, hi) = layer_tails(result)
    if not rows:
        return None
    table = Table(title="Heavy-tailed spectra of the circuits (gauge-invariant)", box=box.SIMPLE_HEAD,
                  title_justify="left")
    table.add_column("layer", justify="right")
    for head in ("α W_QK", "α W_QK heads", "α W_OV", "α W_OV heads", "stable rank QK / OV", "traps QK / OV"):
        table.add_column(head, justify="right")
    for r in rows:
        table.add_row(str(r.layer), _alpha(r.alpha["qk"], r.outside["qk"]), fmt_float(r.head_alpha["qk"]),
                      _alpha(r.alpha["ov"], r.outside["ov"]), fmt_float(r.head_alpha["ov"]),
                      f"{fmt_float(r.stable_rank['qk'])} / {fmt_float(r.stable_rank['ov'])}",
                      f"{r.traps['qk'] if r.traps['qk'] is not None else '—'} / "
                      f"{r.traps['ov'] if r.traps['ov'] is not None else '—'}")
    note = Text(f"! outside {lo:g} ≤ α ≤ {hi:g}; heads: median over heads. {MEANING}", style="dim")
    return Group(table, note)


__all__ = ["heavy_tail_panel"]
