"""``idinspect export MODEL OUT``: write the checkpoint in the balanced gauge (summary on stdout)."""

from __future__ import annotations

import contextlib
import json

import click
from rich.console import Console
from rich.markup import escape

from ..cli import debug_option, hub_options
from ..textsafe import visible
from ..exporting.pipeline import DTYPES, ExportResult, export


@click.command("export")
@click.argument("model")
@click.argument("out", type=click.Path(dir_okay=True, file_okay=True))
@click.option("--dtype", type=click.Choice(list(DTYPES)), default="keep", show_default=True,
              help="Dtype of the written floating-point tensors (keep: each tensor's own).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--revision", help="Hub branch, tag or commit (same as MODEL@REVISION).")
@hub_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: a short summary; json: the export record on stdout.")
@debug_option
def export_command(model: str, out: str, dtype: str, force: bool, revision: str | None, token: str | None,
                   cache_dir: str | None, offline: bool, fmt: str) -> None:
    """Export MODEL to OUT with every attention layer in the gauge-fixed form "balanced" v1.

    Same function, same tensor names, shards and files; attention weights canonical, every other
    tensor bit-identical (unless --dtype casts it). OUT is written under a temporary name beside
    it and appears only when complete; an existing OUT needs --force.
    """
    err = Console(stderr=True, highlight=False)
    with _progress(err) as progress:
        result = export(model, out, dtype=dtype, force=force, revision=revision, token=token, cache_dir=cache_dir,
                        local_files_only=offline, progress=progress)
    for d in result.degeneracies:
        err.print(f"[yellow]note:[/] {escape(visible(d.describe()))}", soft_wrap=True)
    for f in result.skipped_files:
        err.print(f"[yellow]note:[/] not copied: {escape(visible(f))} (weights in another format would not be "
                  "gauge-fixed)", soft_wrap=True)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(visible(_summary(result), newlines=True))


def _summary(r: ExportResult) -> str:
    unique = "unique" if not r.degeneracies else f"not unique at {len(r.degeneracies)} place(s), see notes"
    return (f"exported {r.source} -> {r.out}\n"
            f"  gauge: balanced v1 ({unique}); dtype: {r.dtype}\n"
            f"  {r.gauge_fixed_tensors} attention tensors gauge-fixed, {r.tensors - r.gauge_fixed_tensors} copied, "
            f"{len(r.shards)} shard(s), {r.total_size} bytes\n"
            f"  largest invariant error: {r.max_invariant_error:.2e} ({r.worst_invariant})")


@contextlib.contextmanager
def _progress(console: Console):
    """A rich progress callback on an interactive stderr, else a no-op."""
    if not (console.is_terminal and console.is_interactive):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                  transient=True) as bar:
        tasks: dict[str, int] = {}
        labels = {"gauge": "gauge-fixing layers", "write": "writing tensors"}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=total)
            bar.update(tasks[stage], completed=done)

        yield update
