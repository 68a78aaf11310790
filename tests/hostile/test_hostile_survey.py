"""Hostile matrix: ``idinspect survey`` with hostile lists of models and models that hang or run away.

Each case runs the real command in its own process (``python -m idinspect``, as a user would: the
process's exit is part of what is checked) with ``TMPDIR`` pointed at a private folder, and checks
the exit status, no traceback, the failure recorded in the model's row, and that nothing is left
behind: no ``pymp-*`` folder of multiprocessing, no stray file beside the inputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hostile import case_dir, private_tmpdir, tree_hashes
from tests.support.hub_server import Fault, LocalHub, served_files

REPO_ROOT = Path(__file__).resolve().parents[2]


def survey(tmp_path: Path, *args, env=None, timeout: float = 120, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    """``idinspect survey ARGS`` in ``tmp_path`` (cwd), TMPDIR private (``tmpdir``, else a short one of
    :func:`private_tmpdir`); asserts no traceback and an empty TMPDIR."""
    with contextlib.ExitStack() as stack:
        if tmpdir is None:
            tmpdir = stack.enter_context(private_tmpdir())
        tmpdir.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(REPO_ROOT), **(env or {})}
        r = subprocess.run([sys.executable, "-m", "idinspect", "survey", *map(str, args)], cwd=tmp_path, env=full_env,
                           capture_output=True, text=True, timeout=timeout)
        both = r.stdout + r.stderr
        assert "Traceback" not in both and "internal error" not in both, both[-3000:]
        left = sorted(p.name for p in tmpdir.iterdir())
        assert not left, f"left behind in TMPDIR: {left}"
    return r


@pytest.fixture
def short_tmpdir():
    with private_tmpdir() as path:
        yield path


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def ok_model(tiny_dir, tmp_path) -> Path:
    return case_dir(tiny_dir("bert"), tmp_path, "ok")


LISTS = {
    # case: (list bytes, expected exit, expected rows)
    "crlf": (b"ok\r\nok\r\n", 0, 1),
    "nul-bytes": (b"ok\n\x00\x00bad\x00\n", 1, 2),
    "newline-in-path": (b"ok\n'a\nb'\n", 1, 3),
    "ten-thousand-lines": (b"# comment\n" * 9_999 + b"ok\n", 0, 1),
    "comments-only": (b"# nothing\n\n", 2, 0),
    "bom": (b"\xef\xbb\xbfok\n", 1, 1),
    "not-utf8": (b"ok\n\xff\xfe\n", 2, 0),
    "control-chars": (b"ok\nx\x1b]52;c;QUFB\x07\n", 1, 2),
}


def test_deep_tmpdir_takes_the_spawn_route(ok_model, tmp_path):
    """A ``TMPDIR`` too deep for the fork server's Unix socket ("AF_UNIX path too long") is no error: the
    workers are spawned instead, the survey runs, and nothing is left behind."""
    from idinspect.survey.pool import forkserver_socket_fits

    deep = tmp_path / ("d" * 90)
    assert not forkserver_socket_fits(str(deep))
    (tmp_path / "list.txt").write_text("ok\nok\n")
    r = survey(tmp_path, "--from", "list.txt", "--jsonl", "out.jsonl", "--workers", "2", tmpdir=deep)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [row["status"] for row in rows(tmp_path / "out.jsonl")] == ["ok"]


@pytest.mark.parametrize("case", list(LISTS))
def test_hostile_list_of_models(ok_model, tmp_path, case):
    text, code, n = LISTS[case]
    (tmp_path / "list.txt").write_bytes(text)
    before = tree_hashes(ok_model)
    r = survey(tmp_path, "--from", "list.txt", "--jsonl", "out.jsonl", "--workers", "2")
    assert r.returncode == code, r.stderr[-2000:]
    if code == 2:
        assert len([line for line in r.stderr.splitlines() if line.strip()]) <= 2, r.stderr
        assert "list.txt" in r.stderr or "no models" in r.stderr
    else:
        got = rows(tmp_path / "out.jsonl")
        assert len(got) == n
        assert all(row["status"] == "ok" or row["error"] for row in got)
        assert "\x1b" not in r.stderr and "\x07" not in r.stderr
    assert tree_hashes(ok_model) == before
    assert {p.name for p in tmp_path.iterdir()} <= {"ok", "list.txt", "out.jsonl", "tmpdir"}


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo", "/dev/null", "."])
def test_from_special_file_is_refused_at_once(tmp_path, special):
    if special == "fifo":
        os.mkfifo(tmp_path / "fifo")
    r = survey(tmp_path, "--from", special, timeout=60)
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and (special in lines[0] or "Directory" in lines[0] or "directory" in lines[0]), r.stderr


def test_fifo_config_is_a_row_not_a_hang(ok_model, tmp_path):
    bad = case_dir(ok_model, tmp_path, "fifo-model")
    (bad / "config.json").unlink()
    os.mkfifo(bad / "config.json")
    r = survey(tmp_path, "ok", "fifo-model", "--jsonl", "out.jsonl", "--timeout", "30")
    assert r.returncode == 1
    by = {row["source"]: row for row in rows(tmp_path / "out.jsonl")}
    assert by["ok"]["status"] == "ok"
    assert "FIFO" in by["fifo-model"]["error"] and by["fifo-model"]["error_kind"] == "bad-input"


@pytest.fixture
def hub(tiny_dir):
    with LocalHub() as server:
        server.add_repo("org/slow", served_files(tiny_dir("bert")))
        yield server


def test_hanging_model_times_out_in_its_row(hub, ok_model, tmp_path):
    """A hub that drips its answer (deadline set far away) holds one model; --timeout ends it, the
    row says so, the other model is surveyed, the failure is not retried, nothing is left behind."""
    hub.faults.append(Fault("drip", host="hub", path="/api/models/", delay=0.2, times=100))
    env = {"HF_ENDPOINT": hub.endpoint, "IDINSPECT_HUB_DEADLINE": "600", "HF_HUB_CACHE": str(tmp_path / "cache")}
    r = survey(tmp_path, "org/slow", "ok", "--jsonl", "out.jsonl", "--timeout", "2", "--workers", "2", env=env)
    assert r.returncode == 1, r.stderr
    by = {row["source"]: row for row in rows(tmp_path / "out.jsonl")}
    assert by["ok"]["status"] == "ok"
    assert by["org/slow"]["status"] == "failed" and "timed out after 2 s" in by["org/slow"]["error"]
    assert by["org/slow"]["error_kind"] == "bad-input"
    assert sum(1 for e in hub.log if e["path"].startswith("/api/models/")) <= 2   # not retried


@pytest.mark.parametrize("limit,code", [("1K", 1), ("64K", 1), ("4G", 0)])
def test_model_memory_limit_recorded_in_the_row(ok_model, tmp_path, limit, code):
    r = survey(tmp_path, "ok", "--jsonl", "out.jsonl", "--model-memory", limit)
    assert r.returncode == code, r.stderr
    (row,) = rows(tmp_path / "out.jsonl")
    if code:
        assert "memory limit" in row["error"] and "--model-memory" in row["error"]
        assert row["error_kind"] == "bad-input"
    else:
        assert row["status"] == "ok"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_bad_timeout_is_a_usage_error(ok_model, tmp_path, value):
    r = survey(tmp_path, "ok", "--timeout", value)
    assert r.returncode == 2 and "--timeout" in r.stderr


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def test_killed_worker_is_retried_and_leaves_nothing(hub, tmp_path, short_tmpdir):
    """A worker killed mid-model (as the kernel's OOM killer would): the model is retried and
    surveyed; multiprocessing's folders are removed when the command ends."""
    import signal
    import time

    hub.faults.append(Fault("drip", host="hub", path="/api/models/", delay=0.2, times=1))
    tmpdir = short_tmpdir
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(REPO_ROOT), "HF_ENDPOINT": hub.endpoint,
           "IDINSPECT_HUB_DEADLINE": "600", "HF_HUB_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "idinspect", "survey", "org/slow", "--jsonl", "out.jsonl"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(e["path"].startswith("/api/models/") for e in hub.log) and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = [p for p in _descendants(proc.pid) if p not in (proc.pid,)]
    grandchildren = [p for p in workers if p not in set(_direct_children(proc.pid))]
    for pid in grandchildren or workers:
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, err[-3000:]
    assert proc.returncode == 0, err[-2000:]
    (row,) = rows(tmp_path / "out.jsonl")
    assert row["status"] == "ok"
    assert not list(tmpdir.iterdir()), sorted(p.name for p in tmpdir.iterdir())


def _direct_children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


SPECIAL = {"fifo": None, "dev-zero": "/dev/zero", "dev-urandom": "/dev/urandom"}


@pytest.mark.parametrize("command", [(), ("audit",), ("export", "model", "out"), ("verify", "model", "model")])
@pytest.mark.parametrize("special", list(SPECIAL))
@pytest.mark.parametrize("fname", ["config.json", "model.safetensors.index.json"])
def test_special_file_as_config_or_index(tiny_dir, tmp_path, command, special, fname):
    """config.json or the shard index a FIFO or a link to a device: refused at once by name, never a hang
    or an endless read (in-process, through the real CLI)."""
    from tests.support.hostile import run_case

    model = case_dir(tiny_dir("llama-gqa", max_shard_size="20KB"), tmp_path)
    (model / fname).unlink()
    if SPECIAL[special] is None:
        os.mkfifo(model / fname)
    else:
        os.symlink(SPECIAL[special], model / fname)
    args = command if command[:1] in (("export",), ("verify",)) else (*command, "model")
    if command == ("audit",):
        r = run_case(tmp_path, *args, code=2, one_line=False, env={"COLUMNS": "1000"})
        assert fname in r.out and "not a regular file" in r.out
        return
    run_case(tmp_path, *args, code=2, names=(fname, "not a regular file"))
