"""Progress on stderr: only on an interactive terminal, never in CI, with --quiet or --format json."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from idinspect.model import load
from idinspect.progress import (
    ProgressReporter,
    current_hub_tqdm,
    should_show,
    silence_library_progress,
)
from tests.support.cli import run_cli


def tty(buf: io.StringIO | None = None) -> Console:
    return Console(file=buf or io.StringIO(), force_terminal=True, force_interactive=True, width=100)


def pipe(buf: io.StringIO | None = None) -> Console:
    return Console(file=buf or io.StringIO(), force_terminal=False, force_interactive=False, width=100)


@pytest.mark.parametrize("ci", ["", "true"])
def test_auto_shows_only_on_an_interactive_console_outside_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    assert should_show("auto", tty()) is (ci == "")
    assert should_show("auto", pipe()) is False
    assert should_show("always", pipe()) is True
    assert should_show("never", tty()) is False


def test_dumb_terminal_is_not_interactive(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "dumb")
    assert should_show("auto", Console(file=io.StringIO(), force_terminal=True)) is False


def test_disabled_reporter_writes_nothing_and_offers_no_hub_bar(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    buf = io.StringIO()
    with ProgressReporter("auto", console=pipe(buf)) as bars:
        with bars.stage("opening"):
            pass
        bars.on_layer(0, 2)
        assert current_hub_tqdm() is None
    assert buf.getvalue() == ""


def test_interactive_reporter_draws_layers_and_hub_bars_then_clears(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    buf = io.StringIO()
    with ProgressReporter("auto", console=tty(buf)) as bars:
        cls = current_hub_tqdm()
        assert cls is not None
        files = list(cls(iter(["config.json", "model.safetensors"]), desc="Fetching 2 files", total=2))
        assert files == ["config.json", "model.safetensors"]
        byte_bar = cls(desc="Downloading bytes", total=0, unit="B")
        byte_bar.total = 3_000_000
        byte_bar.update(3_000_000)
        with bars.stage("opening [bold]org/x[/]"):
            for i in range(3):
                bars.on_layer(i, 3)
        tasks = {t.description: t for t in bars._progress.tasks}
        assert tasks["layers"].completed == 3 and tasks["layers"].total == 3
        assert tasks["Fetching 2 files"].completed == 2
        assert tasks["Downloading bytes (MB)"].completed == 3.0
    assert current_hub_tqdm() is None
    out = buf.getvalue()
    assert "layers" in out and "Fetching 2 files" in out
    assert "\x1b[2K" in out  # transient: the lines are erased at the end


def test_shard_bar_follows_layers_of_a_sharded_checkpoint(tiny_dir, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    path = tiny_dir("llama-gqa", max_shard_size="20KB")
    with load(str(path)) as model, ProgressReporter("always", console=tty()) as bars:
        shards = model.reader.shard_files
        assert len(shards) > 2
        bars.track_model(model)
        task = next(t for t in bars._progress.tasks if t.description.startswith("shards"))
        assert task.total == len(shards)
        for i in range(model.num_layers):
            bars.on_layer(i, model.num_layers)
        task = next(t for t in bars._progress.tasks if t.description.startswith("shards"))
        layer_shards = {model.reader.file_of(k) for i in range(model.num_layers) for k in model.adapter.attention_keys(i)}
        assert task.completed == len(layer_shards)


def test_library_bars_are_silenced():
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as tf_logging

    silence_library_progress()
    assert are_progress_bars_disabled()
    assert not tf_logging.is_progress_bar_enabled()


@pytest.mark.parametrize("args", [(), ("--progress", "never"), ("--format", "json", "--progress", "always"),
                                  ("--quiet", "--progress", "always")])
def test_cli_stderr_stays_clean_when_not_a_terminal(tiny_dir, args, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    res = run_cli(tiny_dir("llama-gqa"), *args)
    assert res.code == 0, res.stderr
    assert res.stderr == ""


def test_progress_labels_show_control_characters_as_escapes(monkeypatch):
    """A hub file or shard named with ESC / BEL reaches the progress line only as visible text."""
    monkeypatch.delenv("CI", raising=False)
    buf = io.StringIO()
    with ProgressReporter("always", console=tty(buf)) as bars:
        with bars.stage("opening evil\x1b]52;c;ZXZpbA==\x07[bold]x[/]"):
            bars._progress.refresh()
        cls = current_hub_tqdm()
        list(cls(iter(["a"]), desc="model-\x1b[2J.safetensors", total=1))
        bars._progress.refresh()
    out = buf.getvalue()
    assert "\x07" not in out and "\x1b]52" not in out and "\x1b[2J" not in out
    assert "\\x1b]52;c;ZXZpbA==\\x07[bold]x[/]" in out and "model-\\x1b[2J.safetensors" in out
