"""Nothing attention-like is ever dropped silently: a tensor the adapter does not read is refused by name,
from a folder and from a model in memory, in every output format; cross-attention blocks are counted."""

from __future__ import annotations

import json
import math

import pytest
import torch
from idinspect.adapters import gpt2 as gpt2_adapter
from safetensors.torch import load_file, save_file

import idinspect
from idinspect.errors import IdinspectError
from idinspect.sources.coverage import inventory, unread_attention_tensors
from tests.support import tiny
from tests.support.cli import run_cli

EXTRA = "bert.encoder.layer.1.attention.self.gate.weight"


def _with_extra_tensor(src, dst, name: str, shape: tuple[int, ...]):
    """A copy of checkpoint ``src`` with one more tensor ``name`` (N(0, 1) of ``shape``)."""
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    tensors = load_file(str(src / "model.safetensors"))
    tensors[name] = torch.randn(shape, dtype=torch.float64)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def test_every_supported_variant_is_fully_read(tiny_dir):
    for variant in tiny.variants():
        model = idinspect.load(tiny_dir(variant))
        assert unread_attention_tensors(model.adapter, model.reader) == [], variant


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_unknown_attention_tensor_is_refused_by_name(tiny_dir, tmp_path, fmt):
    src = _with_extra_tensor(tiny_dir("bert"), tmp_path / "m", EXTRA, (16, 16))
    with pytest.raises(IdinspectError, match=EXTRA.replace(".", r"\.")):
        idinspect.load(src)
    res = run_cli(src, "--format", fmt, "--html", tmp_path / "r.html")
    assert res.code == 2 and EXTRA in res.stderr and "refuses" in res.stderr
    assert res.stdout == "" and not (tmp_path / "r.html").exists()
    res = run_cli("export", src, tmp_path / "out")
    assert res.code == 2 and EXTRA in res.stderr and not (tmp_path / "out").exists()


def test_its_bias_is_named_too_and_norms_pass(tiny_dir, tmp_path):
    src = _with_extra_tensor(tiny_dir("bert"), tmp_path / "a", EXTRA, (8, 16))
    src = _with_extra_tensor(src, tmp_path / "b", EXTRA.replace("weight", "bias"), (8,))
    model_error = pytest.raises(IdinspectError)
    with model_error as err:
        idinspect.load(src)
    assert EXTRA in str(err.value) and EXTRA.replace("weight", "bias") in str(err.value)
    # a 1-D norm weight inside attention is not a projection (GPT-2's ln_cross_attn, BERT's LayerNorm); being
    # declared by no adapter, the whole-checkpoint check refuses it as undeclared instead
    name = "bert.encoder.layer.0.attention.extra_norm.weight"
    norm = _with_extra_tensor(tiny_dir("bert"), tmp_path / "c", name, (16,))
    with pytest.raises(IdinspectError, match=r"1 tensor that the bert adapter neither reads nor declares: " + name):
        idinspect.load(norm)


def test_unknown_attention_module_in_memory_is_refused():
    hf = tiny.build("bert")
    hf.bert.encoder.layer[0].attention.self.talking_heads = torch.nn.Linear(16, 16, dtype=torch.float64)
    with pytest.raises(IdinspectError, match=r"attention\.self\.talking_heads\.weight.*refuses"):
        idinspect.load(hf)


def test_an_adapter_that_forgets_cross_attention_is_caught(tiny_dir, monkeypatch):
    """Before cross-attention was read, GPT-2 decoders with add_cross_attention were counted without
    it; the coverage check alone now refuses such an adapter, naming the cross-attention tensors."""
    monkeypatch.setattr(gpt2_adapter.GPT2Adapter, "blocks", lambda self, layer: (gpt2_adapter.SELF,))
    with pytest.raises(IdinspectError, match=r"12 attention tensors .*h\.0\.crossattention\.c_attn\.bias"):
        idinspect.load(tiny_dir("gpt2-cross"))


@pytest.mark.parametrize("variant", tiny.variants("cross"))
def test_cross_blocks_are_counted_and_shown_in_every_format(variant, tiny_dir, tmp_path):
    src = tiny_dir(variant)
    res = run_cli(src, "--format", "json", "--html", tmp_path / "r.html")
    assert res.code == 0, res.stderr
    report = json.loads(res.stdout)
    kinds = [row["kind"] for row in report["layers"]]
    assert "cross" in kinds and "cross" in report["model"]["block_kinds"]
    assert report["totals"]["attention_parameters"] == sum(r["attention_parameters"] for r in report["layers"])
    html = (tmp_path / "r.html").read_text()
    text = run_cli(src, "--layers", "all").stdout
    for row in report["layers"]:
        stack = f"{row['stack']} " if row["stack"] else ""
        label = f"block {row['index']}: {stack}layer {row['layer']}, {row['kind']}"
        assert label in html and label in text, label
    assert "analysed" in text


