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
    "survey": ("survey_cmd", "survey_command"),
    "compare": ("compare_cmd", "compare_command"),
    "fingerprint": ("fingerprint_cmd", "fingerprint_command"),
    "scan": ("scan_cmd", "scan_command"),
    "families": ("families_cmd", "families_command"),
}

#: One line per command for the top-level ``--help``, so that listing the commands imports none of
#: them (nor torch). A command missing here is imported for its own short help instead.
SUMMARIES: dict[str, str] = {
    "inspect": "Report a model's attention structure and parameter identification (the default command).",
    "export": "Export MODEL to OUT with every attention layer in the gauge-fixed form.",
    "verify": "Check that checkpoint B computes the same function as A.",
    "audit": "Audit models against rules and a policy; exit 0 pass, 1 findings, 2 error.",
    "diff": "How much of the step from A to B moves along A's gauge orbit (rho, beta, tau).",
    "families": "List every model type transformers ships: supported, automatic (--auto), refused (why) or unknown.",
}


def load_command(name: str) -> click.Command | None:
    """The click command called ``name``, or None if there is none."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    module, attribute = entry
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
