"""Bad input through the real CLI: exit status 2, one line on stderr naming the file or tensor and
the fix, no traceback (``--debug`` shows one). Also the CLI basics: ``idinspect MODEL`` is
``idinspect inspect MODEL``, ``--version``, and ``--format json`` printing only JSON."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest
from idinspect.adapters import supported_model_types
from safetensors import safe_open
from safetensors.torch import save_file

from idinspect import cli as cli_module
from idinspect.sources import hub, remote_pin
from tests.support.cli import run_cli

SUPPORTED = ", ".join(supported_model_types())
MODEL_KEYS = ["source", "revision", "model_type", "family", "adapter", "architecture", "attention_blocks", "block_kinds", "stacks", "layers", "hidden_size", "heads", "kv_heads",
              "head_dim", "positional", "rotary_dim"]


@pytest.fixture(autouse=True)
def _no_debug_leak(monkeypatch):
    """``--debug`` sets a module-level switch; keep one test's --debug from reaching the next."""
    monkeypatch.setitem(cli_module._DEBUG, "on", False)


@pytest.fixture
def hub_calls(monkeypatch):
    """Record every snapshot_download call (none is expected for local input)."""
    calls = []

    def fake(*args, **kwargs):
        calls.append((args, kwargs))
        raise AssertionError("sent to the hub")

    monkeypatch.setattr(hub, "snapshot_download", fake)
    monkeypatch.setattr(remote_pin, "resolve_commit", fake)   # the partial-read path's first request
    return calls


def fails(*args, match: str) -> str:
    """Run the CLI; check exit 2, one stderr line matching ``match``, nothing on stdout."""
    r = run_cli(*args)
    assert r.code == 2, (r.code, r.stdout, r.stderr)
    assert r.stdout == ""
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert re.search(match, lines[0]), lines[0]
    return lines[0]


def copy_of(tiny_dir, tmp_path: Path, variant: str = "llama-gqa", **save) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_dir(variant, **save), dst)
    return dst


def edit_config(directory: Path, **changes) -> None:
    cfg = json.loads((directory / "config.json").read_text())
    cfg.update(changes)
    (directory / "config.json").write_text(json.dumps(cfg))


def edit_index(directory: Path, edit) -> None:
    path = directory / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    edit(index)
    path.write_text(json.dumps(index))


