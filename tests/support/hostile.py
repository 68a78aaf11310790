"""Builders and checks shared by the hostile-input matrix (tests/test_hostile_*.py).

Every case is a folder built in a temporary directory from a tiny saved checkpoint
(:func:`case_dir`), then edited the way a broken download or a hostile author would edit it
(:func:`set_tensor`, :func:`edit_config`, :func:`write_json_text`, ...). :func:`run_case` runs the
real CLI entry point with the case folder as working directory and checks what every case must
hold: the exit status, no traceback, no "internal error", a one-line message naming the file or
tensor where it fails, the input's bytes unchanged and no stray output beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tests.support.cli import CliResult, run_cli

SINGLE = "model.safetensors"


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every regular file under ``root`` (links and special files by their kind only)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif not p.is_dir():
            out[rel] = "special"
    return out


def cache_snapshot(src: Path, repo: Path, commit: str) -> Path:
    """``src`` laid out as huggingface_hub's cache does: ``repo/snapshots/<commit>/NAME`` links to
    ``repo/blobs/<digest>``, the sha256 of the bytes for safetensors (LFS) files, the git blob sha1
    for the others. Returns the snapshot folder."""
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(Path(src).iterdir()):
        data = f.read_bytes()
        if f.suffix == ".safetensors":
            digest = hashlib.sha256(data).hexdigest()
        else:
            digest = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (snapshot / f.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    return snapshot


def case_dir(base: Path, tmp: Path, name: str = "model") -> Path:
    """A private copy of the saved checkpoint ``base`` at ``tmp/name``."""
    dst = tmp / name
    shutil.copytree(base, dst)
    return dst


def read_tensors(folder: Path, fname: str = SINGLE) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(folder / fname), framework="pt") as h:
        return {k: h.get_tensor(k) for k in h.keys()}, dict(h.metadata() or {})


def write_tensors(folder: Path, tensors: dict[str, torch.Tensor], metadata: dict | None = None,
                  fname: str = SINGLE) -> None:
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / fname), metadata=metadata or {"format": "pt"})


def set_tensor(folder: Path, name: str, edit) -> None:
    """Rewrite ``model.safetensors`` with ``edit(tensor)`` in place of tensor ``name``."""
    tensors, meta = read_tensors(folder)
    tensors[name] = edit(tensors[name].clone())
    write_tensors(folder, tensors, meta)


def rename_tensor(folder: Path, old: str, new: str) -> None:
    tensors, meta = read_tensors(folder)
    tensors[new] = tensors.pop(old)
    write_tensors(folder, tensors, meta)


def poke(value: float, at: tuple = (0, 0)):
    """An edit that sets one entry to ``value``."""
    def edit(t: torch.Tensor) -> torch.Tensor:
        t[at] = value
        return t
    return edit


def edit_config(folder: Path, **changes) -> None:
    """config.json with keys set (``None`` deletes a key)."""
    path = folder / "config.json"
    data = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    path.write_text(json.dumps(data, indent=2))


def write_text(path: Path, text: str | bytes) -> None:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def deep_json(levels: int = 100_000) -> str:
    """A JSON value nested ``levels`` lists deep (recursion bombs for naive parsers)."""
    return "[" * levels + "]" * levels


def raw_safetensors(path: Path, header: bytes | dict, data: bytes = b"") -> None:
    """A safetensors file with a hand-made header (lengths and offsets unchecked)."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def edit_header(path: Path, edit) -> None:
    """Rewrite a safetensors header in place with ``edit(header dict)``, padded to its old length
    (the data and offsets stay where they are)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n, "edited header is longer than the original"
    path.write_bytes(raw[:8] + text.ljust(n) + raw[8 + n:])


@dataclass
class Case:
    """The outcome of one CLI run over a case folder."""

    result: CliResult
    root: Path

    @property
    def code(self) -> int:
        return self.result.code

    @property
    def out(self) -> str:
        return self.result.stdout

    @property
    def err(self) -> str:
        return self.result.stderr


def run_case(root: Path, *args, code: int, names: tuple[str, ...] = (), protected: tuple[Path, ...] = (),
             expect: tuple[str, ...] = (), env: dict[str, str] | None = None, one_line: bool | None = None) -> Case:
    """Run ``idinspect ARGS`` in ``root`` and check the matrix's promises.

    ``code``: the expected exit status. ``names``: strings the message (stderr, else stdout) must
    contain (a file, a tensor). ``protected``: folders whose bytes must not change (default: every
    folder in ``root`` before the run). ``expect``: the entries of ``root`` that may be new after the
    run (an OUT, a report); anything else is stray output. ``one_line``: the error is one line
    (default: when ``code`` is 2).
    """
    root = Path(root)
    protected = protected or tuple(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    before = {p: tree_hashes(p) for p in protected}
    entries = set(os.listdir(root))
    with _cwd(root), _env(env or {}):
        result = run_cli(*[str(a) for a in args])
    both = result.stdout + result.stderr
    assert result.code == code, f"exit {result.code}, expected {code}:\n{both[-3000:]}"
    assert "Traceback" not in both, both[-3000:]
    assert "internal error" not in both, both[-3000:]
    message = result.stderr if result.stderr.strip() else result.stdout
    for name in names:
        assert name in message, f"{name!r} not named in:\n{message[-3000:]}"
    if one_line if one_line is not None else code == 2:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        assert len(lines) == 1, f"not one line:\n{result.stderr}"
    for p, hashes in before.items():
        assert tree_hashes(p) == hashes, f"{p} changed"
    new = set(os.listdir(root)) - entries
    assert new <= set(expect), f"stray output: {sorted(new - set(expect))}"
    return Case(result, root)


@contextlib.contextmanager
def _cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def _env(changes: dict[str, str]):
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def visible(text: str) -> bool:
    """True when ``text`` holds no raw control character other than newline (no ESC, BEL, CSI...)."""
    return not any((ord(c) < 32 and c not in "\n") or 0x7f <= ord(c) < 0xa0 for c in text)


@contextlib.contextmanager
def private_tmpdir():
    """A private, short ``TMPDIR`` for a child process, removed afterwards. pytest's own folders (deeper
    still under pytest-xdist) would push multiprocessing's fork-server socket past the Unix path limit,
    where the survey takes the spawn route instead (tested on purpose with a deep ``TMPDIR``)."""
    path = Path(tempfile.mkdtemp(prefix="idinspect-tmp-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
