"""The streaming shard writer writes what safetensors.torch.save_file writes, deterministically."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from idinspect.shard_writer import ShardWriter, TensorSpec, write_safetensors


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"b.weight": torch.randn(3, 5, generator=g), "a.x": torch.randn(7, generator=g).to(torch.bfloat16),
            "ids": torch.arange(5), "scalar": torch.tensor(3.0, dtype=torch.float64),
            "empty": torch.zeros(0, 4, dtype=torch.float16), "mask": torch.tensor([True, False]),
            "z.half": torch.randn(2, 2, generator=g).to(torch.float16)}


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])
def test_bytes_equal_save_file(metadata, tmp_path):
    t = _tensors()
    save_file(t, tmp_path / "ref.safetensors", metadata=metadata)
    write_safetensors(tmp_path / "ours.safetensors", t, metadata)
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()


def test_metadata_order_does_not_matter(tmp_path):
    """save_file's metadata order is random per process; ours is sorted."""
    t = _tensors()
    write_safetensors(tmp_path / "a", t, {"format": "pt", "idinspect": "{}", "z": "1"})
    write_safetensors(tmp_path / "b", t, {"z": "1", "idinspect": "{}", "format": "pt"})
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    back = load_file(tmp_path / "a")
    assert all(torch.equal(back[k], v) for k, v in t.items())


def test_streaming_checks_order_spec_and_completeness(tmp_path):
    specs = {"a": TensorSpec(torch.float32, (2,)), "b": TensorSpec(torch.float32, (3,))}
    writer = ShardWriter(tmp_path / "x", specs)
    assert writer.order == ["a", "b"]
    with pytest.raises(ValueError, match="expected a"):
        writer.write("b", torch.zeros(3))
    with pytest.raises(ValueError, match="header says"):
        writer.write("a", torch.zeros(2, dtype=torch.float64))
    writer.write("a", torch.zeros(2))
    with pytest.raises(ValueError, match="never written"):
        writer.close()
