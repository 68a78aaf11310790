"""What each of ``verify``'s checks reports (:class:`Check`), and the progress callback it is told through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Check:
    """One comparison: ``passed`` None means skipped (``detail`` says why)."""

    name: str
    passed: bool | None
    error: float | None = None
    tolerance: float | None = None
    baseline: float | None = None
    detail: str = ""
    extra: dict = field(default_factory=dict)


#: progress(stage, done, total), as for export.
Progress = Callable[[str, int, int], None]


def no_progress(stage: str, done: int, total: int) -> None:
    return None


__all__ = ["Check", "Progress", "no_progress"]
