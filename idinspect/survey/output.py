"""Survey outputs that are never left corrupt.

JSONL (the journal): one row per line, each appended whole with one ``write`` on an ``O_APPEND``
descriptor, then flushed and fsynced; a line cut by a crash mid-write (no final newline) is
dropped when the file is read or reopened. Later lines for a source supersede earlier ones.

Parquet (``pip install 'idinspect[survey]'`` for pyarrow): one row per source (the latest),
rewritten whole under a temporary name beside the target and renamed over it after every finished
model, so a reader sees the previous complete table or the next one, never a partial file.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from ..errors import IdinspectError
from .resume import latest_rows
from .rows import FIELD_NAMES, ROW_FIELDS


def row_line(row: dict) -> str:
    """The row as one JSON line (fields in :data:`ROW_FIELDS` order, non-finite floats as null)."""
    ordered = {name: _finite(row.get(name)) for name in FIELD_NAMES}
    ordered.update({k: _finite(v) for k, v in row.items() if k not in ordered})
    return json.dumps(ordered, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every complete row of a JSONL survey (a final line without newline is a cut write: dropped)."""
    p = Path(path)
    if not p.exists():
        return []
    data = p.read_bytes()
    end = data.rfind(b"\n") + 1
    rows = []
    for number, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise IdinspectError(f"{p}:{number}: not a JSON line; is this a survey output? "
                                 "(write to a new file, or delete it)") from None
        if not isinstance(row, dict) or "source" not in row:
            raise IdinspectError(f"{p}:{number}: not a survey row (no 'source'); write to a new file")
        rows.append(row)
    return rows


class JsonlSink:
    """Append rows to a JSONL file (``-``: stdout, nothing to resume from)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._fd: int | None = None
        if self.path != "-":
            _repair_tail(Path(self.path))
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, row: dict) -> None:
        line = row_line(row).encode("utf-8")
        if self._fd is None:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            return
        written = os.write(self._fd, line)
        while written < len(line):  # a short write of a regular file: finish the same line
            written += os.write(self._fd, line[written:])
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _repair_tail(path: Path) -> None:
    """Cut a partial last line (a write interrupted by a crash) so the next row starts on its own line."""
    if not path.is_file():
        return
    size = path.stat().st_size
    if size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(max(0, size - 1))
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        data = fh.read()
        fh.truncate(data.rfind(b"\n") + 1)
        fh.flush()
        os.fsync(fh.fileno())


def require_pyarrow():
    """pyarrow and pyarrow.parquet, or a one-line error naming the extra to install."""
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise IdinspectError("Parquet output needs pyarrow: pip install 'idinspect[survey]' (or write --jsonl)") from None
    return pyarrow, pq


def arrow_schema():
    pa, _ = require_pyarrow()
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    return pa.schema([(name, types[kind]) for name, kind in ROW_FIELDS])


def read_parquet(path: str | os.PathLike) -> list[dict]:
    """The rows of a Parquet survey ([] if the file does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    _, pq = require_pyarrow()
    try:
        return pq.read_table(p).to_pylist()
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors have no common base worth naming
        raise IdinspectError(f"{p}: not a readable Parquet file ({type(exc).__name__}); write to a new file") from None


class ParquetSink:
    """Keep the latest row per source and rewrite the Parquet file after each one (temp + rename)."""

    def __init__(self, path: str | os.PathLike, rows: list[dict] | None = None):
        require_pyarrow()
        self.path = Path(path)
        self._rows = latest_rows(rows or [])

    def write(self, row: dict) -> None:
        self._rows.pop(row["source"], None)
        self._rows[row["source"]] = row
        self._flush()

    def _flush(self) -> None:
        pa, pq = require_pyarrow()
        schema = arrow_schema()
        table = pa.Table.from_pylist([{name: _finite(r.get(name)) for name in FIELD_NAMES} for r in self._rows.values()],
                                     schema=schema)
        from ..reports.atomic import write_atomic

        write_atomic(self.path, lambda fh: pq.write_table(table, fh))

    def close(self) -> None:
        if not self.path.exists():
            self._flush()
