"""Baselines: record today's findings so that only new ones fail.

A finding's fingerprint is ``sha256(rule, model identity, tensor)``: no line numbers, no values,
so it survives re-running on other machines and small weight changes. The tensor is qualified by
head (``...#kind=qk#head=2``) for findings the analyzer makes per head of the same tensors. The file keeps a count per
fingerprint (two findings on one tensor are two entries' worth); ``--baseline`` suppresses at most
that many occurrences, so a second, new finding on the same tensor still shows.

File format (JSON, sorted, deterministic)::

    {"idinspect_baseline": 1, "findings": [{"fingerprint", "rule", "model", "tensor", "count"}]}
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import IdinspectError

FORMAT_VERSION = 1
_SALT = "idinspect-audit/v1"


class BaselineError(IdinspectError):
    """An unreadable or malformed baseline file (exit status 2)."""


def fingerprint(rule: str, model: str, tensor: str | None) -> str:
    """Stable hex digest of (rule, model identity, tensor); the tensor is '' for model-level rules."""
    text = "\x1f".join((_SALT, rule, model, tensor or ""))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Entry:
    fingerprint: str
    rule: str
    model: str
    tensor: str | None


class Baseline:
    """Fingerprint counts read from a file; :meth:`consume` marks one occurrence as known."""

    def __init__(self, counts: Counter, path: Path | None = None):
        self._left = Counter(counts)
        self.path = path

    @classmethod
    def read(cls, path: Path) -> "Baseline":
        try:
            from ..sources.regular_file import read_regular

            data = json.loads(read_regular(path, fix="pass a baseline JSON file").decode("utf-8"))
        except FileNotFoundError:
            raise BaselineError(f"{path}: baseline file does not exist; create it with --write-baseline {path}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BaselineError(f"{path}: not a readable baseline ({exc})") from None
        except RecursionError:
            raise BaselineError(f"{path}: not a readable baseline (JSON nested too deeply)") from None
        if not isinstance(data, dict) or data.get("idinspect_baseline") != FORMAT_VERSION:
            raise BaselineError(f"{path}: not an idinspect baseline (expected \"idinspect_baseline\": {FORMAT_VERSION})")
        findings = data.get("findings")
        if not isinstance(findings, list):
            raise BaselineError(f"{path}: \"findings\" must be a list")
        counts: Counter = Counter()
        for i, item in enumerate(findings):
            fp = item.get("fingerprint") if isinstance(item, dict) else None
            count = item.get("count", 1) if isinstance(item, dict) else None
            if not isinstance(fp, str) or not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise BaselineError(f"{path}: findings[{i}] needs a \"fingerprint\" string and a positive \"count\"")
            counts[fp] += count
        return cls(counts, Path(path))

    def consume(self, fp: str) -> bool:
        """True (and one occurrence fewer left) if ``fp`` is in the baseline."""
        if self._left[fp] > 0:
            self._left[fp] -= 1
            return True
        return False


def render(entries: Iterable[Entry]) -> str:
    """The baseline file's text for ``entries`` (duplicates become counts)."""
    counts: Counter = Counter()
    info: dict[str, Entry] = {}
    for e in entries:
        counts[e.fingerprint] += 1
        info[e.fingerprint] = e
    rows = [{"fingerprint": fp, "rule": info[fp].rule, "model": info[fp].model, "tensor": info[fp].tensor,
             "count": counts[fp]} for fp in counts]
    rows.sort(key=lambda r: (r["model"], r["rule"], r["tensor"] or "", r["fingerprint"]))
    return json.dumps({"idinspect_baseline": FORMAT_VERSION, "findings": rows}, indent=2) + "\n"


__all__ = ["Baseline", "BaselineError", "Entry", "fingerprint", "render"]
