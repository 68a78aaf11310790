"""The click options every command shares (--debug, the hub options, --progress/--quiet) and the
MODEL forms each command's help names; the command modules and the group in :mod:`idinspect.cli`
import them from here."""

from __future__ import annotations

import click

#: Whether --debug was given (tracebacks instead of one-line errors); read by :mod:`idinspect.cli`.
_DEBUG = {"on": False}


def _set_debug(ctx, param, value):
    if value:
        _DEBUG["on"] = True
    return value


debug_option = click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                             help="Show the full traceback on errors.")


def hub_options(command):
    """--token, --cache-dir and --offline, shared by every command that opens a model."""
    command = click.option("--offline", is_flag=True,
                           help="Use only the hub cache, never the network (like HF_HUB_OFFLINE=1).")(command)
    command = click.option("--cache-dir", type=click.Path(file_okay=False),
                           help="Hub cache folder (default: HF_HUB_CACHE).")(command)
    return click.option("--token", envvar="HF_TOKEN", show_envvar=True,
                        help="Hub token for gated or private models.")(command)


#: Every form a MODEL argument takes, for each command's help (an epilog).
MODEL_FORMS = ("MODEL (A, B): a checkpoint directory (config.json + safetensors); a hub id org/name[@revision]; "
               "a hub cache snapshot folder; a GGUF file (path/model.gguf, or org/name[@revision]:file.gguf on the "
               "hub); pkg:PACKAGE[/SUBDIR], a checkpoint inside an installed Python package.")


def progress_options(command):
    """--progress auto|always|never and -q/--quiet, shared by the commands that take a while."""
    command = click.option("-q", "--quiet", is_flag=True,
                           help="No progress and no 'wrote ...' messages (notes and errors still print).")(command)
    return click.option("--progress", type=click.Choice(["auto", "always", "never"]), default="auto",
                        show_default=True,
                        help="Progress on stderr: auto = only on an interactive terminal outside CI.")(command)
