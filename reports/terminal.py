"""The rich terminal report of ``idinspect inspect`` (the default output of ``idinspect MODEL``).

Sections: summary, per-layer table (identical consecutive layers collapse into one row unless
``layers="all"``), findings grouped by rule, and with ``heads=True`` per-head spectra. Every string
from the result is escaped or passed as :class:`rich.text.Text`, so tensor names such as
``[bold]x`` print literally. Colour is decoration only: severities are also spelled out, so
``NO_COLOR`` and non-TTY output lose nothing.
"""

from __future__ import annotations

from typing import Literal

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .summary import (near_null_text, attention_shape, closed_form_line, plugin_text, proof_near_text, findings_by_rule, fmt_float, fmt_int,
                      fmt_ratio, gguf_text, layer_groups, plural, not_analysed_lines, layer_kinds_text, positional_text, revision_text, softmax_text,
                      severity_counts, stack_lines)
from .finding_words import finding_phrases, finding_tensors
from .terminal_heavy_tail import heavy_tail_panel
from .terminal_spectra import head_tables, spectra_panel

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "note": "cyan"}
SEVERITY_MARK = {"error": "✖", "warning": "▲", "note": "●"}

LayersMode = Literal["collapsed", "all"]


def render_report(result: dict, console: Console | None = None, *, layers: LayersMode = "collapsed",
                  heads: bool = False) -> None:
    """Print the whole report for ``result`` (the JSON-contract dict) to ``console`` (stdout)."""
    from ..textsafe import visible_tree

    console = console or Console()
    result = visible_tree(result)  # checkpoint text (names, config strings) never reaches the terminal raw
    sections = [summary_panel(result)]
    if result.get("layers"):
        sections.append(layer_table(result, collapse=layers != "all", width=console.width))
        spectra = spectra_panel(result)
        if spectra is not None:
            sections.append(spectra)
        tails = heavy_tail_panel(result)
        if tails is not None:
            sections.append(tails)
    findings = result.get("findings")
    if findings is not None:
        sections.append(findings_section(findings, width=console.width))
    if result.get("proof"):
        sections.append(proof_panel(result["proof"]))
    if result.get("whole_model"):
        sections.append(whole_model_panel(result["whole_model"]))
    if heads and result.get("layers"):
        sections += head_tables(result, width=console.width)
    for i, section in enumerate(sections):
        if i:
            console.line()
        console.print(section)


def whole_model_panel(section: dict) -> Panel:
    """``--whole-model``: the continuous symmetries of the whole checkpoint, per component."""
    from .whole_model_words import whole_model_rows

    grid = Table.grid(padding=(0, 2))
    grid.add_column("field", style="bold", no_wrap=True)
    grid.add_column("value", overflow="fold")
    for label, text in whole_model_rows(section):
        grid.add_row(Text(label), Text(text))
    return Panel(grid, title=Text("Whole model (--whole-model)", style="bold"), title_align="left", box=box.ROUNDED,
                 expand=False)


def proof_panel(proof: dict) -> Panel:
    """``--prove``: the twin's Jacobian nullity beside its structural count."""
    twin = proof.get("twin") or {}
    agree = proof.get("agree")
    verdict = Text("✔ agree", style="bold green") if agree else Text("✖ DISAGREE", style="bold red")
    grid = Table.grid(padding=(0, 2))
    grid.add_column("field", style="bold", no_wrap=True)
    grid.add_column("value", overflow="fold")
    grid.add_row("Twin", Text(f"{twin.get('model_type', '?')}: H={twin.get('heads')}, G={twin.get('kv_heads')}, "
                              f"d_k={twin.get('head_dim')}, d={twin.get('hidden_size')}, "
                              f"{proof.get('attention_parameters')} attention parameters"))
    grid.add_row("Jacobian", Text(f"{proof.get('jacobian_shape')} over {proof.get('batches')} batches of "
                                  f"{proof.get('tokens')} tokens, cut at rtol {fmt_float(proof.get('rtol'))}"))
    grid.add_row("Result", Text.assemble(f"nullity {proof.get('jacobian_nullity')} vs structural count "
                                         f"{proof.get('structural_unidentified')}: ", verdict))
    if proof_near_text(proof):
        grid.add_row("Nearly null", Text(proof_near_text(proof)))
    grid.add_row("Gap", Text(f"smallest kept σ {fmt_float(proof.get('smallest_kept_singular_value'))}, largest "
                             f"dropped σ {fmt_float(proof.get('largest_dropped_singular_value'))}"))
    return Panel(grid, title=Text("Proof (--prove)", style="bold"), title_align="left", box=box.ROUNDED, expand=False)


