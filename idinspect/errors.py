"""The one exception type the CLI turns into a one-line message and exit status 2."""

from __future__ import annotations


class IdinspectError(Exception):
    """Bad input or an unsupported model: the message names what and how to fix it.

    The CLI prints ``str(error)`` on one line and exits with status 2 (no traceback unless
    ``--debug``).
    """

    exit_code = 2


class UnsupportedLayerError(IdinspectError):
    """A layer carries a feature (flag) that the mathematics here does not model."""
