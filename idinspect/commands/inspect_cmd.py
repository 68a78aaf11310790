"""``idinspect inspect MODEL``: the report (text on the terminal, or JSON on stdout)."""

from __future__ import annotations

import json

import click

from ..cli import debug_option
from ..inspection import inspect
from ..model import load


@click.command("inspect")
@click.argument("model")
@click.option("--revision", help="Hub branch, tag or commit (same as MODEL@REVISION).")
@click.option("--token", envvar="HF_TOKEN", show_envvar=True, help="Hub token for gated or private models.")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Hub cache folder (default: HF_HUB_CACHE).")
@click.option("--offline", is_flag=True, help="Use only the hub cache, never the network (like HF_HUB_OFFLINE=1).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: rich report on the terminal; json: the machine contract on stdout.")
@click.option("--device", default="cpu", show_default=True,
              help="Where the linear algebra runs: cpu or cuda (falls back to cpu with a warning).")
@click.option("--prove", is_flag=True,
              help="Also build a small twin of the attention with transformers and report its Jacobian "
                   "nullity next to its structural count.")
@debug_option
def inspect_command(model: str, revision: str | None, token: str | None, cache_dir: str | None, offline: bool,
                    fmt: str, device: str, prove: bool) -> None:
    """Report a model's attention structure and parameter identification."""
    with load(model, revision=revision, token=token, cache_dir=cache_dir, local_files_only=offline) as opened:
        result = inspect(opened, device=device, prove=prove)
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        from ..reports.terminal import render_report

        render_report(result)
