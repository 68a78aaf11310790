"""Progress on stderr while idinspect works: hub download, shards, layers.

Shown only on an interactive terminal (``Console(stderr=True).is_interactive``), never when ``CI``
is set, with ``--quiet``, or with a machine format on stdout; ``--progress always|never``
overrides the automatic choice. The bars are transient: nothing of them stays in the scrollback
or in a redirected log. The libraries' own bars (huggingface_hub's tqdm, transformers') are
silenced whatever the choice, so they never pollute CI logs.

Usage::

    with ProgressReporter(mode) as progress:
        with progress.stage(f"opening {source}"):
            model = load(source, ...)
        progress.track_model(model)
        result = inspect(model, on_layer=progress.on_layer)

:func:`current_hub_tqdm` is the tqdm class a ``snapshot_download`` call should pass as
``tqdm_class`` to feed the download bar (None when no progress is shown).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

ProgressMode = Literal["auto", "always", "never"]

_HUB_TQDM: contextvars.ContextVar[type | None] = contextvars.ContextVar("idinspect_hub_tqdm", default=None)


def silence_library_progress() -> None:
    """Turn off huggingface_hub's and transformers' own progress bars and info logging.

    Neither library is imported for this (an inspection may need neither): their environment
    switches are set for a later import, and a library already imported is told directly.
    """
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as tf_logging

        tf_logging.disable_progress_bar()
        tf_logging.set_verbosity_error()


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def should_show(mode: ProgressMode, console: Console) -> bool:
    """``always``/``never`` as given; ``auto``: an interactive console outside CI."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    return bool(console.is_interactive) and not _ci()


def current_hub_tqdm() -> type | None:
    """The tqdm class feeding the active reporter's download bar, or None."""
    return _HUB_TQDM.get()


class ProgressReporter:
    """Transient rich progress on stderr; every method is a no-op when progress is off."""

    def __init__(self, mode: ProgressMode = "auto", console: Console | None = None):
        if mode == "never" and console is None:   # nothing to draw: rich is not even imported
            self.console, self.enabled = None, False
        else:
            from rich.console import Console

            self.console = console or Console(stderr=True)
            self.enabled = should_show(mode, self.console)
        self._progress: Progress | None = None
        self._layer_task: TaskID | None = None
        self._shard_task: TaskID | None = None
        self._download: dict[str, TaskID] = {}
        self._shard_last_layer: dict[str, int] = {}
        self._shards_done: set[str] = set()
        self._token: contextvars.Token | None = None

    # lifecycle --------------------------------------------------------------------
    def __enter__(self) -> "ProgressReporter":
        if self.enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn)

            if self.console.is_terminal:
                self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                          MofNCompleteColumn(), TimeElapsedColumn(), console=self.console,
                                          transient=True, redirect_stdout=False, redirect_stderr=False)
            else:   # --progress always into a log or CI: plain lines (a live bar would draw nothing there)
                self._progress = PlainLines(self.console.file)
            self._progress.start()
            self._token = _HUB_TQDM.set(hub_tqdm_class(self))
        return self

    def __exit__(self, *exc) -> None:
        if self._token is not None:
            _HUB_TQDM.reset(self._token)
            self._token = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # stages -------------------------------------------------------------------------
    @contextlib.contextmanager
    def stage(self, description: str) -> Iterator[None]:
        """An indeterminate spinner line (e.g. resolving and downloading a hub snapshot)."""
        if self._progress is None:
            yield
            return
        task = self._progress.add_task(_plain(description), total=None)
        try:
            yield
        finally:
            self._progress.remove_task(task)

    # layers and shards ----------------------------------------------------------------
    def track_model(self, model) -> None:
        """Prepare the shard bar from ``model``'s layout (which shard holds each layer's tensors)."""
        if self._progress is None:
            return
        try:
            reader, adapter = model.reader, model.adapter
            files = list(getattr(reader, "shard_files", []) or [])
            for i in range(model.num_layers):
                for key in adapter.attention_keys(i):
                    fname = reader.file_of(key)
                    if fname is not None:
                        self._shard_last_layer[fname] = max(self._shard_last_layer.get(fname, -1), i)
        except Exception:  # noqa: BLE001 - progress must never break an inspection
            self._shard_last_layer.clear()
            return
        if len(files) > 1:
            self._shard_task = self._progress.add_task("shards", total=len(files))

    def on_layer(self, i: int, n: int) -> None:
        """The analyzer's callback: layer ``i`` (0-based) of ``n`` is done."""
        if self._progress is None:
            return
        if self._layer_task is None:
            self._layer_task = self._progress.add_task("layers", total=n)
        self._progress.update(self._layer_task, completed=min(i + 1, n), total=n)
        if self._shard_task is not None:
            self._shards_done |= {f for f, last in self._shard_last_layer.items() if last <= i}
            self._progress.update(self._shard_task, completed=len(self._shards_done),
                                  description=f"shards (reading {self._current_shard(i)})")

    def _current_shard(self, i: int) -> str:
        pending = sorted((last, f) for f, last in self._shard_last_layer.items() if last > i)
        return _plain(pending[0][1]) if pending else "done"

    # any counted step (export, verify) ------------------------------------------------------
    def step(self, name: str, description: str, done: int, total: int | None) -> None:
        """A bar ``description  done/total`` keyed by ``name`` (created on first use)."""
        self.download_update(name, description, done, total)

    def callback(self, labels: dict[str, str]):
        """A ``progress(stage, done, total)`` callable for :func:`idinspect.export` / :func:`idinspect.verify`,
        labelling each stage from ``labels``; None when progress is off (the callers then count nothing)."""
        if self._progress is None:
            return None
        return lambda stage, done, total: self.step(f"step-{stage}", labels.get(stage, stage), done, total)

    # hub download ------------------------------------------------------------------------
    def download_update(self, name: str, description: str, completed: float, total: float | None) -> None:
        """Called by :func:`hub_tqdm_class` bars: one rich line per hub bar."""
        if self._progress is None:
            return
        task = self._download.get(name)
        if task is None:
            task = self._download[name] = self._progress.add_task(_plain(description), total=total or None)
        self._progress.update(task, completed=completed, total=total or None, description=_plain(description))

    def download_bytes(self, name: str, description: str, done: float, total: float | None) -> None:
        """Byte counts, shown in MB so the M/N column stays readable."""
        self.download_update(name, f"{description} (MB)", round(done / 1e6, 1), round(total / 1e6, 1) if total else None)


