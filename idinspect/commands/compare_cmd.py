"""``idinspect compare A B``: same function, same lineage or unrelated, from the gauge invariants.

Exit status as ``verify``: 0 when the verdict is at least ``--expect`` (default same-function),
1 when not, 2 on error.
"""

from __future__ import annotations

import json

import click

from .options import MODEL_FORMS, debug_option, hub_options, progress_options


@click.command("compare", epilog=MODEL_FORMS)
@click.argument("a")
@click.argument("b")
@click.option("--expect", type=click.Choice(["same-function", "same-lineage", "unrelated"]), default="same-function",
              show_default=True, help="Exit 0 when the verdict is at least this (same-lineage accepts same-function too).")
@click.option("--alpha", type=click.FloatRange(0.0, 1.0, min_open=True), default=1e-6, show_default=True,
              help="Significance level of the lineage test.")
@click.option("--permutations", type=click.IntRange(0), default=1_000, show_default=True,
              help="Monte Carlo re-pairings of the lineage test (seeded; the tail bound needs none).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the Monte Carlo re-pairings.")
@hub_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: per-layer table and verdict; json: the full record on stdout.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="PATH", help="Also write the JSON record to PATH.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), metavar="PATH",
              help="Also write a single-file HTML report (similarity-by-layer chart) to PATH.")
@click.option("--device", default="cpu", show_default=True, help="Where the linear algebra runs: cpu or cuda.")
@click.option("--whole-model", "whole_model", is_flag=True,
              help="Also compare the MLP units (per-unit invariants of gated MLPs, gains folded): evidence beyond "
                   "attention; reads the MLP tensors.")
@progress_options
@debug_option
@click.pass_context
def compare_command(ctx: click.Context, a: str, b: str, expect: str, alpha: float, permutations: int, seed: int,
                    token: str | None, cache_dir: str | None, offline: bool, fmt: str, json_path: str | None,
                    html_path: str | None, device: str, progress: str, quiet: bool, whole_model: bool = False) -> None:
    """Compare two models, or a fingerprint file (idinspect fingerprint) and a model.

    Per-head invariants (singular values of W_QK, W_OV and each RoPE plane, norm gains folded in)
    are matched across models by optimal assignment. Verdicts: same-function (every invariant
    equal within the rounding of the stored dtypes), same-lineage (permutation-test p-value below
    --alpha), unrelated. Exit status: 0 verdict at least --expect, 1 not, 2 error.
    """
    from .paths import check_output_paths

    check_output_paths([("--json", json_path), ("--html", html_path)], [a, b])   # before any work
    if not offline:
        from ..sources.remote_warm import warm

        warm(a, token=token, cache_dir=cache_dir)                  # A's hub answers and tensors while torch imports
        warm(b, token=token, cache_dir=cache_dir, prefetch=False)  # B's headers only: its tensors come after A's
    from ..compare import compare_invariants, invariants_of
    from ..numerics.device import resolve_device
    from ..progress import ProgressReporter, silence_library_progress
    from ..reports.atomic import write_text_atomic
    from ..textsafe import visible

    silence_library_progress()
    opts = {"token": token, "cache_dir": cache_dir, "local_files_only": offline, "device": str(resolve_device(device))}
    with ProgressReporter("never" if quiet else progress) as bars:
        sides = []
        for name, source in (("A", a), ("B", b)):
            with bars.stage(f"invariants of {name}: {source}"):
                sides.append(invariants_of(source, on_layer=bars.on_layer, whole_model=whole_model, **opts))
        result = compare_invariants(*sides, alpha=alpha, permutations=permutations, seed=seed)
    record = result.to_dict()
    text = json.dumps(record, indent=1, allow_nan=False) + "\n"
    if json_path:
        write_text_atomic(json_path, text)
        if not quiet:
            click.echo(f"wrote the JSON report to {visible(json_path)}", err=True)
    if html_path:
        from ..reports.compare_html import write_compare_html

        write_compare_html(record, html_path)
        if not quiet:
            click.echo(f"wrote the HTML report to {visible(html_path)}", err=True)
    if fmt == "json":
        click.echo(text, nl=False)
    else:
        from ..reports.compare_text import render_compare_text

        click.echo(visible(render_compare_text(record), newlines=True))
    ctx.exit(0 if result.satisfies(expect) else 1)
