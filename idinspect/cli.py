"""The ``idinspect`` command: a click group whose default command is ``inspect``.

Exit status: 0 success, 1 findings/not-equivalent where a command says so, 2 bad input or error.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import traceback

import click

from .errors import IdinspectError
from .textsafe import visible

from .commands.options import _DEBUG, debug_option, hub_options, progress_options  # noqa: F401 - the group's options


class DefaultToInspect(click.Group):
    """Route ``idinspect MODEL ...`` to ``idinspect inspect MODEL ...``.

    Only a first argument that is not a command name goes to ``inspect``; ``--help`` and
    ``--version`` stay with the group.
    """

    #: Group-level flags that may stand before MODEL (``idinspect --debug MODEL``).
    leading_flags = ("--debug",)

    def list_commands(self, ctx) -> list[str]:
        from .commands import COMMANDS

        return list(COMMANDS)

    def format_commands(self, ctx, formatter) -> None:
        """The command list from :data:`~idinspect.commands.SUMMARIES`, importing no command module."""
        from .commands import SUMMARIES

        rows = []
        for name in self.list_commands(ctx):
            summary = SUMMARIES.get(name)
            if summary is None:
                command = self.get_command(ctx, name)
                summary = command.get_short_help_str(limit=formatter.width) if command is not None else ""
            rows.append((name, summary))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx, cmd_name: str):
        from .commands import load_command

        return load_command(cmd_name)

    def parse_args(self, ctx, args):
        i = 0
        while i < len(args) and args[i] in self.leading_flags:
            i += 1
        if i < len(args) and not args[i].startswith("-") and args[i] not in self.list_commands(ctx):
            self._refuse_typo(args[i])
            args = [*args[:i], "inspect", *args[i:]]
        return super().parse_args(ctx, args)

    def _refuse_typo(self, word: str) -> None:
        """``idinspect exprot x``: a near-miss of a command name that is no path or hub id."""
        import difflib
        from pathlib import Path

        if "/" in word or ":" in word or Path(word).expanduser().exists():
            return
        close = difflib.get_close_matches(word, self.list_commands(None), n=1, cutoff=0.75)
        if close:
            raise IdinspectError(f"no command {word!r}; did you mean {close[0]!r}? "
                                   f"(to inspect a directory named {word!r}, write ./{word})")

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "[OPTIONS] MODEL | COMMAND [ARGS]...")


@click.group(cls=DefaultToInspect, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit status: 0 success, 1 findings (audit) or not equivalent (verify), 2 error.")
@click.version_option(package_name="idinspect", prog_name="idinspect")
@debug_option
def cli() -> None:
    """Inspect transformer checkpoints for parameter identification.

    MODEL is a local checkpoint directory (config.json + safetensors), a hub id org/name[@revision],
    a hub cache snapshot folder, a GGUF file (path/model.gguf, or org/name[@revision]:file.gguf on the
    hub), or pkg:PACKAGE[/SUBDIR] (a checkpoint inside an installed Python package).

    Common report options (see idinspect inspect --help): --heads (per-head spectra table),
    --html PATH, --json PATH, --format json, --prove (check the count on a small twin).
    """


def _usage_line(exc: click.UsageError) -> str:
    """click's three-line usage error as one line: the message, the usage, where help is."""
    message = exc.format_message().rstrip(".")
    ctx = exc.ctx
    if ctx is None:
        return message
    usage = " ".join(ctx.command.collect_usage_pieces(ctx))
    if isinstance(ctx.command, DefaultToInspect):
        usage = "[OPTIONS] MODEL | COMMAND [ARGS]..."
    return f"{message[:1].lower()}{message[1:]} (usage: {ctx.command_path} {usage}; see {ctx.command_path} --help)"


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors with exit status 2 (``--debug`` for tracebacks)."""
    err = _ErrorConsole()
    _DEBUG["on"] = False
    interrupted = False
    try:
        code = cli.main(args=argv, prog_name="idinspect", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except SystemExit as exc:
        from click.utils import PacifyFlushWrapper

        if not (isinstance(sys.stdout, PacifyFlushWrapper) or isinstance(exc.__context__, BrokenPipeError)):
            raise
        code = 0  # click's and rich's answer to a closed stdout (EPIPE) is exit 1; ``idinspect MODEL | head`` is fine
        _silence_stdout()
    except click.UsageError as exc:
        err.print(f"[bold red]error:[/] {_escape(visible(_usage_line(exc)))}", soft_wrap=True)
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.Abort as exc:  # click turns KeyboardInterrupt (and entry.Terminated) into Abort
        from .interrupts import interrupted_code, say_interrupted

        cause = exc.__cause__ if isinstance(exc.__cause__, KeyboardInterrupt) else KeyboardInterrupt()
        say_interrupted(cause)
        code, interrupted = interrupted_code(cause), True
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (entry.Terminated): cleanups have run
        from .interrupts import interrupted_code, say_interrupted

        say_interrupted(exc)
        code, interrupted = interrupted_code(exc), True
    except BrokenPipeError:  # ``idinspect MODEL | head``: the reader has what it wanted
        _silence_stdout()
        code = 0
    except IdinspectError as exc:
        if _DEBUG["on"]:
            traceback.print_exc()
        err.print(f"[bold red]error:[/] {_escape(visible(_one_line(str(exc))))}", soft_wrap=True)
        code = exc.exit_code
    except OSError as exc:  # the file system said no: name the path and the reason, never "internal error"
        from .sources.validate import os_reason

        if _DEBUG["on"]:
            traceback.print_exc()
        where = f"{exc.filename}: " if exc.filename else ""
        err.print(f"[bold red]error:[/] {_escape(visible(where + os_reason(exc)))}", soft_wrap=True)
        code = 2
    except Exception as exc:  # a bug: still one line unless --debug
        if _DEBUG["on"]:
            traceback.print_exc()
        err.print(f"[bold red]internal error:[/] {_escape(visible(_one_line(type(exc).__name__ + ': ' + str(exc))))} "
                  "(rerun with --debug for the traceback and report it)", soft_wrap=True)
        code = 2
    if not interrupted:
        _stop_warm_ups()
    sys.exit(code if isinstance(code, int) else 0)


def _stop_warm_ups() -> None:
    """Hub warm-ups the command started and never took (it failed first) are stopped before it returns
    (not after an interrupt: the process is ending, and a stuck request must not hold it)."""
    warm = sys.modules.get("idinspect.sources.remote_warm")
    if warm is not None:
        warm.abandon()


def _one_line(text: str) -> str:
    """An exception's message on one line: a library's multi-line message (transformers' config
    validation) joined at its line breaks, never shown as a literal ``\\x0a``."""
    return re.sub(r"\s*\n\s*", " ", text.strip())


class _ErrorConsole:
    """rich's stderr console, imported only when there is something to print (~60 ms of import)."""

    def print(self, markup: str, **kwargs) -> None:
        from rich.console import Console

        Console(stderr=True, highlight=False).print(markup, **kwargs)


def _escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def run() -> None:
    """Process entry point (the console script, ``python -m idinspect``): :func:`main`, then a fast exit.

    Finalising the interpreter once torch and transformers are imported takes ~0.25-0.3 s of every
    run (freeing modules and objects one by one) and does nothing a finished command needs: its
    outputs are complete, closed and renamed by then. So, as mypy does, logging and the standard
    streams are flushed and the process ends with ``os._exit``. ``IDINSPECT_NO_FAST_EXIT=1`` keeps
    the normal exit (for coverage or atexit-based tooling).
    """
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if os.environ.get("IDINSPECT_NO_FAST_EXIT", "").strip() not in ("", "0"):
        sys.exit(code)
    from .interrupts import finish_before_fast_exit

    finish_before_fast_exit()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``idinspect ... | head``): nothing left to deliver
            _silence_stdout()
    os._exit(code)