def _sev(severity: str, count: int | None = None) -> Text:
    mark = SEVERITY_MARK.get(severity, "·")
    label = f"{mark} {plural(count, severity)}" if count is not None else f"{mark} {severity}"
    return Text(label, style=SEVERITY_STYLE.get(severity, ""))


def summary_panel(result: dict) -> Panel:
    """Model, provenance, attention shape, parameter counts, ratio vs closed form, finding counts."""
    model = result.get("model") or {}
    totals = result.get("totals") or {}
    grid = Table.grid(padding=(0, 2))
    grid.add_column("field", style="bold", no_wrap=True)
    grid.add_column("value", overflow="fold")
    grid.add_row("Model", Text(str(model.get("source", "?"))))
    grid.add_row("Revision", Text(revision_text(model)))
    grid.add_row("Family", Text(f"{model.get('model_type', '?')} ({model.get('architecture', '?')})"))
    if plugin_text(model):
        grid.add_row("Adapter", Text(plugin_text(model)))
    grid.add_row("Attention", Text(attention_shape(model)))
    grid.add_row("Positional", Text(positional_text(model, result.get("layers"))))
    if layer_kinds_text(result):
        grid.add_row("Layers", Text(layer_kinds_text(result)))
    if softmax_text(result):
        grid.add_row("Softmax", Text(softmax_text(result)))
    if gguf_text(model):
        grid.add_row("GGUF", Text(gguf_text(model)))
    if totals:
        att, total = totals.get("attention_parameters"), totals.get("model_parameters")
        share = f" ({fmt_ratio(att / total)} of the model analysed)" if att and total else ""
        grid.add_row("Parameters", Text(f"{fmt_int(att)} in attention of {fmt_int(total)} in the model{share}"))
        grid.add_row("Unidentified", unidentified_text(totals))
        grid.add_row("Closed form", Text(closed_form_line(result)))
        near = near_null_text(result)
        if near:
            grid.add_row("Nearly null", Text(near))
        for i, line in enumerate(stack_lines(result)):
            grid.add_row("Per stack" if i == 0 else "", Text(line))
    for i, line in enumerate(not_analysed_lines(model)):
        grid.add_row("Not analysed" if i == 0 else "", Text(line, style="yellow"))
    findings = result.get("findings")
    if findings is not None:
        counts = Text()
        for i, (sev, n) in enumerate(severity_counts(findings).items()):
            if i:
                counts.append("  ")
            counts.append_text(_sev(sev, n) if n else Text(f"{SEVERITY_MARK.get(sev, '·')} {plural(0, sev)}", style="dim"))
        grid.add_row("Findings", counts)
    tool = result.get("tool") or {}
    title = Text(f"idinspect {tool.get('version', '')}".strip(), style="bold")
    return Panel(grid, title=title, title_align="left", box=box.ROUNDED, expand=False)


def unidentified_text(totals: dict) -> Text:
    """The structural count, and what the actual weights add (dead or rank-deficient heads) when they do."""
    un = Text(plural(totals.get("unidentified_parameters"), "parameter"), style="bold")
    un.append(f" = {fmt_ratio(totals.get('identification_ratio'))} of attention", style="bold")
    if totals.get("unidentified_share_of_model") is not None:
        un.append(f", {fmt_ratio(totals['unidentified_share_of_model'])} of the model")
    extra, att = totals.get("extra_unidentified") or 0, totals.get("attention_parameters")
    if extra:
        with_weights = totals.get("unidentified_with_weights") or (totals.get("unidentified_parameters") or 0) + extra
        un.append(" from the structure alone\n")
        un.append(f"{plural(with_weights, 'parameter')}", style="bold yellow")
        un.append(f" = {fmt_ratio(with_weights / att) if att else '–'} of attention with the actual weights",
                  style="bold yellow")
        un.append(f": dead or rank-deficient heads add {fmt_int(extra)}")
    return un


