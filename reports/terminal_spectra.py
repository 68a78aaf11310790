"""The terminal's view of the per-head spectra: a short summary in the default report and the
``--heads`` table (one row per head, W_QK and W_OV side by side, every number in its own
right-aligned column)."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .spectra import NEAR_DEAD, STANDOUT, HeadForm, SpectraSummary, spectra_summary
from .summary import fmt_float, head_rows

#: Below this width the --heads table shows only the largest singular value of each form.
WIDE_HEADS = 118


def _of(x: HeadForm) -> str:
    return f" of {x.full}" if x.full else ""


def spectra_panel(result: dict) -> Group | None:
    """Lowest effective ranks, worst conditioning, dead / near-dead heads, standout layers; None without spectra."""
    s: SpectraSummary = spectra_summary(result)
    if not s:
        return None
    grid = Table.grid(padding=(0, 2))
    grid.add_column("field", style="bold", no_wrap=True)
    grid.add_column("value")
    lowest = Text()
    for form, heads in s.lowest_effective_rank.items():
        if lowest:
            lowest.append("\n")
        full = s.full_rank.get(form)
        lowest.append(f"{form}{f' (of {full})' if full else ''}: ", style="bold")
        lowest.append(", ".join(f"{x.where} {fmt_float(x.effective_rank)}{'' if full else _of(x)}" for x in heads))
        lowest.append(f"; median head {fmt_float(s.median_effective_rank[form])}", style="dim")
    grid.add_row("Lowest effective rank", lowest)
    worst = Text()
    for i, x in enumerate(s.worst_conditioned):
        if i:
            worst.append("\n")
        cond = f"∞ (rank {x.rank} of {x.full})" if x.deficient else f"condition {fmt_float(x.condition)}"
        worst.append(f"{x.form} {x.where}: {cond}")
    grid.add_row("Worst conditioned", worst if worst else Text("–"))
    dead = Text("none", style="dim") if not s.dead else Text(
        ", ".join(f"layer {layer} head {head}" for layer, head in s.dead) + " (W_OV = 0: passes nothing to the output)",
        style="yellow")
    grid.add_row("Dead heads", dead)
    near = Text("none", style="dim") if not s.near_dead else Text("\n".join(
        f"{x.where}: largest W_OV σ {fmt_float(x.sigma_max)} against the median head's {fmt_float(ref)}"
        for x, ref in s.near_dead))
    grid.add_row("Near-dead heads", near)
    stand = Text("none", style="dim") if not s.standouts else Text("\n".join(
        f"layer {x.layer}: {x.why}" for x in s.standouts))
    grid.add_row("Layers that stand out", stand)
    grid.add_row("Every head", Text("idinspect MODEL --heads"))
    note = Text(f"effective rank = exp(entropy of σ / Σσ); near-dead: largest W_OV σ below {NEAR_DEAD:g} x the "
                f"median head's; a layer stands out below {STANDOUT:g} x the median layer's mean effective rank "
                "or when its weights add freedom", style="dim")
    panel = Panel(grid, title=Text("Head spectra", style="bold"), title_align="left", box=box.ROUNDED, expand=False)
    return Group(panel, Padding(note, (0, 0, 0, 1)))


def head_tables(result: dict, width: int = 120) -> list[Table]:
    """``--heads``: per layer one row per query head, W_QK and W_OV side by side: numerical rank,
    effective rank, condition number and the top singular values, each in its own column."""
    tables = []
    top = 3 if width >= WIDE_HEADS else 1
    tight = width < 90
    for layer in result.get("layers") or []:
        rows = head_rows(layer, top=top)
        if not rows:
            continue
        d_k, d_v = layer.get("d_k"), layer.get("d_v")
        table = Table(title=Text(f"Layer {layer.get('index')} heads: W_QK and W_OV spectra (d_k={d_k}, d_v={d_v})"),
                      title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
                      padding=(0, 0 if tight else 1), collapse_padding=True)
        table.add_column("head", justify="right", no_wrap=True)
        table.add_column("kv", justify="right", no_wrap=True)
        for form in ("QK", "OV"):
            table.add_column(f"{form} rank", justify="right", no_wrap=True)
            table.add_column("eff" if tight else "eff. rank", justify="right", no_wrap=True)
            table.add_column("cond", justify="right", no_wrap=True)
            for k in range(top):
                table.add_column(f"σ{k + 1}", justify="right", no_wrap=True)
        for r in rows:
            cells = [str(r.head), str(r.kv_head)]
            for rank, full, eff, cond, values in ((r.qk_rank, d_k, r.qk_effective_rank, r.qk_condition, r.qk_top),
                                                  (r.ov_rank, d_v, r.ov_effective_rank, r.ov_condition, r.ov_top)):
                cells += [_rank(rank, full), fmt_float(eff), _cond(cond, rank, full)]
                cells += [fmt_float(values[k]) if k < len(values) else "" for k in range(top)]
            table.add_row(*cells)
        tables.append(table)
    return tables


def _cond(cond, rank, full) -> str:
    if cond is None and rank and full is not None and rank < full:
        return "∞"
    return fmt_float(cond)


def _rank(rank, full) -> Text:
    if rank is None:
        return Text("–")
    if full is not None and rank < full:
        return Text(f"{rank} ▲", style="yellow")
    return Text(str(rank))


__all__ = ["spectra_panel", "head_tables"]
