"""``idinspect fingerprint MODEL``: the model's gauge invariants as compact, versioned JSON."""

from __future__ import annotations

import json

import click

from .options import MODEL_FORMS, debug_option, hub_options


@click.command("fingerprint", epilog=MODEL_FORMS)
@click.argument("model")
@click.option("--revision", help="Hub branch, tag or commit (same as MODEL@REVISION).")
@hub_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="PATH",
              help="Write the fingerprint to PATH (atomically) instead of stdout.")
@click.option("--device", default="cpu", show_default=True, help="Where the linear algebra runs: cpu or cuda.")
@click.option("--digest", is_flag=True,
              help="Print only the fingerprint's digest (sha256:..., the 'fingerprint' column of 'survey --fingerprint').")
@click.option("--whole-model", "whole_model", is_flag=True,
              help="Also record the MLP units' invariants (gated MLPs: Llama, Mistral, Qwen2, Granite), which "
                   "'compare --whole-model' uses as evidence beyond attention.")
@click.option("--compact", is_flag=True,
              help="Keep each head's 8 largest singular values of W_QK and W_OV and no RoPE planes: at most 64 kB for "
                   "a Llama-3.2-1B shape (about 10x smaller; compare uses what both sides hold).")
@debug_option
def fingerprint_command(model: str, revision: str | None, token: str | None, cache_dir: str | None, offline: bool,
                        output: str | None, device: str, digest: bool, whole_model: bool = False,
                        compact: bool = False) -> None:
    """Write MODEL's fingerprint: per-head invariants (float32) and rounding radii, from which
    'idinspect compare FINGERPRINT.json OTHER' works without MODEL's weights. MODEL may be a
    fingerprint file (with --digest: its digest)."""
    from ..compare import fingerprint_dict, fingerprint_digest, invariants_of
    from ..compare.fingerprint import COMPACT_VALUES
    from ..numerics.device import resolve_device
    from ..reports.atomic import write_text_atomic
    from .paths import check_output_paths

    check_output_paths([("--output", output)], [model])   # before any work: never over the input
    inv = invariants_of(model, revision=revision, token=token, cache_dir=cache_dir, local_files_only=offline,
                        device=str(resolve_device(device)), whole_model=whole_model)
    if whole_model and inv.mlp is None and inv.mlp_note:
        click.echo(f"note: no MLP invariants recorded: {inv.mlp_note}", err=True)
    fp = fingerprint_dict(inv, inv.revision, COMPACT_VALUES if compact else None)
    if digest:
        text = fingerprint_digest(fp) + "\n"
    elif compact:
        text = json.dumps(fp, separators=(",", ":")) + "\n"
    else:
        text = json.dumps(fp, indent=1) + "\n"
    if output:
        write_text_atomic(output, text)
        click.echo(f"wrote {output} ({len(text.encode())} bytes, {fingerprint_digest(fp)})", err=True)
    else:
        click.echo(text, nl=False)
