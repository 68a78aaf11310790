"""Checkpoint sources: sharded, bf16/fp16, base-model and re-prefixed saves, old GPT-2 buffers,
live ``PreTrainedModel`` objects, and lazy one-layer-at-a-time reads.

Each layout is proven the same way as the adapters: the reference attention over what idinspect
read equals the Hugging Face module's own output (float64, relative error <= 1e-10)."""

from __future__ import annotations

import re
import weakref
from pathlib import Path

import pytest
import torch
import transformers as tf
from safetensors import safe_open

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


# dtypes -----------------------------------------------------------------------------------------


# prefixes ---------------------------------------------------------------------------------------


def test_real_minilm_is_a_base_model_save(minilm_dir):
    model = idinspect.load(minilm_dir)
    assert model.adapter.prefix == ""
    assert "encoder.layer.0.attention.self.query.weight" in model.reader
    with torch.device("meta"):
        hf = tf.AutoModel.from_config(model.hf_config)
    assert model.parameter_count() == sum(p.numel() for p in hf.parameters())
    assert model.reader.dtype("embeddings.position_ids") == torch.int64  # a buffer, not counted


# old GPT-2 buffers ------------------------------------------------------------------------------


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


def test_live_model_of_a_refused_type_says_why():
    hf = tf.MambaForCausalLM(tf.MambaConfig(hidden_size=16, num_hidden_layers=1, vocab_size=64, state_size=4))
    from idinspect.adapters import ADAPTERS

    reason = re.escape(ADAPTERS.refused["mamba"])
    with pytest.raises(idinspect.IdinspectError, match=f"^MambaForCausalLM: model_type 'mamba' is refused: {reason}$"):
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

    # the checkpoints are saved first (tiny_dir builds a model the first time a worker asks for one)
    folders = {variant: tiny_dir(variant) for variant in ("bert", "gpt2", "llama3-rope", "mistral", "qwen2")}
    monkeypatch.setattr(tf.PreTrainedModel, "__init__", refuse)
    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(refuse))
    for variant, folder in folders.items():
        model = idinspect.load(folder)
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
