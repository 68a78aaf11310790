"""--auto: the adapter inferred from the transformers module and proven on a twin before counting.

Agreement: on real transformers classes whose hand-written adapter is hidden from the registry, the
inferred adapter gives the same counts as the hand-written one, and reads every block as the same
attention function. Refusal: where the module does something --auto does not model (a second kind of
layer the example inputs do not run, tests/automatic/test_layer_kinds.py; Falcon's bfloat16 ALiBi on 12
heads, tests/automatic/test_laws.py) or the inference is wrong, nothing is counted
and the error names what was found. Live models of a config class registered with
``AutoConfig.register``, and a checkpoint folder whose code is in the repository (auto_map), which only
runs with --trust-remote-code.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from idinspect.adapters import ADAPTERS

import idinspect
from idinspect.errors import IdinspectError
from tests.support.automatic import counted, hidden, layer_facts, reads_as_by_hand
from tests.support.tiny import build

#: Hand-written families the automatic adapter must match: plain, GQA/MQA, biases, fused rows (Conv1D
#: and Linear), partial RoPE, q/k norms per head, sliding windows, encoders, a vision tower; and the
#: per-layer facts: interleaved RoPE on a rotary_dim of the head from no RoPE setting (GPT-J), RoPE in
#: float32 inside the attention module with LayerNorm q/k norms (Cohere), RoPE per layer type with a
#: query_pre_attn_scalar scale (Gemma 3), a bidirectional window one wider than the config's (ModernBERT),
#: NoPE layers (SmolLM3), a scale over layer index + 1 (GPT-2), a width equal to the model's (OPT),
#: ALiBi (BLOOM; MPT with 6 heads, whose slopes follow the extension for H not a power of two), attention
#: sinks (gpt-oss: one logit per head on the attention module), a q/k LayerNorm module per head (StableLM),
#: a cross-attention block after each self-attention block (GPT-2, BERT; BART's decoder saved alone, whose
#: cross-attention runs only on encoder states it is given), T5's relative-position table (layer 0's, shared;
#: UMT5's, one per layer), an encoder and a decoder stack, each settled on its own (BART with fewer
#: decoder layers and heads set apart from the encoder's, T5 with a gated MLP, Whisper's audio encoder).
AGREEING = ["llama-mqa", "qwen3-bias-window", "phi3-partial-mqa", "gpt2", "gpt-neox", "bert", "vit", "olmo2",
            "gemma2-softcap", "gptj", "cohere-qk-norm-bias", "gemma3-text", "modernbert-scaled-rope", "smollm3-nope",
            "gpt2-inverse-layer-scale", "opt", "bloom", "mpt-6-heads", "gpt-oss",
            "stablelm-qk-layernorm", "gpt2-cross", "bert-cross", "bart-decoder", "t5-encoder", "umt5-encoder",
            "bart-base-model", "t5-gated-head-dim", "whisper", "albert-shared", "albert-groups",
            "falcon-legacy-alibi", "mpnet", "mpnet-base-model", "deepseek-v3", "deepseek-v3-direct-q", "deepseek-v2",
            "minicpm3",
            # multi-tower configs, each tower a stack settled on its own sub-config (CLIP, SigLIP with a text width
            # tied to the vision tower's); a vision tower the token ids do not run listed as not analysed (Qwen-VL,
            # Llama 4); Llama 4's text model: chunked attention, query temperature on NoPE layers, a weightless L2
            # q/k norm after polar RoPE on the RoPE layers
            "clip", "siglip", "qwen2-vl", "qwen3-vl", "llama4-text", "llama4",
            # a list of layers of two kinds: Mllama's text model, whose listed layers hold a cross-attention block only;
            # inside the multimodal Mllama, whose token ids do not run those layers: the tower traced on its own
            "mllama-text", "mllama"]


@pytest.mark.parametrize("variant", AGREEING)
def test_the_inferred_adapter_counts_what_the_hand_written_one_counts(variant):
    hf = build(variant)
    read = idinspect.load(hf)
    by_hand, facts = counted(read), layer_facts(read)
    with hidden(hf.config.model_type):
        with pytest.raises(IdinspectError, match="--auto"):
            idinspect.load(hf)             # without --auto: refused, and the refusal names --auto
        model = idinspect.load(hf, auto=True)
        assert model.adapter.family == "automatic"
        assert counted(model) == by_hand
        assert layer_facts(model) == facts          # the same attention function, block by block
        evidence = model.adapter_provider()["automatic"]
        assert evidence["proven_on_twin"] is True
        assert evidence["jacobian_nullity"] == evidence["structural_unidentified"]
        assert evidence["reference_error"] <= 1e-10


#: Checkpoint folders, as users run --auto: a task model's head (BERT's masked-LM head, traced through the
#: class config.json names), windows the config class derives (ModernBERT's), a head width set apart from
#: d / H (T5's d_kv), a plain decoder, and the multimodal Mllama (its text model saved outside the live prefix).
FROM_FOLDERS = ["bert", "modernbert", "t5-gated-head-dim", "llama-mqa", "mllama"]


@pytest.mark.parametrize("variant", FROM_FOLDERS)
def test_a_checkpoint_folder_reads_as_its_hand_written_adapter_reads_it(variant, tiny_dir):
    reads_as_by_hand(tiny_dir(variant))


def test_a_wrong_inference_is_caught_before_anything_is_counted():
    """Every candidate that misreads the module (no RoPE on a RoPE model, the wrong scale or scale per
    layer, no causal mask, the wrong pairing) fails the reproduction: settle refuses with the closest attempt."""
    from idinspect.adapters.example_inputs import example_inputs

    from idinspect.automatic import trace_twin
    from idinspect.automatic.infer import candidates
    from idinspect.automatic.settle import settle

    hf = build("llama-gqa")
    twin = trace_twin(hf.config, type(hf))
    g = torch.Generator().manual_seed(0)
    inputs = example_inputs(twin, torch.randint(2, 32, (2, 8), generator=g), g)
    layouts, found = candidates(twin, inputs, "llama")
    right = settle(twin, layouts, found)[0].found
    wrong = [replace(right, positional="none"), replace(right, causal=False), replace(right, scale_law="one"),
             replace(right, scale_by_layer=True), replace(right, positional="interleaved")]
    with pytest.raises(IdinspectError, match="closest"):
        settle(twin, wrong, found)


def test_a_live_model_of_a_registered_config_class():
    from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

    class ToyConfig(LlamaConfig):
        model_type = "idinspect-toy-llama"

    class ToyModel(LlamaForCausalLM):
        config_class = ToyConfig

    AutoConfig.register("idinspect-toy-llama", ToyConfig, exist_ok=True)
    cfg = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 32,
           "num_hidden_layers": 2, "vocab_size": 64, "attention_bias": True}
    toy = ToyModel(ToyConfig(**cfg)).to(torch.float64)
    twin = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.float64)
    twin.load_state_dict(toy.state_dict())
    try:
        with pytest.raises(IdinspectError, match="not supported"):
            idinspect.load(toy)
        model = idinspect.load(toy, auto=True)
        assert counted(model) == counted(idinspect.load(twin))
        assert model.adapter_provider()["name"] == "automatic"
    finally:
        ADAPTERS.remove_automatic("idinspect-toy-llama")


REMOTE_CONFIG = '''
from transformers import LlamaConfig


class RemoteToyConfig(LlamaConfig):
    model_type = "idinspect-remote-toy"
'''

REMOTE_MODEL = '''
from transformers import LlamaForCausalLM, LlamaModel

from .configuration_toy import RemoteToyConfig


class RemoteToyModel(LlamaModel):
    config_class = RemoteToyConfig


class RemoteToyForCausalLM(LlamaForCausalLM):
    config_class = RemoteToyConfig
'''


@pytest.fixture(scope="module")
def remote_code_checkpoint(tmp_path_factory):
    """A checkpoint whose configuration and modelling code live in the folder (auto_map)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("remote-toy")
    cfg = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
                      num_hidden_layers=2, vocab_size=64)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    settings = json.loads((folder / "config.json").read_text())
    settings.update(model_type="idinspect-remote-toy", architectures=["RemoteToyForCausalLM"],
                    auto_map={"AutoConfig": "configuration_toy.RemoteToyConfig",
                              "AutoModel": "modeling_toy.RemoteToyModel",
                              "AutoModelForCausalLM": "modeling_toy.RemoteToyForCausalLM"})
    (folder / "config.json").write_text(json.dumps(settings))
    (folder / "configuration_toy.py").write_text(textwrap.dedent(REMOTE_CONFIG))
    (folder / "modeling_toy.py").write_text(textwrap.dedent(REMOTE_MODEL))
    return folder


