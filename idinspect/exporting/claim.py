"""Where an export may write, and how OUT is claimed without ever clobbering what idinspect did not write.

- OUT is checked before any work: not ``.``/``..``, its parent a folder (made if missing), its
  temporary name within the file system's limit, and an existing OUT replaced only with ``--force``
  and only if idinspect wrote it (every shard carries the ``idinspect`` provenance entry) or it is
  an empty folder; anything else is refused, like git refusing to clobber untracked files.
- The work goes to ``.OUT.idinspect-tmp-PID-XXXXXXXX`` beside OUT, whose name and ``.idinspect-owner``
  file record the owning process (pid and start time): a later export to the same place removes
  temporary folders whose owner is gone (killed with SIGKILL, or a lost machine).
- The finished folder is published with an atomic no-replace rename (Linux ``renameat2`` with
  ``RENAME_NOREPLACE``; elsewhere ``os.rename`` after a last check): if anything appeared at OUT
  meanwhile (another export, a user's folder), it is left untouched and the export fails. With
  ``--force`` the old export is first moved aside, re-checked, then deleted after the rename.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
import socket
from pathlib import Path

from ..errors import IdinspectError
from ..sources.validate import os_reason

TEMP_MARK = ".idinspect-tmp-"
OLD_MARK = ".idinspect-old-"
OWNER_FILE = ".idinspect-owner"
PROVENANCE_KEY = "idinspect"
#: Longest file name most file systems allow (ext4, xfs, btrfs, APFS, NTFS).
NAME_MAX = 255
_RENAME_NOREPLACE = 1


def check_out(out: Path, force: bool) -> None:
    """Refuse an OUT that cannot or must not be written, before any work; see the module docstring."""
    name = out.name
    if str(out) in ("", ".", "..") or name in ("", ".", ".."):
        raise IdinspectError(f"OUT {str(out)!r} names an existing folder, not a new one; give the export a name "
                             "such as ./model-gauge-fixed")
    if len((f".{name}{TEMP_MARK}{os.getpid()}-00000000").encode()) > NAME_MAX:
        raise IdinspectError(f"{out}: the name is too long for its temporary name beside it "
                             f"({NAME_MAX} bytes at most, with ~{len(TEMP_MARK) + 20} for the marker); choose a shorter OUT")
    parent = out.parent
    for p in (parent, *parent.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise IdinspectError(f"{out}: {p} is a file, not a folder; choose OUT in a folder")
            break
    if out.exists() or out.is_symlink():
        if not force:
            raise IdinspectError(f"{out} already exists; choose another OUT or pass --force to replace it")
        refuse_foreign(out)


def refuse_foreign(out: Path) -> None:
    """Raise unless ``out`` is idinspect's own export or an empty folder (what --force may replace)."""
    why = foreign_reason(out)
    if why:
        raise IdinspectError(f"{out}: --force replaces only an export idinspect wrote or an empty folder, and {why}; "
                             "remove it yourself or choose another OUT")


def foreign_reason(out: Path) -> str | None:
    """None if ``out`` may be replaced, else why not (in words)."""
    if out.is_symlink():
        return "it is a symbolic link"
    if not out.is_dir():
        return "it is a file"
    try:
        entries = list(out.iterdir())
    except OSError as exc:
        return f"it cannot be read ({os_reason(exc)})"
    if not entries:
        return None
    shards = [p for p in entries if p.name.endswith(".safetensors")]
    if not (out / "config.json").is_file() or not shards:
        return "it is not a checkpoint folder"
    for shard in shards:
        if not _has_provenance(shard):
            return f"{shard.name} carries no idinspect provenance"
    return None


