"""A GGUF header checked against its file before anything trusts it (before ``GGUFReader`` runs).

:func:`check_header` walks the header as the GGUF specification lays it out (magic, version,
tensor and key-value counts, each key-value pair, each tensor's name, dimensions, type and offset)
with every count and length bounded by what the file can hold, so no claim is allocated or read
before it is known to fit:

- counts: each key-value pair needs at least 13 bytes, each tensor info 24, each array element its
  type's size; a count that the bytes left cannot hold is refused;
- strings at most :data:`MAX_STRING` bytes, arrays nested at most :data:`MAX_DEPTH` deep, the whole
  header at most :data:`MAX_HEADER` bytes;
- tensors: 1 to 4 dimensions, each positive, a known GGML type whose block divides the first
  dimension; ``general.alignment`` a power of two; every offset aligned, every tensor's data inside
  the file and no two tensors overlapping.

A big-endian GGUF (valid per the specification, written by llama.cpp's converter with
``--bigendian`` for s390x) is recognised by its byte-swapped version and refused by name.
``read(offset, n)`` supplies the bytes, so a remote file (:mod:`.remote_gguf`) is read in part:
only as far as the header goes, never past what its counts allow.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import IdinspectError
from ..textsafe import visible

MAX_STRING = 64 << 20
MAX_DEPTH = 8
MAX_HEADER = 512 << 20
MAX_DIMS = 4
#: Most elements in one metadata array (vocabularies of 262,144 tokens and 280,147 merges are the
#: largest in use): the gguf package parses arrays element by element (~20 us each), so 5 million
#: would take minutes.
MAX_ARRAY = 1 << 19
DEFAULT_ALIGNMENT = 32
#: Fixed-size GGUF value types: type -> (struct code, bytes).
_SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4), 6: ("f", 4), 7: ("?", 1),
            10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class Header:
    """What the walk found: where tensor data starts, the file's alignment and each tensor's bytes."""

    data_offset: int
    alignment: int
    tensors: dict[str, tuple[int, int]]   # name -> (first byte, end byte) in the file
    bytes_read: int = 0                   # bytes the walk read (a remote file: fetched)


#: First read of the header (bytes); each further read is twice the one before (a remote file's
#: header arrives in a few range requests, a local one in a few reads).
FIRST_READ = 1 << 20


class _Cursor:
    def __init__(self, read: Callable[[int, int], bytes], size: int, where: str):
        self.read, self.size, self.where, self.pos = read, size, where, 0
        self.buf, self.buf_start, self.chunk = b"", 0, FIRST_READ
        self.bytes_read = 0
        self.key = ""

    def fail(self, what: str) -> IdinspectError:
        at = f"in key {visible(self.key)[:80]}, " if self.key else ""
        return IdinspectError(f"{self.where}: not a readable GGUF file ({what}, {at}at byte {self.pos}); "
                              "re-download or convert it again")

    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise self.fail(f"needs {n} bytes where {self.left()} are left in the {self.size}-byte file")
        if self.pos + n > MAX_HEADER:
            raise self.fail(f"header longer than {MAX_HEADER} bytes")
        lo = self.pos - self.buf_start
        if lo < 0 or lo + n > len(self.buf):
            want = min(max(n, self.chunk), self.size - self.pos, MAX_HEADER - self.pos)
            self.buf, self.buf_start = self.read(self.pos, want), self.pos
            self.bytes_read += len(self.buf)
            self.chunk = min(self.chunk * 2, 64 << 20)
            lo = 0
            if len(self.buf) < n:
                raise self.fail("file ended early")
        self.pos += n
        return self.buf[lo:lo + n]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self, what: str) -> bytes:
        n = self.u64()
        if n > MAX_STRING or n > self.left():
            raise self.fail(f"{what} claims {n} bytes")
        return self.take(n)

    def value(self, kind: int, depth: int = 0):
        """One value; arrays are checked and skipped (None), scalars and strings returned."""
        if kind in _SCALARS:
            code, n = _SCALARS[kind]
            return struct.unpack("<" + code, self.take(n))[0]
        if kind == _STRING:
            return self.string("a string value")
        if kind != _ARRAY:
            raise self.fail(f"unknown value type {kind}")
        if depth >= MAX_DEPTH:
            raise self.fail(f"arrays nested more than {MAX_DEPTH} deep")
        item, count = self.u32(), self.u64()
        if count > MAX_ARRAY:
            raise self.fail(f"an array of {count} elements, more than the {MAX_ARRAY} idinspect reads")
        if item in _SCALARS:
            n = _SCALARS[item][1]
            if count > self.left() // n:
                raise self.fail(f"an array of {count} elements of {n} bytes in {self.left()} bytes")
            self.take(count * n) if count * n <= (1 << 20) else self._skip(count * n)
            return None
        least = 8 if item == _STRING else 12   # a string's length; a nested array's type and count
        if item not in (_STRING, _ARRAY):
            raise self.fail(f"an array of unknown value type {item}")
        if count > self.left() // least:
            raise self.fail(f"an array of {count} elements in {self.left()} bytes")
        for _ in range(count):
            self.value(item, depth + 1)
        return None

    def _skip(self, n: int) -> None:
        if n > self.left():
            raise self.fail(f"needs {n} bytes where {self.left()} are left")
        if self.pos + n > MAX_HEADER:
            raise self.fail(f"header longer than {MAX_HEADER} bytes")
        self.pos += n


def check_header(read: Callable[[int, int], bytes], size: int, where: str) -> Header:
    """Walk and check the header of a ``size``-byte GGUF file (see the module); one-line errors naming ``where``."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    c = _Cursor(read, size, where)
    if size < 24 or c.take(4) != b"GGUF":
        c.pos = 0
        raise c.fail("no GGUF magic" if size >= 4 else f"only {size} bytes")
    version = c.u32()
    if version not in (2, 3):
        if version & 0xFFFF == 0 and (version >> 24) in (2, 3):
            raise IdinspectError(f"{where}: a big-endian GGUF (version {version >> 24}, byte-swapped); idinspect "
                                 "reads little-endian GGUF only: convert it with llama.cpp's gguf tools "
                                 "(gguf_convert_endian.py FILE little)")
        raise c.fail(f"version {version}, expected 2 or 3")
    n_tensors, n_kv = c.u64(), c.u64()
    if n_kv > c.left() // 13 or n_tensors > c.left() // 24:
        raise c.fail(f"{n_tensors} tensors and {n_kv} key-value pairs claimed in a {size}-byte file")
    alignment = DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        c.key = ""
        key = c.string("a key")
        c.key = key.decode("utf-8", "replace")
        kind = c.u32()
        value = c.value(kind)
        if key == b"general.alignment":
            if kind not in (4, 10) or not value or value & (value - 1) or value > (1 << 20):
                raise c.fail(f"general.alignment is {visible(repr(value))[:40]}, not a power of two")
            alignment = value
    c.key = ""
    infos = []
    for _ in range(n_tensors):
        name = c.string("a tensor name").decode("utf-8", "replace")
        n_dims = c.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise c.fail(f"tensor {visible(name)} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        dims = [c.u64() for _ in range(n_dims)]
        kind, offset = c.u32(), c.u64()
        infos.append((name, dims, kind, offset))
    data_offset = -(-c.pos // alignment) * alignment
    tensors: dict[str, tuple[int, int]] = {}
    for name, dims, kind, offset in infos:
        shown = visible(name)
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise IdinspectError(f"{where}: tensor {shown} has GGML type {kind}, which is unknown; "
                                 "convert the file again") from None
        if any(d <= 0 for d in dims) or dims[0] % block:
            raise IdinspectError(f"{where}: tensor {shown} has dimensions {dims}, not positive multiples of its "
                                 f"type's block of {block}; the file is corrupt")
        elements = 1
        for d in dims:
            elements *= d
        nbytes = elements // block * type_size
        if offset % alignment:
            raise IdinspectError(f"{where}: tensor {shown} starts at data offset {offset}, not a multiple of "
                                 f"general.alignment {alignment}; the file is corrupt")
        start = data_offset + offset
        if start + nbytes > size:
            raise IdinspectError(f"{where}: tensor {shown} needs bytes {start}-{start + nbytes - 1} but the file has "
                                 f"{size}; it is truncated: re-download it")
        if name in tensors:
            raise IdinspectError(f"{where}: tensor {shown} is listed twice; the file is corrupt")
        tensors[name] = (start, start + nbytes)
    spans = sorted((a, b, n) for n, (a, b) in tensors.items())
    for (a1, b1, n1), (a2, b2, n2) in zip(spans, spans[1:]):
        if a2 < b1:
            raise IdinspectError(f"{where}: the data of tensors {visible(n1)} and {visible(n2)} overlap (bytes "
                                 f"{a2}-{min(b1, b2) - 1}); the file is corrupt")
    return Header(data_offset, alignment, tensors, c.bytes_read)


def check_file(path) -> Header:
    """:func:`check_header` of a local file (read with ``pread``, nothing mapped or allocated ahead)."""
    import os

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return check_header(lambda offset, n: os.pread(fd, n, offset), size, str(path))
    finally:
        os.close(fd)


__all__ = ["Header", "MAX_DEPTH", "MAX_HEADER", "MAX_STRING", "check_file", "check_header"]
