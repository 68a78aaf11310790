"""``idinspect export``: stock transformers loads the result and computes the original function;
the gauge-fixed tensors do not depend on where on the gauge orbit the input was; files, shards,
index and metadata are kept; two exports are byte-identical; OUT is handled safely."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers as tf
from safetensors import safe_open

import idinspect
from idinspect.equivalence.bounds import factor_amplification
from idinspect.equivalence.verify import output_tolerance
from idinspect.exporting.shard_writer import write_safetensors
from idinspect.forms import form_of
from tests.forms.test_gauge import random_gauge
from tests.support import tiny
from tests.support.cli import run_cli

FAMILIES = tiny.variants()


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path -> hex)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def read_all(directory: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                out[k] = h.get_tensor(k)
    return out


def moved_checkpoint(src: Path, dst: Path, seed: int, generic_qk: bool = False) -> Path:
    """A copy of ``src`` with every attention layer moved by a random gauge transform (``generic_qk``:
    a generic GL on Q/K instead, which breaks RoPE models)."""
    shutil.copytree(src, dst)
    model = idinspect.load(src)
    replaced = {}
    for layer in model.layers():
        replaced.update(model.adapter.write_layer(latent_gauge(layer, seed + layer.index) if form_of(layer).name == "latent"
                                                  else random_gauge(layer, seed + layer.index, generic_qk)))
    for fname in model.reader.shard_files:
        tensors = {k: replaced.get(k, model.reader.get(k)) for k in model.reader.keys_in(fname)}
        write_safetensors(dst / fname, tensors, model.reader.metadata(fname))
    return dst


def latent_gauge(layer, seed: int):
    """A random move of an MLA block along its gauge group (tests/support/latent_moves.py)."""
    from tests.support.latent_moves import coordinates, move

    L = layer.to(torch.float64)
    g = torch.Generator().manual_seed(seed)
    return move(L, 0.1 * torch.randn(coordinates(L), generator=g, dtype=torch.float64))


def auto_class(directory: Path):
    arch = json.loads((directory / "config.json").read_text())["architectures"][0]
    return getattr(tf, arch)


def outputs(directory: Path, ids: torch.Tensor) -> torch.Tensor:
    cls = auto_class(directory)
    model = cls.from_pretrained(directory, dtype=torch.float64, attn_implementation=tiny.attn_for(cls),
                                                 experts_implementation="eager").eval()
    with torch.no_grad():
        out = model(**tiny.model_inputs(model, ids))
    return tiny.model_output(out)


def assert_within_bound(a: Path, b: Path, out_a: torch.Tensor, out_b: torch.Tensor, compute: torch.dtype) -> float:
    """``out_b`` within verify's rounding bound of ``out_a`` (relative to max |out_a|); returns the error."""
    bound = output_tolerance(a, b, compute)
    err = rel(out_a, out_b)
    assert err <= bound.tolerance, f"{err:.3g} > {bound.describe()} = {bound.tolerance:.3g}"
    return err


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / a.abs().max())


def assert_gain_rule(directory: Path, tol: float) -> None:
    """Every q/k-norm layer of the checkpoint at ``directory`` satisfies the gain-trade rule: on each
    rotary plane and unrotated dim, per gain class, ||query multipliers|| = ||key multipliers||
    (relative to their sum, at most ``tol``) and the largest-magnitude key multiplier is positive; checked from the stored tensors as idinspect reads them,
    with tests/test_gauge.gain_norms (independent of idinspect.forms.per_head.qk_gain_trade)."""
    from tests.forms.test_gauge import gain_norms, key_gain_leads

    with idinspect.load(directory) as model:
        for layer in model.layers():
            if getattr(layer, "qk_norm", None) is None or layer.qk_norm.q_gain is None:
                continue
            nq, nk = gain_norms(layer)
            assert bool(((nq - nk).abs() <= tol * (nq + nk)).all()), (layer.index, nq, nk)
            assert bool((key_gain_leads(layer) > 0).all()), layer.index


