"""`export` and `verify` show progress on stderr when it is a terminal (a real pseudo-terminal here),
never when it is not, and take `--quiet` / `--progress` like `inspect`."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading

import pytest

from tests.support.cli import run_cli


def run_on_tty(*args: str) -> tuple[int, str, str]:
    """``python -m idinspect ARGS`` with stderr on a pseudo-terminal: (exit status, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "TERM")}
    env.update(TERM="xterm-256color", COLUMNS="120")
    proc = subprocess.Popen([sys.executable, "-m", "idinspect", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=600)
    reader.join(timeout=30)
    os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def exported(tiny_dir, tmp_path_factory):
    src = tiny_dir("llama-gqa")
    out = tmp_path_factory.mktemp("progress") / "out"
    code, stdout, tty = run_on_tty("export", src, out)
    return src, out, code, stdout, tty


def test_export_draws_progress_on_a_terminal(exported):
    _src, out, code, stdout, tty = exported
    assert code == 0, tty
    assert out.is_dir() and "exported" in stdout
    assert "gauge-fixing layers" in tty or "writing tensors" in tty or "exporting" in tty, tty
    assert "\x1b[" in tty  # drawn (and erased: transient)


def test_verify_draws_progress_on_a_terminal_and_quiet_silences_it(exported):
    src, out, *_ = exported
    code, stdout, tty = run_on_tty("verify", src, out, "--no-functional")
    assert code == 0, tty
    assert "equivalent" in stdout
    assert "invariants by layer" in tty or "verifying" in tty, tty
    code, stdout, tty = run_on_tty("verify", src, out, "--no-functional", "--quiet")
    assert code == 0 and "equivalent" in stdout
    assert "verifying" not in tty and "invariants by layer" not in tty, tty


def test_export_and_verify_keep_a_pipe_clean(exported, tmp_path):
    src, out, *_ = exported
    res = run_cli("export", src, tmp_path / "again", "--progress", "auto")
    assert res.code == 0 and res.stderr == "", res.stderr
    res = run_cli("verify", src, out, "--no-functional", "--progress", "never")
    assert res.code == 0 and res.stderr == "", res.stderr
    assert "--quiet" in run_cli("export", "--help").stdout and "--progress" in run_cli("verify", "--help").stdout
