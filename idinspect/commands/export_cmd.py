"""``idinspect export MODEL OUT``: write the checkpoint in the balanced gauge (summary on stdout)."""

from __future__ import annotations

import json

import click

from ..exporting import DTYPE_NAMES
from ..textsafe import visible
from .options import MODEL_FORMS, debug_option, hub_options, progress_options


@click.command("export", epilog=MODEL_FORMS)
@click.argument("model")
@click.argument("out", type=click.Path(dir_okay=True, file_okay=True))
@click.option("--dtype", type=click.Choice(list(DTYPE_NAMES)), default="keep", show_default=True,
              help="Dtype of the written floating-point tensors (keep: each tensor's own).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--revision", help="Hub branch, tag or commit (same as MODEL@REVISION).")
@click.option("--whole-model", "whole_model", is_flag=True,
              help="Also fix the whole-model symmetries: norm gains folded (gains 1), residual rotation (untied head), "
                   "gated MLP unit scalings balanced (Llama, Mistral, Qwen2, Granite, Phi-3, Mixtral); LayerNorm gains and biases "
                   "folded, mean directions centred (GPT-2, GPTBigCode).")
@hub_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: a short summary; json: the export record on stdout.")
@progress_options
@debug_option
def export_command(model: str, out: str, dtype: str, force: bool, revision: str | None, token: str | None,
                   cache_dir: str | None, offline: bool, fmt: str, progress: str, quiet: bool,
                   whole_model: bool = False) -> None:
    """Export MODEL to OUT with every attention layer in the gauge-fixed form "balanced" v1.

    Same function, same tensor names, shards and files; attention weights canonical, every other
    tensor bit-identical (unless --dtype casts it). OUT is written under a temporary name beside
    it and appears only when complete; an existing OUT needs --force. With --whole-model the norms,
    MLP, embeddings and head are rewritten too, into the form "whole-balanced" v1 (docs/export.md).
    """
    from ..sources.local_source import check_local_source

    check_local_source(model, export=True)   # refusals the file system decides, before torch loads
    from rich.console import Console
    from rich.markup import escape

    from ..exporting.pipeline import export
    from ..progress import ProgressReporter, silence_library_progress

    err = Console(stderr=True, highlight=False)
    silence_library_progress()
    with ProgressReporter("never" if quiet else progress, console=err) as bars:
        with bars.stage(f"exporting {model}"):
            result = export(model, out, dtype=dtype, force=force, revision=revision, token=token,
                            cache_dir=cache_dir, local_files_only=offline, whole_model=whole_model,
                            progress=bars.callback({"gauge": "gauge-fixing layers", "write": "writing tensors"}))
    for d in result.degeneracies:
        err.print(f"[yellow]note:[/] {escape(visible(d.describe()))}", soft_wrap=True)
    if result.revision_note:
        err.print(f"[yellow]note:[/] no revision recorded: {escape(visible(result.revision_note))}", soft_wrap=True)
    for f in result.skipped_files:
        err.print(f"[yellow]note:[/] not copied: {escape(visible(f))} (weights in another format would not be "
                  "gauge-fixed)", soft_wrap=True)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(visible(_summary(result), newlines=True))


def _summary(r) -> str:
    """``r``: an :class:`~idinspect.exporting.pipeline.ExportResult`."""
    from ..forms.per_head.invariants import describe_largest
    from ..reports.summary import plural

    unique = "unique" if not r.degeneracies else f"not unique at {plural(len(r.degeneracies), 'place')}, see notes"
    whole = ""
    if r.whole_model:
        w = r.whole_model
        whole = (f"  whole model: whole-balanced v1 ({'unique' if w['unique'] else 'not unique'}); fixed "
                 f"{', '.join(f['symmetry'] for f in w['fixed'])}; left {', '.join(u['symmetry'] for u in w['unfixed'])}; "
                 f"{plural(w['transformed_tensors'], 'tensor')} rewritten\n")
    return (f"exported {r.source} -> {r.out}\n"
            f"  gauge: balanced v1 ({unique}); dtype: {r.dtype}\n"
            f"  {r.gauge_fixed_tensors} attention tensors gauge-fixed, {r.tensors - r.gauge_fixed_tensors} copied, "
            f"{plural(len(r.shards), 'shard')}, {plural(r.total_size, 'byte')}\n"
            f"{whole}  {describe_largest(r.max_invariant_error, r.worst_invariant)}")
