"""transformers' own messages, held back while idinspect uses it on the user's behalf."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No config warnings (e.g. generation token ids outside a tiny vocabulary) and no loading bars
    from transformers inside the block: they say nothing about attention and would clutter
    idinspect's stderr. Errors still raise; the previous settings come back on exit."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


__all__ = ["quiet_transformers"]
