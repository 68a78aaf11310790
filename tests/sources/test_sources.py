"""Checkpoint sources: sharded, bf16/fp16, base-model and re-prefixed saves, old GPT-2 buffers,
live ``PreTrainedModel`` objects, and lazy one-layer-at-a-time reads.

Each layout is proven the same way as the adapters: the reference attention over what idinspect
read equals the Hugging Face module's own output (float64, relative error <= 1e-10)."""

from __future__ import annotations

import json
import re
import shutil
import weakref
from pathlib import Path

import pytest
import torch
import transformers as tf
from safetensors import safe_open
from safetensors.torch import save_file

import idinspect
from idinspect.forms import reference_attention
from idinspect.sources.checkpoint import SafetensorsCheckpoint
from tests.support import tiny

TOL = 1e-10


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _prove(hf, model: idinspect.Model, dtype: torch.dtype | None = None) -> None:
    """Reference attention over every layer read by idinspect == the HF module (float64)."""
    torch.manual_seed(1)
    ids = torch.randint(0, tiny.vocab(hf), (2, 7))
    records = tiny.capture_attention(hf, ids)
    assert len(records) == model.num_layers
    for i, (x, y, x_kv) in enumerate(records):
        layer = model.layer(i)
        if dtype is not None:
            assert layer.dtype == dtype, f"layer {i} read as {layer.dtype}, stored {dtype}"
        err = _rel(reference_attention(layer.to(torch.float64), x, x_kv=x_kv), y)
        assert err <= TOL, f"layer {i}: {err:.2e}"


def _all_tensors(directory: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            out.update({k: h.get_tensor(k) for k in h.keys()})
    return out


def _assert_same_layers(a: idinspect.Model, b: idinspect.Model) -> None:
    assert a.num_layers == b.num_layers
    for la, lb in zip(a.layers(), b.layers()):
        ta, tb = la.tensors(), lb.tensors()
        assert sorted(ta) == sorted(tb)
        for role in ta:
            assert torch.equal(ta[role], tb[role]), f"layer {la.index} {role}"


# sharded ----------------------------------------------------------------------------------------

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


# dtypes -----------------------------------------------------------------------------------------

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


# prefixes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant, container", [("bert-base-model", "encoder.layer.0."),
                                                ("gpt2-base-model", "h.0."), ("llama-base-model", "layers.0.")])
def test_base_model_saves_have_no_prefix(variant, container, tiny_dir):
    model = idinspect.load(tiny_dir(variant))
    assert model.adapter.prefix == ""
    assert any(k.startswith(container) for k in model.reader.keys())
    _prove(tiny.build(variant), model)


def test_real_minilm_is_a_base_model_save(minilm_dir):
    model = idinspect.load(minilm_dir)
    assert model.adapter.prefix == ""
    assert "encoder.layer.0.attention.self.query.weight" in model.reader
    with torch.device("meta"):
        hf = tf.AutoModel.from_config(model.hf_config)
    assert model.parameter_count() == sum(p.numel() for p in hf.parameters())
    assert model.reader.dtype("embeddings.position_ids") == torch.int64  # a buffer, not counted


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


# old GPT-2 buffers ------------------------------------------------------------------------------

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


# live models ------------------------------------------------------------------------------------

LIVE = ["bert", "roberta", "gpt2", "gpt2-base-model", "llama3-rope", "llama-bias", "mistral", "qwen2"]


@pytest.fixture
def no_disk_writes(monkeypatch, tmp_path):
    """Call it to make any save of a model or tensors fail; the working directory must stay empty."""
    def refuse(*args, **kwargs):
        raise AssertionError("idinspect wrote to disk")

    def guard() -> None:
        import safetensors.torch

        monkeypatch.setattr(safetensors.torch, "save_file", refuse)
        monkeypatch.setattr(safetensors.torch, "save", refuse)
        monkeypatch.setattr(torch, "save", refuse)
        monkeypatch.setattr(tf.PreTrainedModel, "save_pretrained", refuse)
        monkeypatch.chdir(tmp_path)

    yield guard
    assert list(tmp_path.iterdir()) == []


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


def test_live_model_proof_in_bf16_and_train_mode(no_disk_writes):
    hf = tiny.build("qwen2").to(torch.bfloat16).train()
    no_disk_writes()
    model = idinspect.load(hf)                    # reads the bf16 parameters in place
    layer = model.layer(0)
    assert layer.dtype == torch.bfloat16 and not layer.W_Q.requires_grad
    # HF's float64 model on the same bf16 values (a fresh one: `.to(bfloat16)` also rounded the live
    # model's RoPE inv_freq buffer, which from_pretrained keeps in float32)
    ref = tiny.build("qwen2")
    ref.load_state_dict({k: v.to(torch.float64) for k, v in hf.state_dict().items()})
    _prove(ref, model, dtype=torch.bfloat16)


def test_live_model_with_meta_weights_is_refused():
    with torch.device("meta"):
        hf = tf.LlamaForCausalLM(tiny.VARIANTS["llama-gqa"][0]())
    model = idinspect.load(hf)  # headers (shapes) are fine
    with pytest.raises(idinspect.IdinspectError, match="meta device"):
        model.layer(0)


