"""Write an inspection result in every form the command line asked for.

The text report goes to stdout (``fmt="text"``) or the JSON contract does (``fmt="json"``);
``--json PATH`` and ``--html PATH`` files are written beside it, atomically. Messages about the
written files go to stderr (not with ``quiet``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from ..errors import IdinspectError

if TYPE_CHECKING:
    from rich.console import Console

    from .terminal import LayersMode


def emit(result: dict, *, fmt: Literal["text", "json"] = "text", json_path: str | Path | None = None,
         html_path: str | Path | None = None, heads: bool = False, layers: LayersMode = "collapsed",
         quiet: bool = False, console: Console | None = None) -> None:
    """Write files first (so a broken pipe on stdout cannot lose them), then stdout.

    A file that cannot be written is an :class:`IdinspectError` (exit 2) naming the path.
    """
    from .json_report import dumps, write_json

    written = []
    for kind, path, writer in (("JSON", json_path, write_json), ("HTML", html_path, _write_html)):
        if path is None:
            continue
        try:
            writer(result, path)
        except OSError as exc:
            raise IdinspectError(f"cannot write the {kind} report to {path}: {exc.strerror or exc}; "
                                 "check that the folder exists and is writable") from None
        written.append((kind, path))
    if fmt == "json":
        click.echo(dumps(result), nl=False)
    else:
        from .terminal import render_report

        render_report(result, console, layers=layers, heads=heads)
    if written and not quiet:
        from rich.console import Console
        from rich.markup import escape

        err = Console(stderr=True, highlight=False)
        for kind, path in written:
            err.print(f"wrote the {kind} report to {escape(str(path))}", soft_wrap=True)


def _write_html(result: dict, path) -> None:
    from .html import write_html

    write_html(result, path)
