"""The ``idinspect`` command: a click group whose default command is ``inspect``.

Exit status: 0 success, 1 findings/not-equivalent where a command says so, 2 bad input or error.
"""

from __future__ import annotations

import sys
import traceback

import click
from rich.console import Console
from rich.markup import escape

from .errors import IdinspectError

_DEBUG = {"on": False}


def _set_debug(ctx, param, value):
    if value:
        _DEBUG["on"] = True
    return value


debug_option = click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                             help="Show the full traceback on errors.")


class DefaultToInspect(click.Group):
    """Route ``idinspect MODEL ...`` to ``idinspect inspect MODEL ...``.

    Only a first argument that is not a command name goes to ``inspect``; ``--help`` and
    ``--version`` stay with the group.
    """

    def parse_args(self, ctx, args):
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["inspect", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "[OPTIONS] MODEL | COMMAND [ARGS]...")


@click.group(cls=DefaultToInspect, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit status: 0 success, 1 findings (audit) or not equivalent (verify), 2 error.")
@click.version_option(package_name="idinspect", prog_name="idinspect")
@debug_option
def cli() -> None:
    """Inspect transformer checkpoints for parameter identification.

    MODEL is a local checkpoint directory, a hub id org/name[@revision], or the cache snapshot folder.
    """


def _register() -> None:
    from .commands import register

    register(cli)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors with exit status 2 (``--debug`` for tracebacks)."""
    err = Console(stderr=True, highlight=False)
    try:
        code = cli.main(args=argv, prog_name="idinspect", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.Abort:
        err.print("Aborted.")
        code = 130
    except KeyboardInterrupt:
        err.print("Interrupted.")
        code = 130
    except IdinspectError as exc:
        if _DEBUG["on"]:
            traceback.print_exc()
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        code = exc.exit_code
    except Exception as exc:  # a bug: still one line unless --debug
        if _DEBUG["on"]:
            traceback.print_exc()
        err.print(f"[bold red]internal error:[/] {escape(type(exc).__name__ + ': ' + str(exc))} "
                  "(rerun with --debug for the traceback and report it)", soft_wrap=True)
        code = 2
    sys.exit(code if isinstance(code, int) else 0)
