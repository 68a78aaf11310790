"""``idinspect scan MODEL DB``: compare one model with every fingerprint in a folder or JSONL file.

Exit status: 0 when some entry is same-lineage or closer, 1 when none is, 2 on an error (one line
naming the file or the database entry and the fix).
"""

from __future__ import annotations

import click

from .options import MODEL_FORMS, debug_option, hub_options


@click.command("scan", epilog=MODEL_FORMS)
@click.argument("model")
@click.argument("db")
@click.option("--alpha", type=click.FloatRange(0.0, 1.0, min_open=True), default=1e-6, show_default=True,
              help="Significance level of the lineage test.")
@click.option("--permutations", type=click.IntRange(0), default=0, show_default=True,
              help="Monte Carlo re-pairings of the lineage test (seeded); they refine moderate p-values only and "
                   "never change a verdict (their p-value cannot go below 1/(K+1)), so a scan runs none by default.")
@click.option("--top", type=click.IntRange(1), default=20, show_default=True, help="Rows shown in the text output.")
@hub_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--device", default="cpu", show_default=True, help="Where the linear algebra runs: cpu or cuda.")
@debug_option
@click.pass_context
def scan_command(ctx: click.Context, model: str, db: str, alpha: float, permutations: int, top: int,
                 token: str | None, cache_dir: str | None, offline: bool, fmt: str, device: str) -> None:
    """Compare MODEL with every fingerprint in DB (a folder of *.json fingerprints or a JSONL file, one
    per line) and list them best match first: verdict, lineage p-value, similarity."""
    from ..numerics.device import resolve_device
    from ..compare import invariants_of
    from ..compare.scan import scan, scan_json
    from ..textsafe import visible

    inv = invariants_of(model, token=token, cache_dir=cache_dir, local_files_only=offline,
                        device=str(resolve_device(device)))
    rows = scan(inv, db, alpha=alpha, permutations=permutations)
    if fmt == "json":
        click.echo(scan_json(rows, str(model), db, alpha), nl=False)
    else:
        click.echo(f"{len(rows)} fingerprints in {visible(db)} against {visible(model)} (alpha {alpha:g}):")
        click.echo(f"{'rank':>4}  {'verdict':<13} {'p-value':>9} {'similarity':>10}  entry (source)")
        for i, r in enumerate(rows[:top], start=1):
            p = "-" if r["p_value"] is None else f"{r['p_value']:.2g}"
            sim = "-" if r["similarity"] is None else f"{r['similarity']:.6f}"
            click.echo(f"{i:>4}  {r['verdict']:<13} {p:>9} {sim:>10}  {visible(r['entry'])} ({visible(str(r['source']))})")
        if len(rows) > top:
            click.echo(f"... {len(rows) - top} more (--top N, or --format json for all)")
    ctx.exit(0 if rows and rows[0]["verdict"] != "unrelated" else 1)
