"""One module per CLI command, imported only when that command runs (or for ``--help``).

``COMMANDS`` maps each command name to (module, click command object); the group in
:mod:`idinspect.cli` looks names up here, so ``idinspect MODEL --format json`` never imports the
export, verify or audit code (nor rich, which only the text outputs need).
"""

from __future__ import annotations

import importlib

import click

COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("inspect_cmd", "inspect_command"),
    "export": ("export_cmd", "export_command"),
    "verify": ("verify_cmd", "verify_command"),
    "audit": ("audit_cmd", "audit_command"),
    "diff": ("diff_cmd", "diff_command"),
}


def load_command(name: str) -> click.Command | None:
    """The click command called ``name``, or None if there is none."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    module, attribute = entry
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