def _cli(*args, env_home):
    env = {"HF_HOME": str(env_home), "HF_MODULES_CACHE": str(env_home / "modules"), "HF_HUB_OFFLINE": "1",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "idinspect", *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


def test_remote_code_runs_only_with_trust_remote_code(remote_code_checkpoint, tmp_path):
    plain = _cli(str(remote_code_checkpoint), env_home=tmp_path)
    assert plain.returncode == 2 and "--auto" in plain.stderr
    untrusted = _cli(str(remote_code_checkpoint), "--auto", env_home=tmp_path)
    assert untrusted.returncode == 2
    assert "--trust-remote-code" in untrusted.stderr and "Traceback" not in untrusted.stderr
    assert not (tmp_path / "modules").exists() or not any((tmp_path / "modules").rglob("modeling_toy.py"))
    out = tmp_path / "report.json"
    trusted = _cli(str(remote_code_checkpoint), "--auto", "--trust-remote-code", "--json", str(out), env_home=tmp_path)
    assert trusted.returncode == 0, trusted.stderr
    assert "automatic, proven on a twin" in trusted.stdout       # the terminal report marks the counts
    report = json.loads(out.read_text())
    adapter = report["model"]["adapter"]
    assert adapter["name"] == "automatic" and adapter["automatic"]["proven_on_twin"] is True
    assert adapter["automatic"]["jacobian_nullity"] == adapter["automatic"]["structural_unidentified"]
    # the same weights read as Llama, by the hand-written adapter, give the same counts
    as_llama = tmp_path / "as-llama"
    shutil.copytree(remote_code_checkpoint, as_llama, ignore=shutil.ignore_patterns("*.py"))
    settings = json.loads((as_llama / "config.json").read_text())
    settings.update(model_type="llama", architectures=["LlamaForCausalLM"])
    del settings["auto_map"]
    (as_llama / "config.json").write_text(json.dumps(settings))
    by_hand = idinspect.inspect(idinspect.load(as_llama))
    assert report["totals"] == {k: v for k, v in by_hand["totals"].items() if k != "stacks"}
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(idinspect.__file__).parent / "schemas" / "report.schema.json").read_text())
    jsonschema.validate(report, schema)


def test_trust_remote_code_needs_auto(remote_code_checkpoint, tmp_path):
    run = _cli(str(remote_code_checkpoint), "--trust-remote-code", env_home=tmp_path)
    assert run.returncode == 2 and "--auto" in run.stderr
