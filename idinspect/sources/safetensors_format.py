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


def read_header(path: str | Path) -> tuple[dict, int]:
    """(the JSON header, byte offset of the first data byte) of safetensors file ``path``.

    For files ``safe_open`` has already validated; OSError or ValueError otherwise.
    """
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def tensor_spans(path: str | Path) -> dict[str, tuple[int, int]]:
    """name -> (first byte, end byte) in the file of every tensor of safetensors file ``path``."""
    header, base = read_header(path)
    return {k: (base + int(v["data_offsets"][0]), base + int(v["data_offsets"][1]))
            for k, v in header.items() if k != "__metadata__"}


__all__ = ["DTYPES_BY_CODE", "DTYPE_CODES", "read_header", "tensor_spans"]
