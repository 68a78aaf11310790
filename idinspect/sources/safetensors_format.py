"""What idinspect needs of the safetensors format beyond ``safetensors.safe_open``: the dtype codes
and the header layout (the streaming writer composes headers; export copies tensor bytes by span).

    [8 bytes: n, little-endian u64][n bytes: JSON header, space-padded][data]
    header = {"__metadata__": {str: str}, name: {"dtype": code, "shape": [...], "data_offsets": [a, b]}, ...}

``data_offsets`` are relative to the first data byte, 8 + n.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

#: dtype codes in the order of the format's Dtype enum (ascending alignment).
DTYPE_CODES: dict[torch.dtype, str] = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.float8_e5m2: "F8_E5M2",
    torch.float8_e4m3fn: "F8_E4M3", torch.int16: "I16", torch.uint16: "U16", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int32: "I32", torch.uint32: "U32", torch.float32: "F32",
    torch.float64: "F64", torch.int64: "I64", torch.uint64: "U64",
}
#: The inverse: the torch dtype of each code idinspect reads.
DTYPES_BY_CODE: dict[str, torch.dtype] = {code: dtype for dtype, code in DTYPE_CODES.items()}


class HeaderError(ValueError):
    """A header that is not valid safetensors (the message says what is wrong)."""


def header_length(first8: bytes) -> int:
    """n, the JSON header's length, from the file's first 8 bytes."""
    if len(first8) != 8:
        raise HeaderError(f"{len(first8)} bytes, too small to be a safetensors file")
    return struct.unpack("<Q", first8)[0]


def tensor_entries(header: dict, data_start: int, file_size: int | None = None
                   ) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """name -> (dtype code, shape, first byte, end byte in the file) of every tensor of a parsed header.

    ``data_start`` is 8 + n; with ``file_size`` every span must end inside the file. HeaderError
    for a header that is not safetensors.
    """
    out = {}
    try:
        for name, v in header.items():
            if name == "__metadata__":
                continue
            a, b = (data_start + int(o) for o in v["data_offsets"])
            if not data_start <= a <= b or (file_size is not None and b > file_size):
                raise HeaderError(f"tensor {name} data_offsets out of the file")
            out[name] = (str(v["dtype"]), tuple(int(s) for s in v["shape"]), a, b)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise exc if isinstance(exc, HeaderError) else HeaderError(str(exc)) from None
    return out


def read_header(path: str | Path) -> tuple[dict, int]:
    """(the JSON header, byte offset of the first data byte) of the local safetensors file ``path``.

    OSError if it cannot be read, HeaderError (a ValueError) if it is not safetensors.
    """
    with open(path, "rb") as f:
        n = header_length(f.read(8))
        try:
            return json.loads(f.read(n)), 8 + n
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HeaderError(f"header is not JSON ({exc})") from None


def tensor_spans(path: str | Path) -> dict[str, tuple[int, int]]:
    """name -> (first byte, end byte) in the file of every tensor of the local safetensors file ``path``."""
    header, base = read_header(path)
    return {name: (a, b) for name, (_, _, a, b) in tensor_entries(header, base).items()}


__all__ = ["DTYPES_BY_CODE", "DTYPE_CODES", "HeaderError", "header_length", "read_header", "tensor_entries",
           "tensor_spans"]
