"""GGUF input: tiny transformers models converted with gguf's writer (tests/support/gguf_convert.py, llama.cpp's
layout) read back by idinspect must give the HF original's layers, counts and invariants: exactly in
F32/F16, within the quantisation error in Q8_0. The Q/K row permutation is what these tests guard:
reading a llama file as if it were a "neox" one changes the RoPE invariants (checked as a control)."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("gguf")

import transformers as tf  # noqa: E402

import idinspect  # noqa: E402
from idinspect import cli as cli_module  # noqa: E402
from idinspect.analysis.inspection import inspect  # noqa: E402
from idinspect.sources import gguf_reader  # noqa: E402
from tests.support import tiny  # noqa: E402
from tests.support.cli import run_cli  # noqa: E402
from tests.support.gguf_convert import convert, stored_tensors  # noqa: E402

ROLES = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")
COUNT_KEYS = ("attention_parameters", "unidentified_parameters", "qk_gauge", "vo_gauge", "noop_bias",
              "absorbable_bias", "heads", "kv_heads", "d_k", "d_v", "positional", "rotary_dim")


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.setitem(cli_module._DEBUG, "on", False)


def pair(variant: str, tmp_path, dtype: torch.dtype, qtype: str | dict[str, str], model=None):
    """(HF folder saved in ``dtype``, GGUF file in ``qtype``: one type or a mix) of the same random model."""
    model = model if model is not None else tiny.build(variant, dtype=torch.float32)
    model = model.to(dtype)
    tiny.save(model, tmp_path / variant, dtype=dtype)
    label = qtype if isinstance(qtype, str) else "mix"
    return tmp_path / variant, convert(model, tmp_path / f"{variant}-{label}.gguf", qtype)


def layers_equal(a, b) -> None:
    for i in range(a.num_layers):
        la, lb = a.layer(i), b.layer(i)
        for role in ROLES:
            ta, tb = getattr(la, role, None), getattr(lb, role, None)
            assert (ta is None) == (tb is None), (i, role)
            if ta is not None:   # 1-D tensors are F32 in GGUF (as llama.cpp writes them): same values
                assert torch.equal(ta.to(torch.float32), tb.to(torch.float32)), (i, role)
                assert ta.dtype == tb.dtype or ta.ndim < 3, (i, role)


def test_phi3_read_with_interleaved_pairs_does_not_match(tmp_path):
    """Control: a Phi-3 file whose Q/K rows were permuted as for a 'normal' architecture (pairs
    interleaved) reads as a different RoPE gauge, so the exact test above can fail."""
    model = tiny.build("phi3-partial-mqa", dtype=torch.float32)
    tiny.save(model, tmp_path / "hf", dtype=torch.float32)
    path = convert(model, tmp_path / "wrong.gguf", "F32", permute_qk=True)
    with idinspect.load(tmp_path / "hf") as hf, idinspect.load(path) as g:
        errors = idinspect.invariant_errors(hf.layer(0), g.layer(0))
        assert max(e.error for e in errors.values()) > 0.1


def wide(kind: str, width: int = 64):
    """Rows of ``width`` (Q8_0 blocks are 32 wide, Q4_K super-blocks 256)."""
    common = dict(hidden_size=width, intermediate_size=width, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
    config = {"llama": lambda: tf.LlamaConfig(**common), "qwen2": lambda: tf.Qwen2Config(**common),
              "phi3": lambda: tf.Phi3Config(**common, pad_token_id=0),
              "gpt2": lambda: tf.GPT2Config(n_embd=width, n_head=4, n_layer=2, vocab_size=64, n_positions=64)}[kind]()
    torch.manual_seed(1)
    cls = {"llama": tf.LlamaForCausalLM, "qwen2": tf.Qwen2ForCausalLM, "phi3": tf.Phi3ForCausalLM,
           "gpt2": tf.GPT2LMHeadModel}[kind]
    return cls(config).to(torch.float32).eval()


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
def test_q8_0_matches_within_the_quantisation_error(kind, tmp_path):
    folder, path = pair(kind, tmp_path, torch.float32, "Q8_0", model=wide(kind))
    with idinspect.load(folder) as hf, idinspect.load(path) as g:
        a, b = inspect(hf), inspect(g)
        worst = 0.0
        for i in range(hf.num_layers):
            la, lb = hf.layer(i), g.layer(i)
            for role in ("W_Q", "W_K", "W_V", "W_O"):
                ta, tb = getattr(la, role), getattr(lb, role)
                # Q8_0: 32 values share one scale d = max|x|/127 stored in fp16 (relative error <= 2^-11):
                # each value is off by at most d/2 + 127 d 2^-11
                bound = ta.abs().max().item() / 127 * (0.5 + 127 * 2 ** -11) * 1.01
                assert (ta - tb).abs().max().item() <= bound, (i, role)
            errors = idinspect.invariant_errors(la, lb)
            worst = max(worst, max(e.error for e in errors.values()))
    assert 0 < worst < 0.05, worst                      # quantised, and close
    for la, lb in zip(a["layers"], b["layers"]):
        assert {k: la[k] for k in COUNT_KEYS} == {k: lb[k] for k in COUNT_KEYS}
    types = b["model"]["gguf"]["tensor_types"]
    assert {t for n, t in types.items() if n.endswith(".weight")} == {"Q8_0"}
    assert all(t == "F32" for n, t in types.items() if n.endswith(".bias"))


#: llama.cpp's Q4_K_M keeps attn_v wider (Q6_K there; Q8_0 here, which gguf can write): a mixed file.
Q4_K_MIX = {"*": "Q4_K", "attn_v": "Q8_0"}


@pytest.mark.parametrize("kind, qtype", [("llama", "Q4_K_MIX"), ("qwen2", "Q4_K"), ("phi3", "Q4_K"),
                                         ("gpt2", "Q4_K")])
def test_q4_k_matches_within_the_quantisation_error(kind, qtype, tmp_path):
    """Q4_K blocks written by a reference quantiser (tests/support/gguf_q4k.py, from ggml's block layout):
    gguf.quants.dequantize decodes each stored value within half its sub-block step d sc_j, the
    tensors idinspect reads are the HF ones within that bound, counts are equal and invariants close."""
    import gguf
    import numpy as np

    from tests.support.gguf_q4k import step

    model = wide(kind, 256)
    folder, path = pair(kind, tmp_path, torch.float32, Q4_K_MIX if qtype == "Q4_K_MIX" else qtype, model=model)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    stored = dict(stored_tensors(model))
    q4 = [t for t in gguf.GGUFReader(str(path)).tensors if t.tensor_type.name == "Q4_K"]
    assert {t.name for t in q4} >= {f"blk.{i}.attn_output.weight" for i in range(2)}
    for t in q4:                                            # every stored value within half its step
        x = stored[t.name]
        decoded = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        assert decoded.shape == x.shape
        assert (np.abs(decoded - x) <= step(x) / 2 + 1e-6 * np.abs(x).max()).all(), t.name
    with idinspect.load(folder) as hf, idinspect.load(path) as g:
        a, b = inspect(hf), inspect(g)
        worst, weights = 0.0, 0.0
        for i in range(hf.num_layers):
            for key in hf.adapter.attention_keys(i):
                x, y = hf.reader.get(key), g.reader.get(key)
                kind_of = g.reader.tensor_types[key]
                if kind_of == "Q4_K":
                    stored_layout = x.T if kind == "gpt2" else x     # GPT-2's Conv1D is stored transposed
                    bound = float(step(stored_layout.numpy()).max()) / 2 + 1e-6 * x.abs().max().item()
                else:
                    bound = x.abs().max().item() / 127 * (0.5 + 127 * 2 ** -11) * 1.01
                assert (x - y).abs().max().item() <= bound, (key, kind_of)
                assert torch.equal(state[key], x)
                weights = max(weights, ((x - y).abs().max() / x.abs().max()).item())
            errors = idinspect.invariant_errors(hf.layer(i), g.layer(i))
            worst = max(worst, max(e.error for e in errors.values()))
    # products of two quantised factors: measured 2.1-2.2x the worst weight error (0.12 vs 0.054)
    assert 0 < worst <= 3 * weights, (worst, weights)
    for la, lb in zip(a["layers"], b["layers"]):
        assert {k: la[k] for k in COUNT_KEYS} == {k: lb[k] for k in COUNT_KEYS}
    expected = {n: ("Q8_0" if ".attn_v." in n and qtype == "Q4_K_MIX" else
                    "F32" if n.endswith(".bias") else "Q4_K") for n in b["model"]["gguf"]["tensor_types"]}
    assert b["model"]["gguf"]["tensor_types"] == expected


def test_permutation_is_what_makes_llama_match(tmp_path, monkeypatch):
    """Control: read the llama file as a 'neox' family (no un-permuting) and the layers and RoPE
    invariants no longer match; qwen2 read as 'normal' breaks the same way."""
    import dataclasses

    for variant, wrong in (("llama-gqa", "neox"), ("qwen2", "normal"), ("granite", "neox")):
        folder, path = pair(variant, tmp_path, torch.float32, "F32")
        arch = {"llama-gqa": "llama"}.get(variant, variant)
        patched = dict(gguf_reader.FAMILIES)
        patched[arch] = dataclasses.replace(patched[arch], rope=wrong)
        monkeypatch.setattr(gguf_reader, "FAMILIES", patched)
        with idinspect.load(folder) as hf, idinspect.load(path) as g:
            assert not torch.equal(hf.layer(0).W_Q, g.layer(0).W_Q)
            errors = idinspect.invariant_errors(hf.layer(0), g.layer(0))
            assert max(e.error for e in errors.values()) > 0.1
        monkeypatch.undo()


def test_cli_reads_a_gguf_file_and_names_tensor_types(tmp_path):
    _, path = pair("llama-gqa", tmp_path, torch.float32, "F16")
    r = run_cli(str(path), "--format", "json")
    assert r.code == 0, r.stderr
    report = json.loads(r.stdout)
    g = report["model"]["gguf"]
    assert g["file"] == path.name and g["architecture"] == "llama"
    assert g["tensor_types"]["blk.0.attn_q.weight"] == "F16" and g["tensor_types"]["blk.1.attn_output.weight"] == "F16"
    assert report["model"]["source"] == str(path)
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("idinspect").joinpath("schemas/report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(report)


def test_unsupported_architecture_is_refused_by_name(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "falcon.gguf"
    w = gguf.GGUFWriter(str(path), "falcon")
    w.add_block_count(1)
    w.add_tensor("blk.0.attn_qkv.weight", np.zeros((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run_cli(str(path))
    assert r.code == 2 and "Traceback" not in r.stderr
    assert "GGUF architecture 'falcon' is not supported (supported: gemma3, gpt2, granite, llama, mistral, phi3, qwen2, " \
        "qwen3)" \
        in r.stderr


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 10)
    r = run_cli(str(path))
    assert r.code == 2 and "Traceback" not in r.stderr and "not a readable GGUF file" in r.stderr


def test_export_refuses_gguf_input(tmp_path):
    _, path = pair("qwen2", tmp_path, torch.float32, "F32")
    r = run_cli("export", str(path), str(tmp_path / "out"))
    assert r.code == 2 and "refuses a GGUF input" in r.stderr
    assert not (tmp_path / "out").exists()


# a GGUF in a hub repository, read in part ------------------------------------------------------------

@pytest.fixture
def hub(monkeypatch):
    from huggingface_hub import constants as hf_constants

    from idinspect.sources import gguf_header
    from tests.support.hub_server import LocalHub

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(gguf_header, "FIRST_READ", 256)     # tiny files: make the header reads grow
    with LocalHub() as server:
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        yield server


def test_gguf_in_a_hub_repo_reads_header_and_attention_only(hub, tmp_path):
    import gguf

    model = wide("llama")
    folder, path = pair("llama", tmp_path, torch.float32, "Q8_0", model=model)
    data = path.read_bytes()
    commit = hub.add_repo("org/tiny-gguf", {"README.md": b"GGUF", "tiny-Q8_0.gguf": data})
    cache = tmp_path / "hf-cache"
    r = run_cli("org/tiny-gguf:tiny-Q8_0.gguf", "--cache-dir", str(cache), "--format", "json")
    assert r.code == 0, r.stderr
    got = json.loads(r.stdout)
    local = inspect(idinspect.load(path))
    assert got["layers"] == local["layers"] and got["totals"] == local["totals"]
    assert got["model"]["revision"] == commit and got["model"]["source"] == "org/tiny-gguf:tiny-Q8_0.gguf"
    reader = gguf.GGUFReader(str(path))
    attention = sum(int(t.n_bytes) for t in reader.tensors if ".attn_" in t.name and "norm" not in t.name)
    fetch = got["model"]["fetch"]
    assert fetch["attention_bytes"] == attention and fetch["checkpoint_bytes"] == len(data)
    assert reader.data_offset - 32 <= fetch["header_bytes"] < 4 * reader.data_offset    # doubling reads
    served = hub.bytes_served["hub"] + hub.bytes_served["cdn"]
    assert fetch["bytes_fetched"] <= fetch["header_bytes"] + attention < len(data)
    hub.reset_counts()
    again = run_cli("org/tiny-gguf:tiny-Q8_0.gguf", "--cache-dir", str(cache), "--offline", "--format", "json")
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout)["layers"] == got["layers"] and hub.log == []
    assert served > 0


def test_gguf_missing_in_the_hub_repo(hub, tmp_path):
    hub.add_repo("org/tiny-gguf", {"a-Q4_K.gguf": b"GGUF"})
    r = run_cli("org/tiny-gguf:b.gguf", "--cache-dir", str(tmp_path / "c"))
    assert r.code == 2 and "no file 'b.gguf' in the repository (GGUF files there: a-Q4_K.gguf)" in r.stderr


def test_phi3_longrope_gguf_in_a_hub_repo_fetches_other_tensors_when_read(hub, tmp_path):
    """The RoPE factor tensors come with the attention tensors (the config needs them); a tensor no
    inspection reads (a norm gain) is fetched when read, never seen as the sparse copy's zeros."""
    folder, path = pair("phi3-longrope", tmp_path, torch.float32, "F32")
    hub.add_repo("org/tiny-phi3", {"phi3.gguf": path.read_bytes()})
    with idinspect.load("org/tiny-phi3:phi3.gguf", cache_dir=tmp_path / "c") as remote, \
            idinspect.load(folder) as hf:
        assert inspect(remote)["layers"] == inspect(hf)["layers"]
        before = remote.fetch_summary()["bytes_fetched"]
        norm = "model.layers.1.input_layernorm.weight"
        assert torch.equal(remote.reader.get(norm), hf.reader.get(norm)) and hf.reader.get(norm).abs().min() > 0
        assert remote.fetch_summary()["bytes_fetched"] == before + 4 * hf.reader.shape(norm)[0]


def test_text_and_html_reports_name_each_tensor_kind_and_its_type(tmp_path):
    folder, path = pair("llama", tmp_path, torch.float32, Q4_K_MIX, model=wide("llama", 256))
    html = tmp_path / "r.html"
    r = run_cli(str(path), "--html", str(html))
    assert r.code == 0, r.stderr
    line = f"{path.name} (llama): attn_q Q4_K x2 · attn_k Q4_K x2 · attn_v Q8_0 x2 · attn_output Q4_K x2"
    assert line in " ".join(r.stdout.replace("│", " ").split())
    assert line in html.read_text()


@pytest.mark.parametrize("fault", ["drop", "short", "429", "ignore_range", "gated"])
def test_gguf_in_a_hub_repo_under_faults(fault, hub, tmp_path, monkeypatch):
    """The GGUF path shares the safetensors path's fetching (tests/sources/test_remote.py has the full matrix):
    dropped connections and short 206 answers are completed without fetching a byte twice, a 429 is
    waited out, a server ignoring Range is stopped, a gated repo names the fix; no half-written range."""
    from idinspect.sources import remote_http
    from tests.support.hub_server import Fault

    waits: list[float] = []
    monkeypatch.setattr(remote_http, "BASE_BACKOFF_S", 0.0)
    monkeypatch.setattr(remote_http.time, "sleep", waits.append)
    _, path = pair("qwen2", tmp_path, torch.float32, "Q8_0", model=wide("qwen2"))
    hub.add_repo("org/q", {"q.gguf": path.read_bytes()}, gated=fault == "gated")
    hub.faults += {"drop": [Fault("drop", host="cdn", keep=0.5) for _ in range(3)],
                   "short": [Fault("short", host="cdn", keep=0.25) for _ in range(4)],
                   "429": [Fault("status", host="cdn", status=429, headers={"Retry-After": "2"})],
                   "ignore_range": [Fault("ignore_range", host="cdn")], "gated": []}[fault]
    cache = tmp_path / "c"
    r = run_cli("org/q:q.gguf", "--cache-dir", str(cache), "--format", "json")
    assert [p for p in cache.rglob("*") if p.name.startswith(".part-")] == []
    if fault in ("ignore_range", "gated"):
        assert r.code == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert {"ignore_range": "q.gguf: the server ignored the Range request",
                "gated": "org/q is gated: accept its terms at"}[fault] in r.stderr
        return
    assert r.code == 0, r.stderr
    fetch = json.loads(r.stdout)["model"]["fetch"]
    injected = len(b'{"error": "injected"}') if fault == "429" else 0     # the 429 answer's own body
    # the header's last read may reach into tensor data that the attention fetch then finds cached
    assert hub.bytes_served["cdn"] - injected == fetch["bytes_fetched"] <= fetch["header_bytes"] + fetch["attention_bytes"]
    assert json.loads(r.stdout)["layers"] == inspect(idinspect.load(path))["layers"]
    assert (2.0 in waits) == (fault == "429")


def _needs_adapter(model_type: str):
    """qwen3 / gemma3_text GGUFs map onto the qk-norm adapters; skipped where this tree lacks them."""
    from idinspect.adapters import ADAPTERS

    return pytest.mark.skipif(model_type not in ADAPTERS, reason=f"no {model_type} adapter in this tree")


def _randomised(model):
    """Every parameter N(0, 0.5), as tests/support/tiny.py does (zeros hide nothing)."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.to(torch.float32).eval()


def _gemma3(layers: int, layer_types: list[str]):
    """Tiny Gemma 3 as llama.cpp can state it: scores scaled by head_dim^-1/2, norm weights on a 2^-10
    grid (llama.cpp stores 1 + w in float32, exact for these; see docs/gguf.md for the general bound)."""
    config = tf.Gemma3TextConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=layers, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=4, query_pre_attn_scalar=4, vocab_size=64,
                                 max_position_embeddings=64, sliding_window=4, layer_types=layer_types, pad_token_id=0,
                                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                  "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                     "rope_theta": 1000000.0}})
    model = _randomised(tf.Gemma3ForCausalLM(config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_((p * 1024).round() / 1024)
    return model


@_needs_adapter("gemma3_text")
def test_gemma3_norm_shift_and_layer_pattern_are_what_make_it_match(tmp_path, monkeypatch):
    """Controls: without undoing llama.cpp's 1 + w the q/k gains are off by one; with another
    sliding-window period the layers get the other RoPE (so the exact test above can fail)."""
    import dataclasses

    model = _gemma3(6, ["sliding_attention"] * 5 + ["full_attention"])
    folder, path = pair("gemma3-6", tmp_path, torch.float32, "F32", model=model)
    patched = dict(gguf_reader.FAMILIES)
    patched["gemma3"] = dataclasses.replace(patched["gemma3"], norm_shift=0.0)
    monkeypatch.setattr(gguf_reader, "FAMILIES", patched)
    with idinspect.load(folder) as hf, idinspect.load(path) as g:
        assert torch.equal(g.layer(0).qk_norm.q_gain - 1, hf.layer(0).qk_norm.q_gain)
    monkeypatch.undo()
    monkeypatch.setattr(gguf_reader, "GEMMA3_SWA_PATTERN", 3)
    with idinspect.load(folder) as hf, idinspect.load(path) as g:
        assert hf.layer(2).positional.rotary.inv_freq.tolist() != g.layer(2).positional.rotary.inv_freq.tolist()


@pytest.mark.parametrize("arch, model_type", [("qwen3", "qwen3"), ("gemma3", "gemma3_text")])
def test_mapped_architecture_without_its_adapter_is_refused_by_name(arch, model_type, tmp_path, monkeypatch):
    """With its adapter taken out of the registry, a qwen3/gemma3 GGUF is refused naming the missing adapter."""
    from idinspect.adapters import ADAPTERS

    monkeypatch.delitem(ADAPTERS._adapters, model_type)
    import gguf
    import numpy as np

    path = tmp_path / f"{arch}.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_tensor("blk.0.attn_q.weight", np.zeros((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run_cli(str(path))
    assert r.code == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert f"GGUF architecture '{arch}' maps to model_type '{model_type}', which this idinspect has no adapter for" \
        in r.stderr
