"""``SafetensorsCheckpoint.viewed``: the stored bytes in place, the same tensor ``get`` reads, and a
one-line error where the file no longer holds them."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import save_file

from idinspect.errors import IdinspectError
from idinspect.sources.checkpoint import SafetensorsCheckpoint


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a.bf16": torch.randn(33, 7, generator=g).to(torch.bfloat16),
            "b.f32": torch.randn(5, 3, 2, generator=g),
            "c.f64": torch.randn(11, generator=g, dtype=torch.float64),
            "d.fp16": torch.randn(1, 9, generator=g).to(torch.float16),
            "e.i64": torch.arange(6).reshape(2, 3),
            "f.empty": torch.zeros(0, 4),
            "g.scalar": torch.tensor(2.5)}


def test_viewed_equals_get_bit_for_bit(tmp_path):
    tensors = _tensors()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    reader = SafetensorsCheckpoint(tmp_path)
    try:
        for name, t in tensors.items():
            view, read = reader.viewed(name), reader.get(name).clone()
            assert view.dtype == t.dtype and view.shape == t.shape
            assert torch.equal(view.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))
            assert torch.equal(view.reshape(-1).view(torch.uint8), read.reshape(-1).view(torch.uint8))
    finally:
        reader.close()


def test_viewing_a_tensor_the_file_no_longer_holds_names_it(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(_tensors(), str(path))
    reader = SafetensorsCheckpoint(tmp_path)
    try:
        os.truncate(path, os.path.getsize(path) - 8)     # shortened after its header was read
        with pytest.raises(IdinspectError, match=r"model\.safetensors: cannot read tensor .*re-download"):
            for name in reader.keys():
                reader.viewed(name)
    finally:
        reader.close()
