"""One module per CLI command; ``register`` adds them to the group."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    from .audit_cmd import audit_command
    from .export_cmd import export_command
    from .inspect_cmd import inspect_command
    from .verify_cmd import verify_command

    group.add_command(inspect_command)
    group.add_command(export_command)
    group.add_command(verify_command)
    group.add_command(audit_command)