#: Column headers of the layer table: (wide, narrow).
_LAYER_COLUMNS = (("params", "params"), ("QK gauge", "QK"), ("VO gauge", "VO"), ("no-op bias", "no-op"),
                  ("absorbable bias", "absorb"), ("unidentified", "U"), ("ratio", "ratio"))
#: Inserted before "ratio" when some layer's weights add freedom beyond the structure.
_WEIGHT_COLUMNS = (("+ weights", "+W"), ("with weights", "U+W"))
#: Below this width the per-head tables show only the largest singular value.
NARROW = 64


_ROW_KEYS = ("attention_parameters", "qk_gauge", "vo_gauge", "noop_bias", "absorbable_bias",
             "unidentified_parameters")


_NEAR_COLUMN = ("nearly unidentified", "near")


def _row_cells(row: dict, weights: bool, near: bool = False) -> list[str]:
    cells = [fmt_int(row.get(k)) for k in _ROW_KEYS]
    if weights:
        extra = row.get("extra_unidentified") or 0
        total = row.get("unidentified_with_weights") or (row.get("unidentified_parameters") or 0) + extra
        cells += [f"+{extra:,}" if extra else "0", fmt_int(total)]
    cells += [fmt_ratio(row.get("identification_ratio"))]
    return cells + [fmt_int(row.get("near_unidentified"))] if near else cells


def layer_table(result: dict, collapse: bool = True, width: int = 120) -> Table | Group:
    """Per-layer counts; runs of identical layers are one row labelled ``layers 0-15 (16 identical)``.

    "Identical" covers what the weights add: a layer with a dead or rank-deficient head is its own row,
    and when any layer has one the table gains "+ weights" (unidentified beyond the structure) and
    "with weights" columns. The layout follows ``width``: full headers when everything fits, short
    headers (explained in the caption) and tighter spacing when not, and below that one block of
    wrapped lines per row. Numbers are never cropped.
    """
    groups = layer_groups(result.get("layers") or [], collapse=collapse)
    weights = any(g.row.get("extra_unidentified") for g in groups)
    near = any(g.row.get("near_unidentified") for g in groups)
    columns = (_LAYER_COLUMNS[:-1] + (_WEIGHT_COLUMNS if weights else ()) + _LAYER_COLUMNS[-1:]
               + ((_NEAR_COLUMN,) if near else ()))
    cells = [_row_cells(g.row, weights, near) for g in groups]
    label_width = max((len(g.label) for g in groups), default=8)

    def numbers_width(short: bool, pad: int) -> int:
        """Columns after the label: content + padding on both sides + one divider each."""
        heads = [n if short else w for w, n in columns]
        return sum(max([len(h)] + [len(c[i]) for c in cells]) + 2 * pad + 1 for i, h in enumerate(heads))

    def fits(short: bool, pad: int, label: int) -> bool:
        return 2 + label + 2 * pad + numbers_width(short, pad) <= width

    layouts = [(False, 1), (True, 1), (True, 0)]  # (short headers, cell padding)
    for short, pad in layouts:
        if fits(short, pad, label_width):
            break
    else:
        short, pad = layouts[-1]
        if not fits(True, 0, 10):
            return _layer_blocks(groups)
    caption = ("QK/VO: gauge dimensions; no-op: key-bias dims; absorb: value-bias dims; U: unidentified; "
               "ratio = U / params" if short else "ratio = unidentified / attention parameters")
    if weights:
        caption += ("; +W: what dead or rank-deficient heads add beyond the structure (U+W in all)" if short else
                    "; + weights: what dead or rank-deficient heads add beyond the structure")
    if any(g.row.get("attention") == "latent" for g in groups):
        caption += ("; latent-attention layers: QK = H n^2 + e, and U adds each normalised latent's rotations "
                    "and gain trades, r(r+1)/2")
    if near:
        caption += "; nearly unidentified (q/k norm scales, broken only by eps) are not in U"
    table = Table(title="Attention layers", title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
                  caption=caption, caption_justify="left", pad_edge=True, padding=(0, pad))
    room = width - 2 - 2 * pad - numbers_width(short, pad)
    table.add_column("layers", overflow="fold", min_width=max(8, min(label_width, room)))
    for wide_name, narrow_name in columns:
        table.add_column(narrow_name if short else wide_name, justify="right", no_wrap=True)
    for group, row in zip(groups, cells):
        table.add_row(Text(group.label), *row)
    return table


