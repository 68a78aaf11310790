"""The one exception type the CLI turns into a one-line message and exit status 2."""

from __future__ import annotations


class IdinspectError(Exception):
    """Bad input or an unsupported model: the message names what and how to fix it.

    The CLI prints ``str(error)`` on one line and exits with status 2 (no traceback unless
    ``--debug``).
    """

    exit_code = 2
    #: True for failures that may pass on retry (see :class:`TransientError`).
    transient = False


class TransientError(IdinspectError):
    """A failure that may pass on retry (the hub unreachable, HTTP 429/5xx, a network error): the
    input itself may be fine. ``idinspect survey`` retries these; every other IdinspectError is bad
    input and is not retried."""

    transient = True


class UnsupportedLayerError(IdinspectError):
    """A layer carries a feature (flag) that the mathematics here does not model."""


def first_line(exc: BaseException) -> str:
    """The first line of the error's text (HTTP errors put their details on the lines after)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def one_line(exc: BaseException) -> str:
    """The error's text on one line (multi-line messages joined), at most 200 characters."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    text = text or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
