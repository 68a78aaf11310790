"""The streaming shard writer writes what safetensors.torch.save_file writes, deterministically, and
patches reserved metadata slots in place without changing the header's length."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from idinspect.exporting.shard_writer import (
    ShardWriter,
    Slot,
    TensorSpec,
    patch_slots,
    write_safetensors,
)


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


def test_slots_are_patched_in_place_and_the_file_stays_valid(tmp_path):
    """A slot after non-ASCII and escaped characters: found, patched, header length unchanged."""
    t = _tensors()
    info = 'src "ü\\\\n" then {"err":' + "null".ljust(24) + '}'
    start = info.index("null")
    meta = {"a": "ä\t\"x\"", "format": "pt", "info": info}
    path = tmp_path / "s.safetensors"
    with ShardWriter(path, {n: TensorSpec(v.dtype, tuple(v.shape)) for n, v in t.items()}, meta,
                     {"err": Slot("info", start, 24)}) as writer:
        for name in writer.order:
            writer.write(name, t[name])
    before = path.read_bytes()
    patch_slots(path, writer.slots, {"err": "0.00123".ljust(24)})
    after = path.read_bytes()
    assert len(after) == len(before) and after[:8] == before[:8]
    with safe_open(str(path), framework="pt") as h:
        got = h.metadata()
        assert all(torch.equal(h.get_tensor(k), v) for k, v in t.items())
    assert got["info"] == info.replace("null".ljust(24), "0.00123".ljust(24)) and got["a"] == meta["a"]
    assert json.loads(got["info"][got["info"].index("{"):]) == {"err": 0.00123}


def test_slot_values_must_fit_exactly(tmp_path):
    meta = {"info": "[" + "null".ljust(8) + "]"}
    with ShardWriter(tmp_path / "s", {"a": TensorSpec(torch.float32, (1,))}, meta, {"v": Slot("info", 1, 8)}) as w:
        w.write("a", torch.zeros(1))
    for bad in ("1" * 9, "1", '"quoted"', "back\\sl ", "tab\there"):
        with pytest.raises(ValueError, match="slot v"):
            patch_slots(tmp_path / "s", w.slots, {"v": bad})
    patch_slots(tmp_path / "s", w.slots, {"v": "12345678"})
    with safe_open(str(tmp_path / "s"), framework="pt") as h:
        assert h.metadata() == {"info": "[12345678]"}
    with pytest.raises(ValueError, match="no metadata entry"):
        ShardWriter(tmp_path / "t", {"a": TensorSpec(torch.float32, (1,))}, meta, {"v": Slot("other", 0, 4)})


def test_writeback_started_as_tensors_are_written_changes_no_byte(tmp_path, monkeypatch):
    """Writeback is started every WRITEBACK_BYTES (here after every tensor): the file is still
    save_file's, and on Linux libc's sync_file_range is found (else the export's last fsync does all
    the writing, as before)."""
    import os
    import sys

    from idinspect.exporting import shard_writer

    monkeypatch.setattr(shard_writer, "WRITEBACK_BYTES", 1)
    t = _tensors()
    save_file(t, tmp_path / "ref.safetensors")
    write_safetensors(tmp_path / "ours.safetensors", t)
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()
    if sys.platform.startswith("linux"):
        assert shard_writer._sync_file_range() is not None
        fd = os.open(tmp_path / "ours.safetensors", os.O_RDWR)
        try:
            assert shard_writer._sync_file_range()(fd, 0, 1 << 20, 2) == 0       # accepted by the kernel
        finally:
            os.close(fd)