def _layer_blocks(groups: list) -> Group:
    parts: list = [Text("Attention layers", style="bold")]
    for group in groups:
        row = group.row
        parts.append(Text(group.label, style="bold"))
        parts.append(Padding(Text(f"params {fmt_int(row.get('attention_parameters'))}, unidentified "
                                  f"{fmt_int(row.get('unidentified_parameters'))} = "
                                  f"{fmt_ratio(row.get('identification_ratio'))}"
                                  + (f", nearly unidentified {fmt_int(row['near_unidentified'])}"
                                     if row.get("near_unidentified") else "")), (0, 0, 0, 2)))
        if row.get("extra_unidentified"):
            parts.append(Padding(Text(f"+ weights {fmt_int(row['extra_unidentified'])} (dead or rank-deficient heads), "
                                      f"with weights {fmt_int(row.get('unidentified_with_weights'))}"), (0, 0, 0, 2)))
        parts.append(Padding(Text(f"QK gauge {fmt_int(row.get('qk_gauge'))}, VO gauge {fmt_int(row.get('vo_gauge'))}, "
                                  f"no-op bias {fmt_int(row.get('noop_bias'))}, absorbable bias "
                                  f"{fmt_int(row.get('absorbable_bias'))}"), (0, 0, 0, 2)))
    return Group(*parts)


#: The narrowest details column beside the tensor names; below it findings print as blocks.
_MIN_DETAILS = 20


def findings_section(findings: list[dict], width: int = 120) -> Group | Text:
    """One table per rule (worst rule first): layer, tensors (one per line, never broken inside a name),
    parameters and the details in words, then the rule's explanation (the first finding's message)
    once; a single line when there are none. When the names leave too little room the rows become
    blocks: the layer and count, the tensors, then the details, each on its own lines."""
    if not findings:
        return Text("No findings.", style="green")
    parts: list = [Text("Findings", style="bold")]
    for n, (rule, worst, items) in enumerate(findings_by_rule(findings)):
        if n:
            parts.append(Text(""))
        total = sum(f.get("parameters") or 0 for f in items)
        title = Text.assemble(_sev(worst), " ", (rule, "bold"), f": {plural(len(items), 'finding')}, "
                              f"{plural(total, 'parameter')}")
        names = max((len(t) for f in items for t in finding_tensors(f)), default=1)
        params = max([6] + [len(fmt_int(f.get("parameters"))) for f in items])
        if 5 + names + params + 6 + _MIN_DETAILS <= width:  # three columns' padding between four columns
            parts.append(_findings_table(title, items, worst, names))
        else:
            parts.append(title)
            parts += _finding_blocks(items, worst)
        message = str(items[0].get("message", ""))
        if message:
            parts.append(Padding(Text(("e.g. " if len(items) > 1 else "") + message, style="dim"), (0, 0, 0, 2)))
    return Group(*parts)


def _details(f: dict, worst: str) -> Text:
    detail = Text(", ".join(finding_phrases(f)))
    if f.get("severity") != worst:
        detail = Text.assemble(_sev(str(f.get("severity"))), " ", detail)
    return detail


def _findings_table(title: Text, items: list[dict], worst: str, names: int) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
                  show_edge=False, pad_edge=False)
    table.add_column("layer", justify="right", no_wrap=True)
    table.add_column("tensor", no_wrap=True, min_width=names)
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("details", min_width=_MIN_DETAILS)
    for f in items:
        table.add_row(str(f.get("layer", "–")), Text("\n".join(finding_tensors(f)) or "–"),
                      fmt_int(f.get("parameters")), _details(f, worst))
    return table


def _finding_blocks(items: list[dict], worst: str) -> list:
    out: list = []
    for f in items:
        out.append(Text(f"layer {f.get('layer', '–')}: {plural(f.get('parameters'), 'parameter')}", style="bold"))
        for tensor in finding_tensors(f) or ["–"]:
            out.append(Padding(Text(tensor, overflow="fold"), (0, 0, 0, 2)))
        out.append(Padding(_details(f, worst), (0, 0, 0, 2)))
    return out


__all__ = ["render_report", "summary_panel", "layer_table", "findings_section", "head_tables"]