MLP_EXTRA = "model.layers.1.mlp.adapter.weight"


def test_an_undeclared_model_tensor_is_refused_by_name_everywhere(tiny_dir, tmp_path):
    """The whole checkpoint is covered: a tensor outside attention that the adapter does not declare
    (here an extra MLP module) refuses load, inspect and export, naming it."""
    src = _with_extra_tensor(tiny_dir("llama-gqa"), tmp_path / "m", MLP_EXTRA, (16, 16))
    with pytest.raises(IdinspectError, match="neither reads nor declares: " + MLP_EXTRA.replace(".", r"\.")):
        idinspect.load(src)
    for args in ((src, "--format", "json"), (src, "--whole-model"), ("export", src, tmp_path / "out")):
        res = run_cli(*args)
        assert res.code == 2 and MLP_EXTRA in res.stderr and res.stdout == "", args
    assert not (tmp_path / "out").exists()
    # the same tensor declared as the model's passes (the declaration, not the name, decides)
    from idinspect.adapters.llama import LlamaAdapter

    LlamaAdapter.model_tensors = {**LlamaAdapter.model_tensors, "layers.{n}.mlp.adapter.weight": "mlp"}
    try:
        idinspect.load(src)
    finally:
        LlamaAdapter.model_tensors = {k: v for k, v in LlamaAdapter.model_tensors.items() if "adapter" not in k}


def test_every_variant_adds_up(tiny_dir):
    """Attention, the declared model components and the not-analysed parts add up to every stored
    parameter of every variant; T5's relative-position table, stored once, is counted once."""
    for variant in tiny.variants():
        model = idinspect.load(tiny_dir(variant))
        parts = inventory(model.adapter, model.reader)
        assert sum(parts.values()) == model.parameter_count(), variant
        assert parts["attention"] > 0 and parts.get("mlp", 0) > 0, (variant, parts)
    t5 = idinspect.load(tiny_dir("t5"))
    cfg = t5.adapter.config
    tables = 2 * cfg.relative_attention_num_buckets * cfg.num_heads     # one per stack, not one per block
    blocks = sum(math.prod(t5.reader.shape(k)) for n in range(t5.num_layers) for k in t5.adapter.attention_keys(n))
    assert inventory(t5.adapter, t5.reader)["attention"] == blocks + tables


def test_mpnet_counts_the_models_table_once(tiny_dir):
    """MPNet's relative-position table belongs to the encoder and every layer reads it: it is read as
    attention's (counted once, in block 0, with its 2 H unidentified directions: a shift per head and
    the bucket no pair of positions reaches), and the inventory holds it once."""
    model = idinspect.load(tiny_dir("mpnet"))
    table = "mpnet.encoder.relative_attention_bias.weight"
    assert model.adapter.positional_keys() == [table]
    blocks = sum(math.prod(model.reader.shape(k)) for n in range(model.num_layers) for k in model.adapter.attention_keys(n))
    assert inventory(model.adapter, model.reader)["attention"] == blocks + 32 * 4
    rows = idinspect.inspect(tiny_dir("mpnet"), spectra=False)["layers"]
    assert rows[0]["attention_parameters"] - rows[1]["attention_parameters"] == 32 * 4
    assert rows[0]["unidentified_parameters"] - rows[1]["unidentified_parameters"] == 2 * 4


def test_mpnet_with_other_bucket_rows_is_refused(tmp_path):
    """transformers' MPNet buckets positions into 32 whatever relative_attention_num_buckets says."""
    import transformers as tf

    cfg = tf.MPNetConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=1, intermediate_size=32,
                         vocab_size=64, max_position_embeddings=64, relative_attention_num_buckets=40)
    tf.MPNetModel(cfg).save_pretrained(tmp_path)
    res = run_cli(tmp_path)
    assert res.code == 2 and "relative_attention_num_buckets is 40" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("cls,config", [
    ("DebertaV2ForMaskedLM", dict(hidden_size=16, num_attention_heads=4, num_hidden_layers=1, intermediate_size=32,
                                  vocab_size=64, max_position_embeddings=64, relative_attention=True,
                                  pos_att_type=["c2p", "p2c"])),
])
def test_model_level_relative_tables_are_refused_with_the_reason(cls, config, tmp_path):
    """DeBERTa (disentangled attention) is refused by model type with the reason, never counted without its
    relative embeddings. (DeBERTa-v2's
    default type_vocab_size 0, as DeBERTa-v3 checkpoints store it, once failed the config check first.)"""
    import transformers as tf

    model_cls = getattr(tf, cls)
    model_cls(model_cls.config_class(**config)).save_pretrained(tmp_path)
    res = run_cli(tmp_path, "--whole-model")
    assert res.code == 2 and "is refused" in res.stderr and "relative" in res.stderr, res.stderr