def tensors_of(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not iterable


# paths ------------------------------------------------------------------------------------------

def test_missing_path(tmp_path, hub_calls):
    fails(str(tmp_path / "nope"), match=r"nope: no such file or directory")
    fails("./nope-here", match=r"nope-here: no such file or directory")
    assert hub_calls == []


def test_a_file_instead_of_the_folder(tiny_dir, hub_calls):
    d = tiny_dir("bert")
    fails(str(d / "config.json"), match=rf"config.json: expected a checkpoint directory.*pass its folder {re.escape(str(d))}")


def test_empty_folder(tmp_path):
    fails(str(tmp_path), match=rf"{re.escape(str(tmp_path))}: no model.safetensors or model.safetensors.index.json")


def test_oddly_named_safetensors(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "model.safetensors").rename(d / "weights.safetensors")
    fails(str(d), match=r"safetensors files \['weights.safetensors'\] but neither model.safetensors")


def test_revision_with_a_local_path(tiny_dir):
    fails(str(tiny_dir("bert")), "--revision", "main", match=r"--revision applies to hub ids")


# config -----------------------------------------------------------------------------------------

def test_missing_config(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "config.json").unlink()
    fails(str(d), match=rf"{re.escape(str(d))}: no config.json")


@pytest.mark.parametrize("text, match", [
    ('{"model_type": "llama", "hidden_size": ', r"config.json: not valid JSON"),
    ("[1, 2, 3]", r"config.json: not a JSON object"),
    ('{"hidden_size": 16}', r"config.json: no model_type; add it \(supported: " + re.escape(SUPPORTED) + r"\)"),
    ('{"model_type": "llama", "hidden_size": "sixteen"}', r'config.json: hidden_size is "sixteen", not a positive integer'),
])
def test_malformed_config(text, match, tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "config.json").write_text(text)
    fails(str(d), match=match)


@pytest.mark.parametrize("model_type", ["helium", "no-such-architecture"])   # helium: the example plugin's
def test_unknown_model_type_lists_the_supported(model_type, tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    edit_config(d, model_type=model_type)
    fails(str(d), match=rf"config.json: model_type '{model_type}' is not supported \(try --auto: .*\); "
                        r"supported: " + re.escape(SUPPORTED) + "$")


def test_a_model_type_without_attention_is_refused_with_the_reason(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    edit_config(d, model_type="mamba")
    fails(str(d), match=r"config.json: model_type 'mamba' is refused: it has no attention layers")


@pytest.mark.parametrize("changes, match", [
    ({"num_key_value_heads": 3}, r"config.json: num_attention_heads 4 does not divide into num_key_value_heads 3"),
    ({"num_key_value_heads": 1}, r"tensor model.layers.0.self_attn.k_proj.weight has shape \[8, 16\] but config.json implies \[4, 16\]"),
    ({"head_dim": 8}, r"tensor model.layers.0.self_attn.q_proj.weight has shape \[16, 16\] but config.json implies \[32, 16\]"),
    ({"num_hidden_layers": 3}, r"tensor model.layers.2.self_attn.q_proj.weight is missing from the checkpoint"),
    ({"num_hidden_layers": 1}, r"tensors for layer 1 \(model.layers.1.\*\) but config.json says 1 layers"),
    ({"num_hidden_layers": 0}, r"config.json: num_hidden_layers is 0, not a positive integer"),
])
def test_config_disagreeing_with_the_weights(changes, match, tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    edit_config(d, **changes)
    fails(str(d), match=match)


def test_weights_of_another_architecture(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path, "gpt2")
    shutil.copy(tiny_dir("llama-gqa") / "config.json", d / "config.json")
    fails(str(d), match=r"no tensor named '\*layers.0.self_attn.q_proj.weight'.*model_type 'llama'")


# weights ----------------------------------------------------------------------------------------

def test_pickle_only_folder_is_refused_and_never_unpickled(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "model.safetensors").unlink()
    sentinel = tmp_path / "unpickled"

    class Payload:  # unpickling this would create the sentinel file
        def __reduce__(self):
            return (open, (str(sentinel), "w"))

    (d / "pytorch_model.bin").write_bytes(pickle.dumps(Payload()))
    line = fails(str(d), match=r"only pickle weights \(pytorch_model.bin\).*never unpickles")
    assert "save_pretrained" in line and "from_pretrained" in line  # says how to convert
    assert not sentinel.exists()


def test_pickle_next_to_safetensors_is_ignored(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "pytorch_model.bin").write_bytes(b"not even a pickle")
    assert run_cli(str(d), "--format", "json").code == 0


@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_truncated_single_file(keep, tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: int(len(data) * keep)])
    fails(str(d), match=r"model.safetensors: not a readable safetensors file .*truncated: re-download it")


def test_truncated_shard(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path, max_shard_size="20KB")
    shard = sorted(d.glob("model-*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[:-100])
    fails(str(d), match=rf"{re.escape(shard.name)}: not a readable safetensors file")


def test_git_lfs_pointer(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 1\n")
    fails(str(d), match=r"model.safetensors: a Git LFS pointer.*git lfs pull")


def test_index_naming_a_missing_tensor(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path, max_shard_size="20KB")
    shard = min(d.glob("model-*.safetensors")).name
    edit_index(d, lambda ix: ix["weight_map"].update({"model.layers.0.self_attn.q_proj.extra": shard}))
    fails(str(d), match=rf"index.json: tensor model.layers.0.self_attn.q_proj.extra is indexed in {shard} "
                        "but that shard does not contain it")


def test_index_naming_a_missing_shard(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path, max_shard_size="20KB")
    shard = max(d.glob("model-*.safetensors"))
    shard.unlink()
    fails(str(d), match=rf"index.json: names shard {shard.name}, which does not exist")


def test_indexed_tensor_missing_from_its_shard(tiny_dir, tmp_path):
    """The shard exists but was rewritten without one of its tensors."""
    d = copy_of(tiny_dir, tmp_path, max_shard_size="20KB")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = "model.layers.1.self_attn.v_proj.weight"
    shard = d / index["weight_map"][name]
    tensors = tensors_of(shard)
    del tensors[name]
    save_file(tensors, str(shard), metadata={"format": "pt"})
    fails(str(d), match=rf"tensor {re.escape(name)} is indexed in {shard.name} but that shard does not contain it")


@pytest.mark.parametrize("text, match", [
    ("{not json", r"index.json: not valid JSON"),
    ('{"metadata": {}}', r"index.json: has no 'weight_map'"),
    ('{"weight_map": {"x": "../model.safetensors"}}', r"index.json: shard name '../model.safetensors' points outside"),
])
def test_malformed_index(text, match, tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path, max_shard_size="20KB")
    (d / "model.safetensors.index.json").write_text(text)
    fails(str(d), match=match)


def test_tensor_stored_in_two_shards(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path, max_shard_size="20KB")
    first, second = sorted(d.glob("model-*.safetensors"))[:2]
    extra = tensors_of(first)
    name = min(extra)
    both = {**tensors_of(second), name: extra[name]}
    save_file(both, str(second), metadata={"format": "pt"})
    fails(str(d), match=rf"tensor {re.escape(name)} is also stored in")


# --debug ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["group", "command"])
def test_debug_shows_the_traceback(where, tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "config.json").write_text("{")
    args = ["--debug", str(d)] if where == "group" else [str(d), "--debug"]
    r = run_cli(*args)
    assert r.code == 2
    assert "Traceback (most recent call last)" in r.stderr
    assert "IdinspectError" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: ")


def test_debug_does_not_leak_into_the_next_run(tiny_dir, tmp_path):
    d = copy_of(tiny_dir, tmp_path)
    (d / "config.json").write_text("{")
    run_cli("--debug", str(d))
    r = run_cli(str(d))
    assert r.code == 2 and "Traceback" not in r.stderr


def test_typo_of_a_command_suggests_it():
    r = run_cli("exprot", "x")
    assert r.code == 2
    assert "did you mean 'export'" in r.stderr


@pytest.mark.parametrize("args,names", [
    (["export"], ["missing argument 'MODEL'", "idinspect export [OPTIONS] MODEL OUT"]),
    (["verify", "a"], ["missing argument 'B'", "idinspect verify --help"]),
    (["--bogus"], ["no such option '--bogus'", "idinspect --help"]),
    (["audit", "--fail-on", "x", "m"], ["'--fail-on'", "'x' is not one of"]),
    (["inspect", "--format", "xml", "m"], ["'--format'", "'xml' is not one of"]),
])
def test_usage_errors_are_one_line_naming_the_fix(args, names):
    """click's usage errors (three lines: usage, help hint, error) become one line, exit 2."""
    r = run_cli(*args)
    assert r.code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])


# the CLI basics ---------------------------------------------------------------------------------

def test_version():
    r = run_cli("--version")
    assert r.code == 0
    assert r.stdout.strip() == f"idinspect, version {version('idinspect')}"


def test_default_command_is_inspect(tiny_dir):
    d = str(tiny_dir("llama-gqa"))
    for fmt in ("json", "text"):
        short, full = run_cli(d, "--format", fmt), run_cli("inspect", d, "--format", fmt)
        assert short.code == full.code == 0
        assert short.stdout == full.stdout and short.stdout.strip()


def test_typo_of_a_subcommand_is_not_a_hub_call(hub_calls, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fails("exprot", match=r"no command 'exprot'; did you mean 'export'")
    fails("inpsect", match=r"no command 'inpsect'; did you mean 'inspect'")
    fails("frob/nic/ate", match=r"frob/nic/ate: no such file or directory")
    r = run_cli("exprot", "some-model")
    assert r.code == 2 and "Traceback" not in r.stderr
    assert hub_calls == []


def test_process_entry_point_delivers_everything_and_the_exit_status(tiny_dir, tmp_path):
    """``python -m idinspect`` ends with a fast exit (idinspect.cli.run): the whole report still
    reaches a pipe, files are complete, and the status is the command's."""
    import json
    import subprocess
    import sys

    report = tmp_path / "r.json"
    ok = subprocess.run([sys.executable, "-m", "idinspect", str(tiny_dir("llama-gqa")), "--format", "json",
                         "--json", str(report)], check=False, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == json.loads(report.read_text())
    bad = subprocess.run([sys.executable, "-m", "idinspect", str(tmp_path / "missing")], capture_output=True,
                         text=True, timeout=300, check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [f"error: {tmp_path / 'missing'}: no such file or directory"]