def export_ok(src: Path, out: Path, *extra: str):
    result = run_cli("export", src, out, *extra)
    assert result.code == 0, result.stderr
    return result


@pytest.mark.parametrize("variant", FAMILIES)
def test_stock_transformers_computes_the_original_function(variant, tiny_dir, tmp_path):
    src = tiny_dir(variant)
    export_ok(src, tmp_path / "out")
    ids = torch.randint(0, 64, (2, 11), generator=torch.Generator().manual_seed(0))
    # the rounding bound of float64 weights run in float64 with float32 norms (Llama-family RMSNorm,
    # Gemma's 1 + w and others round to float32 inside transformers in some versions, not in others)
    assert_within_bound(src, tmp_path / "out", outputs(src, ids), outputs(tmp_path / "out", ids), torch.float64)
    # and the attention tensors really changed (under a q/k norm the query and key side is kept as stored)
    a, b = read_all(src), read_all(tmp_path / "out")
    model = idinspect.load(src)
    attn = set(model.adapter.attention_keys(0))
    layer = model.layer(0)
    norm = getattr(layer, "qk_norm", None)
    moves_qk = norm is not None and (norm.kind == "layer" or norm.q_gain is None)   # centring / plane rotations
    kept = {layer.tensor_names[r] for r in ("W_Q", "W_K")} if norm is not None and not moves_qk else set()
    assert all(not torch.equal(a[k], b[k]) for k in attn - kept if k.endswith("weight"))
    assert all(torch.equal(a[k], b[k]) for k in kept)
    if norm is not None and norm.kind == "layer":      # LayerNorm: each head's rows centred over its d_k dims
        with idinspect.load(tmp_path / "out") as out:
            for W in (out.layer(0).W_Q, out.layer(0).W_K):
                assert float(W.mean(dim=-1).abs().max()) <= 1e-12 * float(W.abs().max())
    if norm is not None and norm.q_gain is None:        # no gains: each key plane on its principal axes
        with idinspect.load(tmp_path / "out") as out:
            L = out.layer(0)
            for i, j in L.positional.rotary.plane_columns():
                K = L.W_K[..., [i, j]]
                G = K.transpose(1, 2) @ K
                assert float(G[:, 0, 1].abs().max()) <= 1e-12 * float(G.abs().max())
                assert bool((G[:, 0, 0] >= G[:, 1, 1]).all())
    assert_gain_rule(tmp_path / "out", 1e-12)          # q/k norm gains: equal query and key norms per orbit


@pytest.mark.parametrize("variant", tiny.variants("lm"))
def test_float32_export_keeps_logits_and_greedy_decodes(variant, tiny_dir, tmp_path):
    """A float32 checkpoint exported in float32: stock transformers gives the original logits (within
    the rounding bound of both parametrisations run in float32, ``output_tolerance``) and the same
    greedy continuation."""
    src = tiny_dir(variant, dtype=torch.float32)
    export_ok(src, tmp_path / "out")
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    loaded = [auto_class(d).from_pretrained(d, dtype=torch.float32, attn_implementation=tiny.attn_for(auto_class(d)),
                                                 experts_implementation="eager").eval()
              for d in (src, tmp_path / "out")]
    with torch.no_grad():
        logits = [m(input_ids=ids).logits.double() for m in loaded]
        decoded = [m.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0) for m in loaded]
    assert_within_bound(src, tmp_path / "out", logits[0], logits[1], torch.float32)
    assert torch.equal(decoded[0], decoded[1])
    assert_gain_rule(tmp_path / "out", 4 * 2.0 ** -24)   # one float32 rounding of each stored gain


