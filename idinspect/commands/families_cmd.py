"""``idinspect families``: every model type transformers ships, and what idinspect does with it."""

from __future__ import annotations

import json
from collections import Counter

import click

STATES = ("supported", "refused", "unknown")


@click.command("families")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: one line per model type and a count per state; json: the rows, for tools "
                   "(docs/families.md is checked against them).")
@click.option("--state", "states", type=click.Choice(STATES), multiple=True,
              help="Only model types in this state (repeatable).")
def families_command(fmt: str, states: tuple[str, ...]) -> None:
    """List every model type transformers ships: supported (by which adapter), refused (why), or
    unknown (no adapter yet: see docs/adding-a-family.md)."""
    from ..adapters import family_states

    rows = [r for r in family_states() if not states or r["state"] in states]
    if fmt == "json":
        click.echo(json.dumps({"schema_version": 1, "families": rows}, indent=2))
        return
    width = max((len(r["model_type"]) for r in rows), default=0)
    for r in rows:
        what = {"supported": f"{r['family']} ({r['module']})", "refused": r["reason"], "unknown": ""}[r["state"]]
        click.echo(f"{r['model_type']:<{width}}  {r['state']:<9}  {what}".rstrip())
    counts = Counter(r["state"] for r in rows)
    click.echo(", ".join(f"{counts.get(s, 0)} {s}" for s in STATES if not states or s in states), err=True)