@pytest.mark.parametrize("thing", [{"a": torch.zeros(1)}, 3, torch.nn.Linear(2, 2)])
def test_non_models_are_refused(thing):
    with pytest.raises(idinspect.IdinspectError, match="cannot inspect"):
        idinspect.load(thing)


def test_live_model_of_an_unsupported_type_lists_the_supported():
    hf = tf.MambaForCausalLM(tf.MambaConfig(hidden_size=16, num_hidden_layers=1, vocab_size=64, state_size=4))
    from idinspect.adapters import supported_model_types

    supported = re.escape(", ".join(supported_model_types()))
    with pytest.raises(idinspect.IdinspectError, match=f"'mamba' is not supported; supported: {supported}$"):
        idinspect.load(hf)


# laziness ---------------------------------------------------------------------------------------

def _deep_llama(tmp_path: Path, layers: int) -> tuple[Path, int]:
    cfg = tiny.VARIANTS["llama-gqa"][0]()
    cfg.num_hidden_layers = layers
    torch.manual_seed(0)
    hf = tf.LlamaForCausalLM(cfg).to(torch.float64)
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    return tmp_path, layers


class _Tracker:
    """Wraps a reader's ``get``: which names were read, and how many read tensors' memory is alive.

    Each tensor handed out is backed by a numpy array the tracker holds a weak reference to; views
    (the canonical per-head tensors are views) keep that array alive, so ``alive()`` counts memory,
    not Python wrappers.
    """

    def __init__(self, reader):
        self.names: list[str] = []
        self._refs: list[weakref.ref] = []
        self.peak = 0
        self._get = reader.get
        reader.get = self.get

    def alive(self) -> int:
        return sum(r() is not None for r in self._refs)

    def get(self, name):
        array = self._get(name).numpy().copy()
        self.names.append(name)
        self._refs.append(weakref.ref(array))
        self.peak = max(self.peak, self.alive())
        return torch.from_numpy(array)


def test_opening_reads_headers_only(tiny_dir, monkeypatch):
    reads = []
    original = SafetensorsCheckpoint.get
    monkeypatch.setattr(SafetensorsCheckpoint, "get", lambda self, name: reads.append(name) or original(self, name))
    model = idinspect.load(tiny_dir("llama-gqa", max_shard_size="20KB"))
    model.parameter_count()
    model.summary()
    assert reads == []
    model.layer(1)
    assert sorted(reads) == sorted(model.adapter.attention_keys(1))


def test_layers_are_read_one_at_a_time(tmp_path):
    directory, depth = _deep_llama(tmp_path, 6)
    model = idinspect.load(directory)
    tracker = _Tracker(model.reader)
    per_layer = len(model.adapter.attention_keys(0))
    norms = []
    for layer in model.layers():
        norms.append(float(layer.to(torch.float64).W_Q.norm()))
        del layer
    assert len(norms) == depth
    attention = [k for i in range(depth) for k in model.adapter.attention_keys(i)]
    assert sorted(tracker.names) == sorted(attention)     # nothing but attention, each tensor once
    assert tracker.peak == per_layer                      # never more than one layer alive
    assert tracker.alive() == 0


def test_inspection_never_instantiates_the_model(tiny_dir, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a transformers model was instantiated")

    monkeypatch.setattr(tf.PreTrainedModel, "__init__", refuse)
    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(refuse))
    for variant in ("bert", "gpt2", "llama3-rope", "mistral", "qwen2"):
        model = idinspect.load(tiny_dir(variant))
        assert idinspect.inspect(model)["model"]["layers"] == model.num_layers
        assert len(list(model.layers())) == model.num_layers


def test_inspection_memory_does_not_grow_with_depth(tmp_path):
    """The whole report (counts, spectra, findings) holds at most about one layer's tensors."""
    directory, depth = _deep_llama(tmp_path, 6)
    model = idinspect.load(directory)
    tracker = _Tracker(model.reader)
    report = idinspect.inspect(model)
    assert report["model"]["layers"] == depth
    per_layer = len(model.adapter.attention_keys(0))
    assert set(tracker.names) == {k for i in range(depth) for k in model.adapter.attention_keys(i)}
    assert tracker.peak <= 2 * per_layer < depth * per_layer
    assert tracker.alive() == 0


def test_the_reader_reads_every_dtype_the_writer_writes(tmp_path):
    """One dtype table for both directions: each safetensors code the export writer knows comes back
    from the checkpoint reader with its dtype, shape and bits, and the file safetensors itself wrote
    reads the same."""
    from idinspect.exporting.shard_writer import write_safetensors
    from idinspect.sources.safetensors_format import DTYPE_CODES

    tensors = {f"t.{code}": torch.arange(6, dtype=torch.uint8).view(2, 3).to(dtype)
               for dtype, code in DTYPE_CODES.items()}
    write_safetensors(tmp_path / "model.safetensors", tensors)
    reader = SafetensorsCheckpoint(tmp_path)
    try:
        assert reader.keys() == sorted(tensors)
        for name, t in tensors.items():
            got = reader.get(name)
            assert reader.dtype(name) == got.dtype == t.dtype and reader.shape(name) == (2, 3)
            assert torch.equal(got.view(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))
    finally:
        reader.close()