#: Plain progress lines: at most one line per task every this many seconds (and one when it completes).
PLAIN_INTERVAL_S = 5.0


class PlainLines:
    """The part of rich's ``Progress`` the reporter uses, writing plain lines (``idinspect: layers 3/16
    (12 s)``) to a log instead of drawing bars: a line when a task starts, at most one per task every
    :data:`PLAIN_INTERVAL_S` seconds, and one when it completes."""

    def __init__(self, stream, interval: float = PLAIN_INTERVAL_S):
        import time

        self._stream, self._interval, self._clock = stream, interval, time.monotonic
        self._tasks: dict[int, dict] = {}
        self._next = 0
        self._start = self._clock()

    def start(self) -> None:
        self._start = self._clock()

    def stop(self) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **_) -> int:
        task, self._next = self._next, self._next + 1
        self._tasks[task] = {"description": description, "total": total, "completed": 0, "said": None, "done": False}
        self._say(task)
        return task

    def update(self, task: int, *, completed: float | None = None, total: float | None = None,
               description: str | None = None, **_) -> None:
        t = self._tasks.get(task)
        if t is None:
            return
        if completed is not None:
            t["completed"] = completed
        if total is not None:
            t["total"] = total
        if description is not None:
            t["description"] = description
        finished = t["total"] is not None and t["completed"] >= t["total"]
        if finished and not t["done"]:
            t["done"] = True
            self._say(task)
        elif not finished and self._clock() - t["said"] >= self._interval:
            self._say(task)

    def remove_task(self, task: int) -> None:
        self._tasks.pop(task, None)

    def _say(self, task: int) -> None:
        from rich.markup import render

        t = self._tasks[task]
        t["said"] = self._clock()
        count = f" {t['completed']:g}/{t['total']:g}" if t["total"] is not None else ""
        text = render(t["description"]).plain      # descriptions are escaped markup (see _plain)
        self._stream.write(f"idinspect: {text}{count} ({self._clock() - self._start:.0f} s)\n")
        self._stream.flush()


def _plain(text: str) -> str:
    """Progress descriptions are rich markup: escape them (hub file names are untrusted), and show
    control characters (a shard named with ESC or BEL) as visible escapes, never send them."""
    from rich.markup import escape

    from .textsafe import visible

    return escape(visible(text))


def hub_tqdm_class(reporter: ProgressReporter) -> type:
    """A tqdm subclass that draws nothing itself and forwards its counts to ``reporter``.

    huggingface_hub's ``snapshot_download(tqdm_class=...)`` uses it for the file count and the
    byte counts; anything tqdm-shaped calling ``update``/``__iter__`` works.
    """
    import itertools

    from tqdm.auto import tqdm as base

    serial = itertools.count()

    class ReporterTqdm(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)  # huggingface_hub's group name, unknown to tqdm
            kwargs.pop("log_level", None)
            kwargs["disable"] = True
            self._desc = kwargs.get("desc") or (args[1] if len(args) > 1 and isinstance(args[1], str) else None)
            self._unit = kwargs.get("unit", "it")
            super().__init__(*args, **kwargs)
            self._key = f"hub-{next(serial)}"  # not id(): a freed bar's id is reused
            self._count = float(kwargs.get("initial") or 0)
            self._report()

        def _report(self) -> None:
            label = self._desc or "downloading"
            total = getattr(self, "total", None)
            if self._unit == "B":
                reporter.download_bytes(self._key, label, self._count, total)
            else:
                reporter.download_update(self._key, label, self._count, total)

        def update(self, n=1):
            self._count += float(n or 0)
            self._report()
            return super().update(n)

        def refresh(self, *args, **kwargs):
            self._report()

        def set_description(self, desc=None, refresh=True):
            self._desc = desc
            self._report()

        def __iter__(self):
            for item in self.iterable:
                yield item
                self._count += 1
                self._report()

    return ReporterTqdm