@pytest.mark.parametrize("variant", ["qwen2", "llama-gqa", "gpt2", "gemma-mqa"])
def test_the_output_bound_catches_one_changed_weight(variant, tiny_dir, tmp_path):
    """Negative control for the rounding bound: in the float32 export, one entry of W_O in layer 0's
    best-conditioned head (smallest W_OV amplification) moved by 1e-3 of that head's largest entry
    takes the logits outside the bound that the untouched export is inside."""
    src = tiny_dir(variant, dtype=torch.float32)
    export_ok(src, tmp_path / "out")
    tampered = tmp_path / "tampered"
    shutil.copytree(tmp_path / "out", tampered)
    model = idinspect.load(tmp_path / "out")
    layer = model.layer(0)
    head = int(factor_amplification(layer.to(torch.float64))["W_OV"].argmin())
    W_O = layer.W_O.clone()
    W_O[head, 0, 0] += 1e-3 * float(W_O[head].abs().max())
    replaced = model.adapter.write_layer(layer.replace(W_O=W_O))
    for fname in model.reader.shard_files:
        tensors = {k: replaced.get(k, model.reader.get(k)) for k in model.reader.keys_in(fname)}
        write_safetensors(tampered / fname, tensors, model.reader.metadata(fname))
    model.close()
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    loaded = [auto_class(d).from_pretrained(d, dtype=torch.float32, attn_implementation=tiny.attn_for(auto_class(d)),
                                             experts_implementation="eager").eval() for d in (src, tmp_path / "out", tampered)]
    with torch.no_grad():
        logits = [m(input_ids=ids).logits.double() for m in loaded]
    good = assert_within_bound(src, tmp_path / "out", logits[0], logits[1], torch.float32)
    bound = output_tolerance(src, tampered, torch.float32).tolerance
    assert rel(logits[0], logits[2]) > bound, f"{rel(logits[0], logits[2]):.3g} <= {bound:.3g}"
    print(f"{variant}: export {good:.2e}, tampered {rel(logits[0], logits[2]):.2e}, bound {bound:.2e}")


@pytest.mark.parametrize("variant", tiny.variants("seq2seq"))
def test_float32_encoder_decoder_export_keeps_logits_and_greedy_decodes(variant, tiny_dir, tmp_path):
    """An encoder-decoder (T5, BART, mBART, Marian, Whisper) exported in float32: stock transformers
    gives the original logits (within the rounding bound) and the same greedy output of ``generate``, which starts
    from the decoder start token and feeds the encoder ``input_ids`` (Whisper: ``input_features``)."""
    src = tiny_dir(variant, dtype=torch.float32)
    export_ok(src, tmp_path / "out")
    ids = torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    loaded = [auto_class(d).from_pretrained(d, dtype=torch.float32, attn_implementation=tiny.attn_for(auto_class(d))).eval()
              for d in (src, tmp_path / "out")]
    inputs = tiny.model_inputs(loaded[0], ids)
    encoder_inputs = {k: v for k, v in inputs.items() if not k.startswith("decoder_")}
    with torch.no_grad():
        logits = [m(**inputs).logits.double() for m in loaded]
        decoded = [m.generate(**encoder_inputs, max_new_tokens=6, do_sample=False, num_beams=1) for m in loaded]
    assert_within_bound(src, tmp_path / "out", logits[0], logits[1], torch.float32)
    assert decoded[0].shape[1] > 1 and torch.equal(decoded[0], decoded[1])


def test_real_minilm_export_keeps_its_embeddings(minilm_dir, tmp_path):
    export_ok(minilm_dir, tmp_path / "out")
    ids = torch.randint(0, 30522, (2, 12), generator=torch.Generator().manual_seed(0))
    # float32 weights run in float64: one rounding of the gauge-fixed form, float32 norms
    assert_within_bound(minilm_dir, tmp_path / "out", outputs(minilm_dir, ids), outputs(tmp_path / "out", ids),
                        torch.float64)
    assert tree_hashes(minilm_dir)["tokenizer.json"] == tree_hashes(tmp_path / "out")["tokenizer.json"]
    pooling = Path("1_Pooling") / "config.json"
    assert (tmp_path / "out" / pooling).read_bytes() == (minilm_dir / pooling).read_bytes()


