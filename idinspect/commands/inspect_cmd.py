"""``idinspect inspect MODEL``: the report (text on the terminal, or JSON on stdout)."""

from __future__ import annotations

import json

import click

from ..cli import debug_option
from ..inspection import inspect


@click.command("inspect")
@click.argument("model")
@click.option("--revision", help="Hub branch, tag or commit (same as MODEL@REVISION).")
@click.option("--token", envvar="HF_TOKEN", show_envvar=True, help="Hub token for gated or private models.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: rich report on the terminal; json: the machine contract on stdout.")
@debug_option
def inspect_command(model: str, revision: str | None, token: str | None, fmt: str) -> None:
    """Report a model's attention structure and parameter identification."""
    result = inspect(model, revision=revision, token=token)
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        from ..reports.terminal import render_report

        render_report(result)
