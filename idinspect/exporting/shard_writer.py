"""A streaming, deterministic safetensors writer: the header first, then one tensor at a time.

The file is byte-for-byte what ``safetensors.torch.save_file`` writes (tensors ordered by dtype
alignment, then name; compact JSON header padded with spaces to 8 bytes), with two differences
that export needs: the header is computed from names, dtypes and shapes alone, so a shard of any
size is written while holding one tensor; and ``__metadata__`` keys are sorted, where save_file
emits them in a per-process random order (Rust HashMap), which would make exports differ.

Tensors copied bit for bit from another safetensors file (:meth:`ShardWriter.copy`) go from file
to file inside the kernel (``copy_file_range``, else ``sendfile``, else plain reads and writes):
the bytes never pass through this process's memory.

Slots: a value known only after the data is written (export's largest invariant error, over all
shards) gets a fixed-width stretch of one metadata string (:class:`Slot`), written first as a
placeholder and overwritten in place later (:func:`patch_slots`). The header's length never
changes, so the file stays valid safetensors throughout and no tensor moves.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import IdinspectError
from ..sources.safetensors_format import DTYPE_CODES

_RANK = {dtype: i for i, dtype in enumerate(DTYPE_CODES)}


@dataclass(frozen=True)
class Slot:
    """``width`` characters of ``metadata[key]`` from character ``start``, to be rewritten in place.

    The placeholder there, and every later value, must be ``width`` printable ASCII characters
    that JSON does not escape (no quote, backslash or control character), so they are the same
    bytes in the header as in the string.
    """

    key: str
    start: int
    width: int


@dataclass(frozen=True)
class TensorSpec:
    """What the header needs of a tensor before its data exists."""

    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.dtype.itemsize


def file_order(specs: dict[str, TensorSpec]) -> list[str]:
    """Names in data order: larger alignment first, then by name (safetensors' own rule)."""
    return sorted(specs, key=lambda n: (-_RANK[specs[n].dtype], n))


def header_bytes(specs: dict[str, TensorSpec], metadata: dict[str, str] | None) -> bytes:
    """8-byte little-endian length + the JSON header, space-padded to a multiple of 8."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    offset = 0
    for name in file_order(specs):
        spec = specs[name]
        header[name] = {"dtype": DTYPE_CODES[spec.dtype], "shape": list(spec.shape),
                        "data_offsets": [offset, offset + spec.nbytes]}
        offset += spec.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def slot_offset(metadata: dict[str, str], slot: Slot) -> int:
    """Byte offset in the file of ``slot``'s first character (header layout of :func:`header_bytes`).

    The header is ``{"__metadata__":{...sorted entries...},...}``; JSON escaping is per character,
    so the bytes before the slot are exactly the encoding of the metadata cut at the slot, minus
    the closing ``"}}`` that encoding adds.
    """
    keys = sorted(metadata)
    cut = {k: metadata[k] for k in keys[:keys.index(slot.key)]}
    cut[slot.key] = metadata[slot.key][:slot.start]
    text = json.dumps({"__metadata__": cut}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return 8 + len(text) - len(b'"}}')


def _check_slot_text(name: str, text: str, width: int) -> bytes:
    if len(text) != width or not all(" " <= c <= "~" and c not in '"\\' for c in text):
        raise ValueError(f"slot {name}: {text!r} is not {width} printable ASCII characters JSON leaves alone")
    return text.encode("ascii")


def sync_file(path: str | Path) -> None:
    """fsync a closed file: its data reaches the disk (flushing another file's pages meanwhile is fine)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def patch_slots(path: str | Path, slots: dict[str, tuple[int, int]], values: dict[str, str]) -> None:
    """Overwrite slots (name -> (byte offset, width), :attr:`ShardWriter.slots`) with ``values`` and fsync."""
    with open(path, "r+b") as f:
        for name, text in values.items():
            offset, width = slots[name]
            f.seek(offset)
            f.write(_check_slot_text(name, text, width))
        f.flush()
        os.fsync(f.fileno())


#: Errors meaning "this kernel copy is not available here" (other filesystem, platform, file type).
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF,
                   errno.ENOTSOCK, errno.EPERM}
_CHUNK = 16 << 20


def copy_range(src: int, dst: int, offset: int, count: int) -> None:
    """Append ``count`` bytes of file descriptor ``src`` from ``offset`` at ``dst``'s position.

    ``copy_file_range`` (page cache to page cache, or a reflink), else ``sendfile``, else 16 MiB
    reads and writes. OSError if ``src`` ends early.
    """
    done = 0
    for call in (_copy_file_range, _sendfile):
        try:
            while done < count:
                n = call(src, dst, offset + done, count - done)
                if n <= 0:
                    raise OSError(f"source ends {count - done} bytes early")
                done += n
            return
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
    while done < count:
        chunk = os.pread(src, min(_CHUNK, count - done), offset + done)
        if not chunk:
            raise OSError(f"source ends {count - done} bytes early")
        write_all(dst, memoryview(chunk))
        done += len(chunk)


def _copy_file_range(src: int, dst: int, offset: int, count: int) -> int:
    if not hasattr(os, "copy_file_range"):
        raise OSError(errno.ENOSYS, "no copy_file_range")
    return os.copy_file_range(src, dst, count, offset)


def _sendfile(src: int, dst: int, offset: int, count: int) -> int:
    if not hasattr(os, "sendfile") or sys.platform != "linux":     # elsewhere sendfile wants a socket
        raise OSError(errno.ENOSYS, "no file-to-file sendfile")
    return os.sendfile(dst, src, offset, count)


#: A shard's writeback is started every this many bytes (:func:`start_writeback`), so that the fsync
#: after its last tensor finds most of its pages on the disk already.
WRITEBACK_BYTES = 64 << 20


@functools.cache
def _sync_file_range():
    """libc's ``sync_file_range`` (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, count: int) -> None:
    """Start writing bytes [offset, offset + count) of ``fd`` to the disk without waiting for them
    (``sync_file_range(SYNC_FILE_RANGE_WRITE)``; nothing where the platform has no such call). A hint
    for speed only: durability is still the fsync's. The last shard's fsync was the one the export
    waited for (Llama-1B's 520 MB third shard: 0.29 s after its last tensor)."""
    fn = _sync_file_range()
    if fn is not None:
        fn(fd, offset, count, 2)          # SYNC_FILE_RANGE_WRITE; an error only leaves it to the fsync


def write_all(fd: int, data: memoryview) -> None:
    """os.write until every byte of ``data`` is written (writes may be short)."""
    while len(data):
        data = data[os.write(fd, data):]


class ShardWriter:
    """Write one safetensors file: create it, then :meth:`write` (or :meth:`copy`) each tensor in :attr:`order`.

    Data goes straight to disk; :meth:`close` checks every tensor was written, flushes and fsyncs
    (``sync=False``: no fsync; the caller makes the file durable, e.g. :func:`sync_file` in the
    background while the next file is written). ``slots`` (name -> :class:`Slot`) reserve
    metadata stretches for :func:`patch_slots`; their byte offsets and widths are in
    :attr:`slots` once the header is written.
    """

    def __init__(self, path: str | Path, specs: dict[str, TensorSpec], metadata: dict[str, str] | None = None,
                 slots: dict[str, Slot] | None = None, sync: bool = True):
        if sys.byteorder != "little":
            raise IdinspectError("safetensors is little-endian; writing on a big-endian machine is not supported")
        for name, spec in specs.items():
            if spec.dtype not in DTYPE_CODES:
                raise IdinspectError(f"tensor {name}: dtype {spec.dtype} cannot be stored in safetensors here")
        self.path = Path(path)
        self.sync = sync
        self.specs = dict(specs)
        self.order = file_order(self.specs)
        self._next = 0
        header = header_bytes(self.specs, metadata)
        self.slots: dict[str, tuple[int, int]] = {}
        for name, slot in (slots or {}).items():
            if not metadata or slot.key not in metadata:
                raise ValueError(f"slot {name}: no metadata entry {slot.key!r}")
            offset = slot_offset(metadata, slot)
            text = metadata[slot.key][slot.start:slot.start + slot.width]
            if header[offset:offset + slot.width] != _check_slot_text(name, text, slot.width):
                raise ValueError(f"slot {name}: not found at byte {offset} of the header")
            self.slots[name] = (offset, slot.width)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0),
                                       0o666)
        write_all(self._fd, memoryview(header))
        self._end = self._written_back = len(header)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Append ``tensor``'s bytes; it must be the next name in :attr:`order` with its spec."""
        spec = self._expect(name)
        if tensor.dtype != spec.dtype or tuple(tensor.shape) != spec.shape:
            raise ValueError(f"{self.path.name}: tensor {name} is {tensor.dtype} {tuple(tensor.shape)}, "
                             f"the header says {spec.dtype} {spec.shape}")
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        write_all(self._fd, memoryview(data.numpy()))
        self._advance(spec.nbytes)

    def copy(self, name: str, source: int, span: tuple[int, int]) -> None:
        """Append tensor ``name``'s bytes straight from file descriptor ``source`` (bytes span
        [first, end) of a safetensors file holding it with this writer's dtype and shape)."""
        spec = self._expect(name)
        if span[1] - span[0] != spec.nbytes:
            raise ValueError(f"{self.path.name}: tensor {name} spans {span[1] - span[0]} bytes in its source, "
                             f"the header says {spec.nbytes}")
        copy_range(source, self._fd, span[0], spec.nbytes)
        self._advance(spec.nbytes)

    def _advance(self, nbytes: int) -> None:
        """One more tensor written; writeback started every :data:`WRITEBACK_BYTES`."""
        self._next += 1
        self._end += nbytes
        if self._end - self._written_back >= WRITEBACK_BYTES:
            start_writeback(self._fd, self._written_back, self._end - self._written_back)
            self._written_back = self._end

    def _expect(self, name: str) -> TensorSpec:
        if self._fd is None or self._next >= len(self.order) or self.order[self._next] != name:
            expected = self.order[self._next] if self._next < len(self.order) else "nothing"
            raise ValueError(f"{self.path.name}: got tensor {name}, expected {expected}")
        return self.specs[name]

    def close(self) -> None:
        if self._fd is None:
            return
        missing = self.order[self._next:]
        fd, self._fd = self._fd, None
        try:
            if self.sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if missing:
            raise ValueError(f"{self.path.name}: {len(missing)} tensors never written, first {missing[0]}")

    def abort(self) -> None:
        """Close without the completeness check (the caller discards the file)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor],
                      metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` at once (a small file); same bytes as the streaming path."""
    specs = {n: TensorSpec(t.dtype, tuple(t.shape)) for n, t in tensors.items()}
    with ShardWriter(path, specs, metadata) as writer:
        for name in writer.order:
            writer.write(name, tensors[name])
