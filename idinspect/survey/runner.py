"""Run a survey: skip what is done, estimate memory, hand the rest to a backend, stream rows to the outputs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import IdinspectError
from .memory import default_budget, estimate_model_bytes
from .output import JsonlSink, ParquetSink, read_jsonl, read_parquet, require_pyarrow
from .pool import BackendStats, LocalPool, Task
from .resume import current_revision, is_done, latest_rows
from .rows import SurveyOptions


@dataclass
class SurveyResult:
    """``rows``: the latest row of every source in the output (previous runs included);
    ``new``: rows written by this run; ``skipped``: sources already done at their revision."""

    rows: list[dict]
    new: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    stats: BackendStats = field(default_factory=BackendStats)
    #: This survey's sources, in order, without duplicates.
    sources: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[dict]:
        """The latest rows of this survey's sources that failed."""
        wanted = set(self.sources)
        return [row for row in self.rows if row.get("status") != "ok" and row.get("source") in wanted]


#: Largest list of models read by ``survey --from`` (bytes): a million hub ids.
MAX_SOURCES_BYTES = 64 << 20


def read_sources(path: str | os.PathLike) -> list[str]:
    """One source per line; blank lines and ``#`` comments ignored (a regular file of at most
    :data:`MAX_SOURCES_BYTES`; a FIFO or device is refused before any read)."""
    from ..sources.regular_file import read_regular

    p = Path(path)
    try:
        text = read_regular(p, limit=MAX_SOURCES_BYTES, fix="pass a text file with one model per line").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IdinspectError(f"{p}: cannot read the list of models ({type(exc).__name__}); pass a text file "
                             "with one model per line") from None
    return [s for line in text.splitlines() if (s := line.split("#", 1)[0].strip())]


def previous_rows(jsonl: str | None, parquet: str | None) -> list[dict]:
    """Rows already in the outputs (the JSONL journal if there is one, else the Parquet table)."""
    if jsonl and jsonl != "-" and Path(jsonl).exists():
        return read_jsonl(jsonl)
    if parquet and Path(parquet).exists():
        return read_parquet(parquet)
    return []


def run_survey(sources: Iterable[str], *, jsonl: str | None = None, parquet: str | None = None,
               backend=None, options: SurveyOptions | None = None, resume: bool = True,
               workers: int = 1, memory_budget: int | None = None, retries: int = 2,
               on_row: Callable[[dict], None] | None = None,
               on_skip: Callable[[str], None] | None = None) -> SurveyResult:
    """Survey ``sources`` into ``jsonl`` and/or ``parquet`` (neither: JSONL on stdout).

    ``backend``: an object with ``run(tasks, emit) -> BackendStats`` (default: :class:`LocalPool`
    of ``workers`` within ``memory_budget`` bytes, half the available memory by default).
    With ``resume``, sources with an ``ok`` row at their current revision are skipped (with
    ``options.fingerprint``, only those whose row has its fingerprint digest; with ``options.whole_model``,
    only those whose row has its whole-model columns).
    """
    opts = options or SurveyOptions()
    wanted = list(dict.fromkeys(s.strip() for s in sources if s and s.strip()))
    if parquet:
        require_pyarrow()
    before = latest_rows(previous_rows(jsonl, parquet) if resume else [])
    todo: list[str] = []
    skipped: list[str] = []
    for source in wanted:
        old = before.get(source)
        revision = (current_revision(source, token=opts.token, cache_dir=opts.cache_dir, offline=opts.offline)
                    if old is not None and old.get("status") == "ok" else None)
        missing = old is not None and ((opts.fingerprint and not old.get("fingerprint"))
                                       or (opts.whole_model and not old.get("whole_model_form")))
        if is_done(old, revision) and not missing:
            skipped.append(source)
            if on_skip is not None:
                on_skip(source)
        else:
            todo.append(source)
    budget = default_budget() if memory_budget is None else int(memory_budget)
    if backend is None:
        backend = LocalPool(workers, budget, retries=retries, options=opts)
    threads = max(1, (os.cpu_count() or 1) // max(1, getattr(backend, "workers", None) or 1))
    tasks = [Task(s, estimate_model_bytes(s, token=opts.token, cache_dir=opts.cache_dir, threads=threads))
             for s in todo]
    sinks = []
    if jsonl or not parquet:
        sinks.append(JsonlSink(jsonl or "-"))
    if parquet:
        sinks.append(ParquetSink(parquet, list(before.values())))
    new: list[dict] = []

    def emit(row: dict) -> None:
        for sink in sinks:
            sink.write(row)
        new.append(row)
        if on_row is not None:
            on_row(row)

    try:
        stats = backend.run(tasks, emit) if tasks else BackendStats()
    finally:
        for sink in sinks:
            sink.close()
    after = dict(before)
    for row in new:
        after.pop(row["source"], None)
        after[row["source"]] = row
    order = {s: i for i, s in enumerate(wanted)}     # this survey's sources in the order given, then older rows
    rows = sorted(after.values(), key=lambda r: order.get(r["source"], len(order)))
    return SurveyResult(rows=rows, new=new, skipped=skipped, stats=stats, sources=wanted)