def _has_provenance(shard: Path) -> bool:
    try:
        with open(shard, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if not 2 <= n <= 100_000_000:
                return False
            header = json.loads(f.read(n))
        info = json.loads(header.get("__metadata__", {}).get(PROVENANCE_KEY, "null"))
    except (OSError, ValueError, AttributeError, RecursionError):
        return False
    return isinstance(info, dict) and info.get("tool") == "idinspect"


def make_temp(out: Path) -> Path:
    """Make OUT's parent if needed, remove stale temporary folders there, and create this process's
    ``.OUT.idinspect-tmp-PID-XXXXXXXX`` with its owner file."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IdinspectError(f"{out.parent}: cannot create OUT's folder ({os_reason(exc)})") from None
    clean_stale(out)
    for _ in range(100):
        tmp = out.parent / f".{out.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
            (tmp / OWNER_FILE).write_text(json.dumps(_owner()) + "\n", encoding="utf-8")
            return tmp
        except FileExistsError:
            continue
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise IdinspectError(f"{out.parent}: cannot create the export's temporary folder there "
                                 f"({os_reason(exc)}); choose OUT in a folder you can write") from None
        except BaseException:
            # SIGTERM/SIGHUP raise in the main thread (entry.py), possibly just after the folder was
            # made and before the caller holds it: nothing may be left behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    raise IdinspectError(f"{out.parent}: cannot create a temporary folder for the export")


def clean_stale(out: Path) -> list[Path]:
    """Remove ``.OUT.idinspect-tmp-*`` / ``.OUT.idinspect-old-*`` folders whose owner process is gone;
    returns what was removed. Folders of a live process, or of another machine, are kept."""
    removed = []
    try:
        candidates = [p for p in out.parent.iterdir()
                      if p.name.startswith(f".{out.name}{TEMP_MARK}") or p.name.startswith(f".{out.name}{OLD_MARK}")]
    except OSError:
        return removed
    for p in candidates:
        if p.is_dir() and not p.is_symlink() and not _owner_alive(p):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _owner() -> dict:
    pid = os.getpid()
    return {"tool": "idinspect", "pid": pid, "start": _start_time(pid), "host": socket.gethostname()}


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_alive(folder: Path) -> bool:
    try:
        owner = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
        pid, start, host = int(owner["pid"]), owner.get("start"), owner.get("host")
    except (OSError, ValueError, KeyError, TypeError):
        owner = None
    if owner is None:  # killed before the owner file was written: the pid is in the name
        tail = folder.name.rsplit(TEMP_MARK if TEMP_MARK in folder.name else OLD_MARK, 1)[-1]
        try:
            pid, start, host = int(tail.split("-")[0]), None, socket.gethostname()
        except ValueError:
            return True  # not ours to judge
    if host != socket.gethostname():
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return start is None or _start_time(pid) in (None, start)


def publish(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished ``tmp`` to ``out`` without replacing anything that appeared meanwhile;
    with ``force`` an existing idinspect export (or empty folder) is moved aside first, then deleted."""
    (tmp / OWNER_FILE).unlink(missing_ok=True)  # not part of the export; the folder name still records the pid
    old = None
    if force and (out.exists() or out.is_symlink()):
        refuse_foreign(out)
        old = out.parent / f".{out.name}{OLD_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.rename(out, old)
        except OSError as exc:
            raise IdinspectError(f"{out}: cannot move the old export aside ({os_reason(exc)})") from None
    try:
        rename_noreplace(tmp, out)
    except FileExistsError:
        raise IdinspectError(f"{out} appeared while exporting (another export or another program wrote it); it is "
                             "left untouched and nothing was written: choose another OUT, or remove it and rerun"
                             + (f" (the replaced export is kept at {old})" if old is not None else "")) from None
    except OSError as exc:
        raise IdinspectError(f"{out}: cannot publish the export there ({os_reason(exc)})") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def rename_noreplace(src: Path, dst: Path) -> None:
    """Atomically rename ``src`` to ``dst``; FileExistsError if ``dst`` exists (never replaced)."""
    libc = _libc()
    if libc is not None:
        res = libc.renameat2(-100, os.fsencode(src), -100, os.fsencode(dst), _RENAME_NOREPLACE)  # AT_FDCWD
        if res == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without the flag
            if err == errno.EEXIST:
                raise FileExistsError(err, os.strerror(err), str(dst))
            raise OSError(err, os.strerror(err), str(dst))
    if dst.exists() or dst.is_symlink():
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def _libc():
    if not hasattr(_libc, "handle"):
        handle = None
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            if hasattr(lib, "renameat2"):
                lib.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
                lib.renameat2.restype = ctypes.c_int
                handle = lib
        except OSError:
            handle = None
        _libc.handle = handle
    return _libc.handle


__all__ = ["check_out", "clean_stale", "foreign_reason", "make_temp", "publish", "rename_noreplace"]