@pytest.mark.parametrize("variant", FAMILIES)
def test_orbit_invariance_through_export(variant, tiny_dir, tmp_path):
    """A random gauge transform of the weights, exported, gives the same gauge-fixed tensors."""
    src = tiny_dir(variant)
    moved = moved_checkpoint(src, tmp_path / "moved", seed=7)
    export_ok(src, tmp_path / "a")
    export_ok(moved, tmp_path / "b")
    before, a, b = read_all(src), read_all(tmp_path / "a"), read_all(tmp_path / "b")
    model = idinspect.load(src)
    attn = {k for i in range(model.num_layers) for k in model.adapter.attention_keys(i)}
    assert max(rel(before[k], read_all(moved)[k]) for k in attn if "weight" in k) > 1e-2
    for k in a:
        if k in attn:
            scale = float(a[k].norm()) or 1.0
            assert float((a[k] - b[k]).norm()) / scale <= 1e-9, k
        else:
            assert torch.equal(a[k], b[k]) and torch.equal(a[k], before[k]), k


@pytest.mark.parametrize("variant", ["qwen2", "gemma3-text", "phi-qk-layernorm"])
def test_export_of_an_export_changes_nothing(variant, tiny_dir, tmp_path):
    """Idempotent up to rounding, q/k norm gains (Gemma's 1 + w; Phi's bias after the gain) included."""
    src = tiny_dir(variant)
    export_ok(src, tmp_path / "a")
    export_ok(tmp_path / "a", tmp_path / "b")
    a, b = read_all(tmp_path / "a"), read_all(tmp_path / "b")
    assert all(float((a[k] - b[k]).norm()) <= 1e-12 * max(float(a[k].norm()), 1.0) for k in a)
    with idinspect.load(tmp_path / "a") as exported, idinspect.load(src) as original:
        ok, worst, _ = idinspect.is_gauge_fixed(exported)
        assert ok and not idinspect.is_gauge_fixed(original)[0]


def test_sharded_input_keeps_shards_index_and_metadata(tiny_dir, tmp_path):
    src = tiny_dir("llama3-rope", max_shard_size="20KB")
    before = tree_hashes(src)
    result = run_cli("export", src, tmp_path / "out", "--format", "json")
    assert result.code == 0, result.stderr
    record = json.loads(result.stdout)
    out = tmp_path / "out"
    shards = sorted(p.name for p in src.glob("*.safetensors"))
    assert len(shards) >= 2 and sorted(p.name for p in out.glob("*.safetensors")) == shards
    index_in = json.loads((src / "model.safetensors.index.json").read_text())
    index_out = json.loads((out / "model.safetensors.index.json").read_text())
    assert index_out["weight_map"] == index_in["weight_map"]
    sizes = sum(t.numel() * t.element_size() for t in read_all(out).values())
    assert index_out["metadata"]["total_size"] == sizes == record["total_size"]
    assert (out / "model.safetensors.index.json").read_bytes() == (src / "model.safetensors.index.json").read_bytes()
    for name in shards:
        with safe_open(str(out / name), framework="pt") as h:
            meta = h.metadata()
        assert meta["format"] == "pt"
        info = json.loads(meta["idinspect"])
        assert info["gauge"] == {"name": "balanced", "version": 1} and info["source"] == str(src)
        assert info["version"] == idinspect.__version__ and 0 <= info["max_invariant_error"] <= 1e-12
    assert (out / "config.json").read_bytes() == (src / "config.json").read_bytes()
    assert (out / "generation_config.json").read_bytes() == (src / "generation_config.json").read_bytes()
    assert tree_hashes(src) == before                                   # input untouched
    assert record["gauge_fixed_tensors"] == 8 and record["unique"] is True


def test_exports_are_byte_identical(tiny_dir, tmp_path):
    src = tiny_dir("gpt2", max_shard_size="30KB")
    export_ok(src, tmp_path / "a")
    export_ok(src, tmp_path / "b")
    a, b = tree_hashes(tmp_path / "a"), tree_hashes(tmp_path / "b")
    assert a == b and len(a) >= 4


