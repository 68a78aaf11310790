"""The per-variant contract of tests/sources/test_sources.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/sources/."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

import idinspect
from tests.sources.test_sources import (  # noqa: F401
    LIVE,
    _all_tensors,
    _assert_same_layers,
    _prove,
    no_disk_writes,
)
from tests.support import tiny


@pytest.mark.parametrize("variant", ["bert", "gpt2", "llama-gqa", "qwen2"])
def test_sharded_checkpoint_reads_and_proves(variant, tiny_dir):
    sharded = tiny_dir(variant, max_shard_size="20KB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2, shards
    assert not (sharded / "model.safetensors").exists()
    model = idinspect.load(sharded)
    assert model.reader.shard_files == shards
    assert {model.reader.file_of(k) for k in model.reader.keys()} == set(shards)
    _prove(tiny.build(variant), model)
    single = idinspect.load(tiny_dir(variant))
    _assert_same_layers(model, single)
    assert model.parameter_count() == single.parameter_count()
    assert model.summary() == {**single.summary(), "source": model.summary()["source"]}


@pytest.mark.parametrize("variant", ["bert", "gpt2", "llama-gqa", "llama3-rope", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_checkpoint_against_hf_on_the_same_weights(variant, dtype, tmp_path):
    hf = tiny.build(variant)
    tiny.save(hf, tmp_path, dtype=dtype)
    # HF's own model from the same half-precision file, upcast exactly to float64 on load (casting
    # the built model back instead would leave its RoPE inv_freq buffer rounded to half precision)
    hf = type(hf).from_pretrained(tmp_path, dtype=torch.float64, attn_implementation="sdpa").eval()
    assert hf.dtype == torch.float64
    model = idinspect.load(tmp_path)
    for name in model.adapter.attention_keys(0):
        assert model.reader.dtype(name) == dtype, name
    _prove(hf, model, dtype=dtype)
    for i in range(model.num_layers):             # bit-exact round trip in the stored dtype
        for name, t in model.adapter.write_layer(model.layer(i)).items():
            original = model.reader.get(name)
            assert t.dtype == dtype and torch.equal(t, original), name


@pytest.mark.parametrize("variant, container", [("bert-base-model", "encoder.layer.0."),
                                                ("gpt2-base-model", "h.0."), ("llama-base-model", "layers.0.")])
def test_base_model_saves_have_no_prefix(variant, container, tiny_dir):
    model = idinspect.load(tiny_dir(variant))
    assert model.adapter.prefix == ""
    assert any(k.startswith(container) for k in model.reader.keys())
    _prove(tiny.build(variant), model)


@pytest.mark.parametrize("variant, old", [("llama-gqa", "model."), ("gpt2", "transformer."), ("bert", "bert.")])
def test_unfamiliar_prefix_matches_on_the_part_after_the_container(variant, old, tiny_dir, tmp_path):
    """A multimodal-style save ('language_model.model.layers.0...') reads like the plain one."""
    src = tiny_dir(variant)
    tensors = {("language_model." + k if k.startswith(old) else k): v for k, v in _all_tensors(src).items()}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(src / "config.json", tmp_path / "config.json")
    model = idinspect.load(tmp_path)
    assert model.adapter.prefix == "language_model." + old
    _assert_same_layers(model, idinspect.load(src))


@pytest.mark.parametrize("variant, prefix", [("gpt2-base-model", ""), ("gpt2", "transformer.")])
def test_old_gpt2_mask_buffers_are_ignored(variant, prefix, tiny_dir, tmp_path):
    src = tiny_dir(variant)
    tensors = _all_tensors(src)
    n_pos = 64
    for i in range(2):  # what GPT-2 files from before transformers 4.x stored
        tensors[f"{prefix}h.{i}.attn.bias"] = torch.tril(torch.ones(n_pos, n_pos)).view(1, 1, n_pos, n_pos)
        tensors[f"{prefix}h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(src / "config.json", tmp_path / "config.json")
    old, clean = idinspect.load(tmp_path), idinspect.load(src)
    assert f"{prefix}h.0.attn.bias" in old.reader and f"{prefix}h.0.attn.bias" not in clean.reader
    hf = tiny.build(variant)
    assert old.parameter_count() == clean.parameter_count() == sum(p.numel() for p in hf.parameters())
    _assert_same_layers(old, clean)
    for layer in old.layers():
        assert not any(".attn.bias" in n or "masked_bias" in n for n in layer.tensor_names.values())
        assert torch.equal(layer.b_O, tensors[f"{prefix}h.{layer.index}.attn.c_proj.bias"])
    _prove(hf, old)


@pytest.mark.parametrize("variant", LIVE)
def test_live_model_reads_like_its_checkpoint(variant, tiny_dir, no_disk_writes):
    disk = idinspect.load(tiny_dir(variant))
    hf = tiny.build(variant)
    no_disk_writes()
    live = idinspect.load(hf)
    assert live.provenance.kind == "memory" and live.provenance.path is None
    assert live.reader.keys() == disk.reader.keys()            # tied tensors once, as saved
    assert live.parameter_count() == disk.parameter_count() == sum(p.numel() for p in hf.parameters())
    _assert_same_layers(live, disk)
    summary = idinspect.inspect(live)["model"]
    assert {k: v for k, v in summary.items() if k != "source"} == \
        {k: v for k, v in disk.summary().items() if k != "source"}
