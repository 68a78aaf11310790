"""Text a checkpoint controls (tensor and folder names, config strings) made safe for a terminal.

A tensor named ``"\\x1b]52;c;...\\x07"`` would otherwise write the user's clipboard (OSC 52), one
with ``"\\x1b[2J"`` clear the screen, one with OSC 8 make a link. :func:`visible` replaces every
C0 and C1 control character (ESC, BEL, CR, DEL, CSI, ...) and the Unicode line/paragraph
separators and bidirectional overrides by a visible ``\\xNN`` / ``\\uNNNN`` escape; newlines stay
only where the caller allows them. :func:`visible_tree` does the same through a JSON-like value.
Machine output (JSON) needs none of this: the JSON encoder escapes control characters itself.
"""

from __future__ import annotations

import re
from typing import Any

#: C0 controls but \\n, DEL, C1 controls, line/paragraph separators, bidi embeddings/overrides/isolates.
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_NO_NEWLINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: Any, newlines: bool = False) -> str:
    """``str(text)`` with control characters shown as escapes (``\\x1b``), never interpreted."""
    s = str(text)
    return (_UNSAFE if newlines else _UNSAFE_NO_NEWLINE).sub(_escape, s)


def visible_tree(value: Any) -> Any:
    """A copy of a JSON-like value with every string (keys too) passed through :func:`visible`."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible(k) if isinstance(k, str) else k: visible_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [visible_tree(v) for v in value]
    return value


__all__ = ["visible", "visible_tree"]