def test_every_non_weight_file_is_copied_and_other_weights_skipped(tiny_dir, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(tiny_dir("bert"), src)
    (src / "tokenizer.json").write_text('{"model": {}}')
    (src / "chat_template.jinja").write_text("{{ messages }}")
    (src / "1_Pooling").mkdir()
    (src / "1_Pooling" / "config.json").write_text("{}")
    (src / "pytorch_model.bin").write_bytes(b"not unpickled")
    (src / "onnx").mkdir()
    (src / "onnx" / "model.onnx").write_bytes(b"onnx")
    result = export_ok(src, tmp_path / "out")
    out = tree_hashes(tmp_path / "out")
    for name in ("tokenizer.json", "chat_template.jinja", "1_Pooling/config.json", "config.json"):
        assert out[name] == tree_hashes(src)[name]
    assert "pytorch_model.bin" not in out and "onnx/model.onnx" not in out
    assert "not copied: onnx/model.onnx" in result.stderr and "not copied: pytorch_model.bin" in result.stderr


def test_dtype_cast_changes_only_the_config_dtype(tiny_dir, tmp_path):
    src = tiny_dir("llama3-rope")
    export_ok(src, tmp_path / "out", "--dtype", "bfloat16")
    cfg_in = json.loads((src / "config.json").read_text())
    cfg_out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg_out["dtype"] == "bfloat16"
    assert {k: v for k, v in cfg_out.items() if k != "dtype"} == {k: v for k, v in cfg_in.items() if k != "dtype"}
    tensors = read_all(tmp_path / "out")
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    before = read_all(src)
    model = idinspect.load(src)
    attn = {k for i in range(model.num_layers) for k in model.adapter.attention_keys(i)}
    assert all(torch.equal(t, before[k].to(torch.bfloat16)) for k, t in tensors.items() if k not in attn)


def test_cast_of_a_sharded_model_updates_total_size(tiny_dir, tmp_path):
    src = tiny_dir("llama3-rope", max_shard_size="20KB")
    export_ok(src, tmp_path / "out", "--dtype", "float32")
    index_in = json.loads((src / "model.safetensors.index.json").read_text())
    index_out = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert index_out["metadata"]["total_size"] * 2 == index_in["metadata"]["total_size"]
    assert index_out["weight_map"] == index_in["weight_map"]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "float32"


def test_keep_leaves_the_config_bytes_alone_even_when_a_cast_is_a_no_op(tiny_dir, tmp_path):
    src = tiny_dir("gpt2")
    export_ok(src, tmp_path / "out", "--dtype", "float64")
    assert (tmp_path / "out" / "config.json").read_bytes() == (src / "config.json").read_bytes()


def test_existing_out_needs_force(tiny_dir, tmp_path):
    src = tiny_dir("gpt2")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    result = run_cli("export", src, out)
    assert result.code == 2 and "already exists" in result.stderr and "--force" in result.stderr
    assert (out / "old.txt").exists()
    result = run_cli("export", src, out, "--force")                   # --force replaces only idinspect's own export
    assert result.code == 2 and "not a checkpoint folder" in result.stderr and (out / "old.txt").exists()
    (out / "old.txt").unlink()
    export_ok(src, out, "--force")                                    # an empty folder
    export_ok(src, out, "--force")                                    # its own export
    assert (out / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]                # no temporary folders left


@pytest.mark.parametrize("where", ["same", "inside"])
def test_out_must_not_overlap_the_input(where, tiny_dir, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(tiny_dir("gpt2"), src)
    before = tree_hashes(src)
    out = src if where == "same" else src / "exported"
    result = run_cli("export", src, out, "--force")
    assert result.code == 2 and "outside the input" in result.stderr
    assert tree_hashes(src) == before and not (src / "exported").exists()


def test_json_goes_to_stdout_and_nothing_else(tiny_dir, tmp_path):
    result = run_cli("export", tiny_dir("bert"), tmp_path / "out", "--format", "json")
    record = json.loads(result.stdout)
    assert record["gauge"] == {"name": "balanced", "version": 1} and record["dtype"] == "keep"
    assert result.stderr == ""                                             # no progress when not a terminal


def test_bad_input_is_exit_2(tmp_path):
    result = run_cli("export", tmp_path / "missing", tmp_path / "out")
    assert result.code == 2 and "no such file" in result.stderr
    assert not (tmp_path / "out").exists()


def test_hub_source_fetches_export_files_and_records_the_commit(tiny_dir, tmp_path, monkeypatch):
    """A hub id goes through snapshot_download with EXPORT_PATTERNS; provenance names id and commit
    (whose bytes were verified against their blobs' digests: tests/hostile/test_hostile_provenance.py)."""
    import idinspect.model as model_module
    from idinspect.sources.hub import EXPORT_PATTERNS
    from tests.support.hostile import cache_snapshot

    sha = "0123456789abcdef0123456789abcdef01234567"
    snapshot = cache_snapshot(tiny_dir("gpt2"), tmp_path / "models--org--tiny", sha)   # blobs named by their digests
    seen = {}

    def fake_download(repo_id, revision=None, token=None, allow_patterns=None, **kwargs):
        seen.update(repo_id=repo_id, patterns=allow_patterns)
        return snapshot, sha

    monkeypatch.setattr(model_module, "download_snapshot", fake_download)
    result = run_cli("export", "org/tiny", tmp_path / "out", "--format", "json")
    assert result.code == 0, result.stderr
    assert seen == {"repo_id": "org/tiny", "patterns": EXPORT_PATTERNS}
    with safe_open(str(tmp_path / "out" / "model.safetensors"), framework="pt") as h:
        info = json.loads(h.metadata()["idinspect"])
    assert info["source"] == "org/tiny" and info["revision"] == sha


def test_non_unique_form_is_reported(tiny_dir, tmp_path):
    """Orthonormal, equal query and key factors tie every singular value: the export says so."""
    src = tmp_path / "src"
    shutil.copytree(tiny_dir("bert"), src)
    model = idinspect.load(src)
    layer = model.layer(0).to(torch.float64)
    basis = torch.linalg.qr(torch.randn(16, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[0]
    tied = layer.replace(W_Q=basis.expand(4, 16, 4).clone(), W_K=basis.expand(4, 16, 4).clone(),
                         b_Q=torch.zeros(4, 4, dtype=torch.float64))
    tensors = {k: model.reader.get(k).clone() for k in model.reader.keys()}
    tensors.update({k: v.clone() for k, v in model.adapter.write_layer(tied).items()})
    model.close()
    write_safetensors(src / "model.safetensors", tensors, {"format": "pt"})
    result = run_cli("export", src, tmp_path / "out", "--format", "json")
    assert result.code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["unique"] is False and any("layer 0 QK" in d for d in record["degeneracies"])
    assert "not unique" in result.stderr
    with safe_open(str(tmp_path / "out" / "model.safetensors"), framework="pt") as h:
        assert json.loads(h.metadata()["idinspect"])["unique"] is False          # the patched header slot


def test_one_pass_canonicalises_each_layer_once_and_patches_every_header(tiny_dir, tmp_path, monkeypatch):
    """Each layer is gauge-fixed exactly once; the headers, written before the last layer is known,
    end up with the final largest error and uniqueness in their fixed-width slots."""
    import idinspect.forms.per_head.export as layer_module

    src = tiny_dir("llama3-rope", max_shard_size="20KB")
    calls = []
    real = layer_module.canonicalize
    monkeypatch.setattr(layer_module, "canonicalize", lambda layer, **kw: calls.append(layer.index) or real(layer, **kw))
    result = idinspect.export(src, tmp_path / "out")
    assert sorted(calls) == list(range(idinspect.load(src).num_layers))
    before = read_all(src)
    for shard in result.shards:
        path = tmp_path / "out" / shard
        with safe_open(str(path), framework="pt") as h:
            text = h.metadata()["idinspect"]
            assert all(h.get_tensor(k).shape == before[k].shape for k in h.keys())
        info = json.loads(text)
        assert info["max_invariant_error"] == result.max_invariant_error > 0 and info["unique"] is True
        number = json.dumps(result.max_invariant_error)
        assert f'"max_invariant_error":{number.ljust(24)},' in text and '"unique":true ,' in text
        assert int.from_bytes(path.read_bytes()[:8], "little") % 8 == 0
