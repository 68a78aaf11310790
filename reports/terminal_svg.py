"""The terminal report as a standalone SVG picture (for documentation and sharing).

rich's own SVG template loads Fira Code from a CDN; this one uses local monospace fonts only,
so the picture has no external reference.
"""

from __future__ import annotations

import re

from rich._export_format import CONSOLE_SVG_FORMAT
from rich.console import Console

from .terminal import LayersMode, render_report

_FONTS = '"DejaVu Sans Mono", "Menlo", "Consolas", "Liberation Mono", monospace'

#: rich's template without the @font-face rules (their url()s point at cdnjs) and with local fonts.
OFFLINE_SVG_FORMAT = re.sub(r"\s*@font-face \{\{.*?\}\}", "", CONSOLE_SVG_FORMAT, flags=re.S).replace(
    "font-family: Fira Code, monospace;", f"font-family: {_FONTS};").replace(
    "<!-- Generated with Rich https://www.textualize.io -->", "<!-- Generated with Rich -->")


def terminal_svg(result: dict, *, width: int = 100, title: str = "idinspect", layers: LayersMode = "collapsed",
                 heads: bool = False) -> str:
    """Render the terminal report of ``result`` at ``width`` columns and return it as SVG text."""
    console = Console(record=True, width=width, force_terminal=True, color_system="truecolor", file=_Sink())
    render_report(result, console, layers=layers, heads=heads)
    return console.export_svg(title=title, code_format=OFFLINE_SVG_FORMAT)


class _Sink:
    """A write-only text stream that keeps nothing (the recording is what we want)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False
