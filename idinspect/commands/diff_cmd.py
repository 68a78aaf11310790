"""``idinspect diff A B``: how much of the step from A to B moves along A's gauge orbit."""

from __future__ import annotations

import json

import click

from .options import MODEL_FORMS, debug_option, hub_options, progress_options


@click.command("diff", epilog=MODEL_FORMS)
@click.argument("a")
@click.argument("b")
@hub_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: a table per layer; json: the diff document on stdout.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="PATH", help="Also write the JSON to PATH.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), metavar="PATH",
              help="Also write the single-file HTML report (charts of rho and beta per layer) to PATH.")
@click.option("--heads", is_flag=True, help="Text: one line per kv group (= head without GQA) and side.")
@progress_options
@debug_option
def diff_command(a: str, b: str, token: str | None, cache_dir: str | None, offline: bool, fmt: str,
                 json_path: str | None, html_path: str | None, heads: bool, progress: str, quiet: bool) -> None:
    """Per layer and kv group: rho (the share of B - A along A's gauge orbit, beside 1/(2H)),
    the imbalances beta and tau of A and B, mu, and the invariant change against the raw change.

    A and B must be checkpoints of the same model (same family and shapes).
    """
    from ..sources.local_source import check_local_source
    from .paths import check_output_paths

    check_output_paths([("--json", json_path), ("--html", html_path)], [a, b])   # before any work
    for model in (a, b):
        check_local_source(model)   # refusals the file system decides, before torch loads
    from ..errors import IdinspectError
    from ..progress import ProgressReporter, silence_library_progress
    from ..reports.atomic import write_text_atomic
    from ..reports.diff_text import render_diff
    from ..textsafe import visible
    from ..training.diff import diff

    silence_library_progress()
    with ProgressReporter("never" if quiet else progress) as bars, bars.stage(f"diff {a} -> {b}"):
        doc = diff(a, b, token=token, cache_dir=cache_dir, local_files_only=offline,
                   progress=lambda done, n: bars.on_layer(done - 1, n))
    text = json.dumps(doc, indent=1, allow_nan=False)
    for kind, path, write in (("JSON", json_path, lambda p: write_text_atomic(p, text + "\n")),
                              ("HTML", html_path, lambda p: _write_html(doc, p))):
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:
            raise IdinspectError(f"cannot write the {kind} report to {path}: {exc.strerror or exc}; "
                                 "check that the folder exists and is writable") from None
        if not quiet:
            click.echo(f"wrote the {kind} report to {visible(path)}", err=True)
    click.echo(text if fmt == "json" else visible(render_diff(doc, heads=heads), newlines=True))


def _write_html(doc: dict, path: str) -> None:
    """The HTML report, its modules (SVG charts, the page template) imported only when one is asked for."""
    from ..reports.diff_html import write_diff_html

    write_diff_html(doc, path)
